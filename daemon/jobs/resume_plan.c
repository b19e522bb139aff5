/* resume_plan: the spec, step and learning rate of a resume (see resume_plan.h). */
#include "resume_plan.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec.h"
#include "jobspec_resume.h"
#include "optim.h"

/* Appends "key old -> new" for each override that changed the spec. */
static void plan_note_changes(struct resume_plan *p, const json_t *old_spec, const json_t *new_spec,
                              const json_t *overrides)
{
    const char *key;
    const json_t *v;
    size_t len = 0;
    json_object_foreach((json_t *)overrides, key, v)
    {
        (void)v;
        char sect[64];
        const char *dot = strchr(key, '.');
        if (!dot || (size_t)(dot - key) >= sizeof(sect))
            continue;
        memcpy(sect, key, (size_t)(dot - key));
        sect[dot - key] = '\0';
        const json_t *a = json_object_get(json_object_get(old_spec, sect), dot + 1);
        const json_t *b = json_object_get(json_object_get(new_spec, sect), dot + 1);
        if (json_equal((json_t *)a, (json_t *)b))
            continue;
        char *as = a ? json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        char *bs = b ? json_dumps(b, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        int w = snprintf(p->changes + len, sizeof(p->changes) - len, "%s%s %s -> %s",
                         len ? ", " : "", key, as ? as : "?", bs ? bs : "?");
        free(as);
        free(bs);
        if (w < 0 || (size_t)w >= sizeof(p->changes) - len)
            break;
        len += (size_t)w;
    }
}

int resume_plan_make(struct db *db, const struct db_job *j, int64_t snapshot_step,
                     const json_t *overrides, struct resume_plan *ret, struct gpt_err *err)
{
    char **assign = NULL;
    size_t n_assign = 0;
    json_t *old_spec = NULL, *new_spec = NULL;
    struct gpt_job before, after;
    int rc;

    memset(ret, 0, sizeof(*ret));
    ret->lr_last = ret->lr_next = ret->lr_end = NAN;
    if (overrides && (rc = gpt_jobspec_resume_assignments(overrides, &assign, &n_assign, err)) < 0)
        return rc;
    size_t len = strlen(j->spec_json);
    if ((rc = gpt_jobspec_parse(j->spec_json, len, NULL, 0, &before, err)) < 0 ||
        (rc = gpt_jobspec_parse(j->spec_json, len, (const char *const *)assign, n_assign, &after,
                                err)) < 0)
        goto out;

    ret->from_step = snapshot_step;
    if (snapshot_step < 0) {
        if ((rc = db_snapshot_newest_step(db, j->id, &ret->from_step, err)) < 0)
            goto out;
        if (ret->from_step < 0)
            ret->from_step = 0;
    }
    ret->max_steps = after.trainer.max_steps;
    if (after.trainer.max_steps > 0 && ret->from_step >= after.trainer.max_steps) {
        rc =
            gpt_err_set(err, -EALREADY, "trainer.max_steps",
                        "job %lld's snapshot is at step %lld and trainer.max_steps is %lld: nothing"
                        " left to train; resume with trainer.max_steps=N for some N above %lld",
                        (long long)j->id, (long long)ret->from_step,
                        (long long)after.trainer.max_steps, (long long)ret->from_step);
        goto out;
    }
    if (ret->from_step > 0 && before.trainer.max_steps > 0)
        ret->lr_last = gpt_lr_at(&before.optimizer, ret->from_step - 1, before.trainer.max_steps);
    if (after.trainer.max_steps > 0) {
        ret->lr_next = gpt_lr_at(&after.optimizer, ret->from_step, after.trainer.max_steps);
        ret->lr_end =
            gpt_lr_at(&after.optimizer, after.trainer.max_steps - 1, after.trainer.max_steps);
    }
    if (n_assign) {
        char *s = gpt_jobspec_to_json(&after);
        old_spec = json_loads(j->spec_json, 0, NULL);
        new_spec = s ? json_loads(s, 0, NULL) : NULL;
        if (!s || !new_spec) {
            free(s);
            rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
            goto out;
        }
        plan_note_changes(ret, old_spec, new_spec, overrides);
        if (ret->changes[0])
            ret->spec_json = s;
        else
            free(s);
    }
    rc = 0;
out:
    json_decref(old_spec);
    json_decref(new_spec);
    free(assign);
    return rc;
}

void resume_plan_done(struct resume_plan *p)
{
    free(p->spec_json);
    p->spec_json = NULL;
}

static json_t *plan_real(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

json_t *resume_plan_json(const struct resume_plan *p)
{
    json_t *o = json_pack("{s:I, s:I, s:s}", "from_step", (json_int_t)p->from_step, "max_steps",
                          (json_int_t)p->max_steps, "changes", p->changes);
    if (!o)
        return NULL;
    json_object_set_new(o, "lr_last", plan_real(p->lr_last));
    json_object_set_new(o, "lr_next", plan_real(p->lr_next));
    json_object_set_new(o, "lr_end", plan_real(p->lr_end));
    return o;
}
