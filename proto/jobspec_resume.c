/* jobspec_resume: keys a resume may change (see jobspec_resume.h). */
#include "jobspec_resume.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec.h"

/* Keys that change how long and how a job trains, never what it is. The
 * two transport keys change how the ranks exchange data, not the sums:
 * shared memory reduces in the tcp ring's order (comm_shm.c), so both give
 * the same bits; and full sharding with one or two gathered unit buffers
 * runs the same collectives and adds their results into the shard in the
 * same order (shard.c), so both train the same bits too (daemon_resume_
 * transport checks a changed resume against an unchanged one). */
static const char *const resume_keys[] = {
    "trainer.max_steps",
    "trainer.max_epochs",
    "trainer.log_every",
    "trainer.eval_every",
    "trainer.eval_batches",
    "trainer.grad_clip",
    "trainer.threads",
    "trainer.peak_gflops",
    "optimizer.lr",
    "optimizer.min_lr",
    "optimizer.warmup_steps",
    "optimizer.schedule",
    "optimizer.weight_decay",
    "snapshot.every",
    "snapshot.keep",
    "snapshot.on_invalid",
    "distributed.nodes",
    "distributed.max_restarts",
    "distributed.wait_timeout_s",
    "distributed.comm_shm",
    "distributed.shard_buffers",
};
#define RESUME_NKEYS (sizeof(resume_keys) / sizeof(resume_keys[0]))

bool gpt_jobspec_resume_key_ok(const char *key)
{
    for (size_t i = 0; i < RESUME_NKEYS; i++)
        if (strcmp(key, resume_keys[i]) == 0)
            return true;
    return false;
}

const char *gpt_jobspec_resume_keys(void)
{
    static const char list[] =
        "trainer.max_steps, trainer.max_epochs, trainer.log_every, trainer.eval_every,"
        " trainer.eval_batches, trainer.grad_clip, trainer.threads, trainer.peak_gflops,"
        " optimizer.lr, optimizer.min_lr, optimizer.warmup_steps, optimizer.schedule,"
        " optimizer.weight_decay, snapshot.every, snapshot.keep, snapshot.on_invalid,"
        " distributed.nodes, distributed.max_restarts, distributed.wait_timeout_s,"
        " distributed.comm_shm, distributed.shard_buffers";
    return list;
}

/* The text form of a JSON scalar as an override takes it; -1 when the
 * value is not a string, number or boolean, else its length. */
static int resume_value_text(const json_t *v, char *buf, size_t cap)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        return snprintf(buf, cap, "%s", json_string_value(v));
    case JSON_INTEGER:
        return snprintf(buf, cap, "%" PRId64, (int64_t)json_integer_value(v));
    case JSON_REAL:
        return snprintf(buf, cap, "%.17g", json_real_value(v));
    case JSON_TRUE:
        return snprintf(buf, cap, "true");
    case JSON_FALSE:
        return snprintf(buf, cap, "false");
    default:
        return -1;
    }
}

int gpt_jobspec_resume_assignments(const json_t *overrides, char ***ret_list, size_t *ret_n,
                                   struct gpt_err *err)
{
    *ret_list = NULL;
    *ret_n = 0;
    size_t n = json_object_size(overrides);
    if (n == 0)
        return 0;
    if (n > GPT_RESUME_OVERRIDES_MAX)
        return gpt_err_set(err, -GPT_E_SPEC, "overrides", "more than %d keys in one resume",
                           GPT_RESUME_OVERRIDES_MAX);
    /* Pointers first, then each "key=value\0" (keys and values are bounded
     * by the control line's length). */
    size_t bytes = n * sizeof(char *);
    const char *key;
    const json_t *v;
    char val[1024];
    json_object_foreach((json_t *)overrides, key, v)
    {
        int len = resume_value_text(v, val, sizeof(val));
        if (len < 0)
            return gpt_err_set(err, -GPT_E_SPEC, key,
                               "a resume override must be a string, "
                               "number or boolean");
        if ((size_t)len >= sizeof(val))
            return gpt_err_set(err, -GPT_E_SPEC, key, "value longer than %zu bytes",
                               sizeof(val) - 1);
        bytes += strlen(key) + 1 + (size_t)len + 1;
    }
    char **list = malloc(bytes);
    if (!list)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    char *p = (char *)(list + n);
    size_t i = 0;
    json_object_foreach((json_t *)overrides, key, v)
    {
        resume_value_text(v, val, sizeof(val));
        int w = sprintf(p, "%s=%s", key, val);
        list[i++] = p;
        p += w + 1;
        if (gpt_jobspec_resume_key_ok(key))
            continue;
        /* A key no job has gets the parser's own message; a real key that
         * may not change is refused with the list of those that may. */
        struct gpt_job probe;
        gpt_jobspec_defaults(&probe);
        int rc = gpt_jobspec_override(&probe, list[i - 1], err);
        if (rc == -GPT_E_SPEC && strstr(err->msg, "unknown key")) {
            free(list);
            return rc;
        }
        free(list);
        return gpt_err_set(err, -GPT_E_SPEC, key,
                           "cannot change when a job resumes: it would change the model, the data"
                           " or the batches (submit a new job, or --init-from this one); a resume"
                           " may change %s",
                           gpt_jobspec_resume_keys());
    }
    *ret_list = list;
    *ret_n = n;
    return 0;
}
