/*
 * gptd: main() only chooses between the foreground trainer (`gptd run`)
 * and the daemon; both live in their own files.
 */
#include <string.h>

#include "cli.h"

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "run") == 0)
        return gptd_run_main(argc - 1, argv + 1);
    return gptd_daemon_main(argc, argv);
}
