/*
 * gptd: main() only chooses between the foreground trainer (`gptd run`)
 * and the daemon; both live in their own files.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blas_select.h"
#include "cli.h"
#include "export_model.h"
#include "tokenize.h"

/* OpenMP's threads spin after every parallel region by default, stealing
 * the cores OpenBLAS's threads need for the next matrix product when a
 * worker uses several threads (measured: GPT-2 124M on two cores, 3.8 s
 * per step spinning, 1.9 s passive). libgomp reads its wait policy when it
 * is loaded, before main, so gptd sets it and re-executes itself once; a
 * policy the user set is kept. The PID stays the same (systemd, Slurm).
 * OpenBLAS's choice of kernels is made at load time too (blas_select.h):
 * one exec serves both. True when the environment changed. */
static bool main_set_omp_wait_policy(void)
{
    if (getenv("OMP_WAIT_POLICY"))
        return false;
    return setenv("OMP_WAIT_POLICY", "PASSIVE", 1) == 0;
}

int main(int argc, char **argv)
{
    bool omp = main_set_omp_wait_policy();
    if (blas_select_env() || omp)
        execv("/proc/self/exe", argv);
    /* exec failed: run on with the library defaults */
    if (argc > 1 && strcmp(argv[1], "run") == 0)
        return gptd_run_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "tokenize") == 0)
        return gptd_tokenize_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "export") == 0)
        return gptd_export_main(argc - 1, argv + 1);
    int status = gptd_daemon_main(argc, argv);
    if (status & GPTD_EXIT_FORCED) {
        fflush(NULL);
        _exit(status & 0xff);
    }
    return status;
}
