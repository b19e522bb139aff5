/*
 * gen_jobman: writes gptd-job(5), the job-spec reference, from the job-spec
 * table (gpt_jobspec_help(1)), so the page never disagrees with the parser.
 * Run at build time by packaging/cpack.cmake.
 *
 *   gen_jobman OUTPUT
 *
 * Exit status 0, or 1 when the page could not be built or written.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_jobman OUTPUT\n");
        return 1;
    }
    char *page = gpt_jobspec_help(1);
    if (!page) {
        fprintf(stderr, "gen_jobman: out of memory\n");
        return 1;
    }
    int status = 0;
    FILE *f = fopen(argv[1], "w");
    if (!f || fputs(page, f) == EOF || fclose(f) == EOF) {
        fprintf(stderr, "gen_jobman: %s: %s\n", argv[1], strerror(errno));
        status = 1;
    }
    free(page);
    return status;
}
