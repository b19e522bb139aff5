/*
 * metric_csv: see metric_csv.h.
 */
#include "metric_csv.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

const char *gpt_metric_csv_header(void)
{
    return "run_id,step,max_steps,epoch,loss,val_loss,accuracy,lr,grad_norm,tokens_per_s,"
           "ms_per_step,mfu,eta_s,tokens,world_size,mem_params_bytes,mem_grads_bytes,"
           "mem_optim_bytes,mem_acts_bytes,time\n";
}

/* A row under construction: the first failure latches. */
struct csv_row {
    char *p;
    size_t len, cap;
    int err;
};

static void csv_put(struct csv_row *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void csv_put(struct csv_row *r, const char *fmt, ...)
{
    if (r->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(r->p + r->len, r->cap - r->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= r->cap - r->len) {
        r->err = -ENOSPC;
        return;
    }
    r->len += (size_t)n;
}

/* ",VALUE": the shortest of %.15g..%.17g that reads back exactly; empty
 * where the value is not known. */
static void csv_real(struct csv_row *r, double v)
{
    if (!isfinite(v)) {
        csv_put(r, ",");
        return;
    }
    char s[32];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(s, sizeof(s), "%.*g", prec, v);
        if (strtod(s, NULL) == v)
            break;
    }
    csv_put(r, ",%s", s);
}

int gpt_metric_csv_row(const struct gpt_metric *m, char *buf, size_t cap)
{
    struct csv_row r = {buf, 0, cap, cap ? 0 : -ENOSPC};
    csv_put(&r, "%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRIu64, m->run_id, m->step, m->max_steps,
            m->epoch);
    csv_real(&r, m->loss);
    csv_real(&r, m->val_loss);
    csv_real(&r, m->accuracy);
    csv_real(&r, m->lr);
    csv_real(&r, m->grad_norm);
    csv_real(&r, m->tokens_per_s);
    csv_real(&r, m->ms_per_step);
    /* MFU 0 means no peak was known (older records, a device off the table). */
    csv_real(&r, m->mfu > 0 ? m->mfu : NAN);
    csv_real(&r, m->eta_s);
    csv_put(&r, ",%" PRIu64 ",%" PRId32 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64, m->tokens,
            m->world_size, m->mem_params_bytes, m->mem_grads_bytes, m->mem_optim_bytes,
            m->mem_acts_bytes);
    csv_real(&r, m->time);
    csv_put(&r, "\n");
    return r.err ? r.err : (int)r.len;
}
