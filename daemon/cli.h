/*
 * cli: the entry points gptd's main() dispatches to.
 *   gptd run JOB.json [...]   foreground training (run.c)
 *   gptd [--config FILE] ...  the daemon (daemon.c)
 * Each returns the process exit status.
 */
#ifndef GPTD_CLI_H
#define GPTD_CLI_H

int gptd_run_main(int argc, char **argv);
int gptd_daemon_main(int argc, char **argv);

#endif
