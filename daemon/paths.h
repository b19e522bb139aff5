/*
 * paths: the directories a job may touch. A submitted job's data files must
 * lie under the configured data roots and its snapshot directory under the
 * snapshot roots (or the state directory), with symbolic links and ".."
 * resolved first, so a job cannot make gptd read or write files elsewhere.
 * Loop thread (it calls realpath and glob: short, local file-system calls).
 */
#ifndef GPTD_PATHS_H
#define GPTD_PATHS_H

#include "gpt_err.h"
#include "jobspec.h"

/* 0 when every path of `job` is allowed; otherwise -EACCES with err->path
 * naming the job key ("data.path") and err->msg the file and the roots. */
int paths_check_job(const struct gpt_job *job, const char *data_roots, const char *snapshot_roots,
                    const char *state_dir, struct gpt_err *err);

/* 0 when `path` (resolved) lies under one of the ':'-separated `roots`
 * (each resolved too), -EACCES otherwise. A path that does not exist yet
 * is resolved through its nearest existing parent. */
int paths_under(const char *path, const char *roots);

#endif
