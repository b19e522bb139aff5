/* metric_text: a metric's one-line text (see metric_text.h). */
#include "metric_text.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

struct line {
    char *buf;
    size_t cap, len;
};

static void line_add(struct line *l, const char *fmt, ...)
{
    if (l->len >= l->cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(l->buf + l->len, l->cap - l->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        l->len += (size_t)n;
}

const char *gpt_metric_line(const struct gpt_metric *m, char *buf, size_t cap)
{
    struct line l = {buf, cap, 0};
    if (cap)
        buf[0] = '\0';
    if (m->max_steps > 0)
        line_add(&l, "step %lld/%lld", (long long)m->step, (long long)m->max_steps);
    else
        line_add(&l, "step %lld", (long long)m->step);
    line_add(&l, " | epoch %llu | loss %.4f", (unsigned long long)m->epoch, m->loss);
    if (isfinite(m->val_loss))
        line_add(&l, " | val %.4f", m->val_loss);
    if (isfinite(m->accuracy))
        line_add(&l, " | acc %.1f%%", 100 * m->accuracy);
    line_add(&l, " | lr %.2e", m->lr);
    double r = m->tokens_per_s;
    if (r >= 1e6)
        line_add(&l, " | %.1fM tok/s", r / 1e6);
    else if (r >= 1e3)
        line_add(&l, " | %.1fk tok/s", r / 1e3);
    else if (r >= 0)
        line_add(&l, " | %.0f tok/s", r);
    if (isfinite(m->ms_per_step) && m->ms_per_step > 0)
        line_add(&l, " | %.1f ms/step", m->ms_per_step);
    if (isfinite(m->mfu) && m->mfu > 0)
        line_add(&l, " | mfu %.1f%%", 100 * m->mfu);
    if (isfinite(m->eta_s) && m->eta_s >= 0 && m->eta_s < 1e9) {
        long t = (long)(m->eta_s + 0.5);
        if (t >= 3600)
            line_add(&l, " | eta %ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
        else
            line_add(&l, " | eta %ld:%02ld", t / 60, t % 60);
    }
    return buf;
}
