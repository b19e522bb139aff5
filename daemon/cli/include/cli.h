/*
 * cli: the entry points gptd's main() dispatches to.
 *   gptd run JOB.json [...]   foreground training (run.c)
 *   gptd [--config FILE] ...  the daemon (daemon.c)
 * Each returns the process exit status; gptd_daemon_main may add
 * GPTD_EXIT_FORCED to it, and main() then exits at once (_exit: threads of a
 * forced stop may still run, so no exit handler may run under them).
 */
#ifndef GPTD_CLI_H
#define GPTD_CLI_H

#define GPTD_EXIT_FORCED 0x100

int gptd_run_main(int argc, char **argv);
int gptd_daemon_main(int argc, char **argv);

#endif
