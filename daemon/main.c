/*
 * gptd entry point (placeholder until the run command lands).
 */
#include <stdio.h>

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "usage: gptd run JOB.json\n");
    return 2;
}
