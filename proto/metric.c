/*
 * metric: JSON encoding and decoding of metric and event records (see
 * metric.h for the keys). Pure.
 */
#include "metric.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* Adds a real number, or nothing when it is not finite (JSON has no NaN). */
static int put_real(json_t *o, const char *key, double v)
{
    if (!isfinite(v))
        return 0;
    return json_object_set_new(o, key, json_real(v));
}

static int put_int(json_t *o, const char *key, json_int_t v)
{
    return json_object_set_new(o, key, json_integer(v));
}

json_t *gpt_metric_to_json(const struct gpt_metric *m)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int rc = 0;
    rc |= json_object_set_new(o, "type", json_string("metric"));
    rc |= put_int(o, "step", m->step);
    rc |= put_int(o, "max_steps", m->max_steps);
    rc |= put_int(o, "epoch", (json_int_t)m->epoch);
    rc |= put_real(o, "loss", m->loss);
    rc |= put_real(o, "val_loss", m->val_loss);
    rc |= put_real(o, "accuracy", m->accuracy);
    rc |= put_real(o, "lr", m->lr);
    rc |= put_real(o, "grad_norm", m->grad_norm);
    rc |= put_real(o, "tokens_per_s", m->tokens_per_s);
    rc |= put_real(o, "ms_per_step", m->ms_per_step);
    rc |= put_real(o, "mfu", m->mfu);
    rc |= put_real(o, "eta_s", m->eta_s);
    rc |= put_int(o, "tokens", (json_int_t)m->tokens);
    rc |= put_int(o, "world_size", m->world_size);
    rc |= put_int(o, "run_id", m->run_id);
    rc |= put_int(o, "mem_params_bytes", (json_int_t)m->mem_params_bytes);
    rc |= put_int(o, "mem_grads_bytes", (json_int_t)m->mem_grads_bytes);
    rc |= put_int(o, "mem_optim_bytes", (json_int_t)m->mem_optim_bytes);
    rc |= put_int(o, "mem_acts_bytes", (json_int_t)m->mem_acts_bytes);
    rc |= put_int(o, "mem_work_bytes", (json_int_t)m->mem_work_bytes);
    rc |= put_real(o, "time", m->time);
    if (m->n_rank_step_ms > 0) {
        json_t *a = json_array();
        for (int32_t i = 0; a && i < m->n_rank_step_ms && i < GPT_METRIC_RANKS_MAX; i++)
            rc |= json_array_append_new(
                a, json_real(isfinite(m->rank_step_ms[i]) ? m->rank_step_ms[i] : 0));
        rc |= a ? json_object_set_new(o, "rank_step_ms", a) : -1;
    }
    if (rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *gpt_event_to_json(const struct gpt_event *e)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int rc = 0;
    rc |= json_object_set_new(o, "type", json_string("event"));
    rc |= json_object_set_new(o, "kind", json_string(e->kind));
    rc |= json_object_set_new(o, "message", json_string(e->message));
    rc |= put_int(o, "step", e->step);
    rc |= put_int(o, "run_id", e->run_id);
    rc |= put_real(o, "time", e->time);
    if (rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Reads an optional number; absent -> `dflt`; present but not a number ->
 * error naming the key. */
static int get_real(const json_t *o, const char *key, double dflt, double *ret, struct gpt_err *err)
{
    const json_t *v = json_object_get(o, key);
    if (!v) {
        *ret = dflt;
        return 0;
    }
    if (!json_is_number(v))
        return gpt_err_set(err, -EINVAL, key, "%s: expected a number", key);
    *ret = json_number_value(v);
    return 0;
}

static int get_int(const json_t *o, const char *key, int64_t *ret, struct gpt_err *err)
{
    const json_t *v = json_object_get(o, key);
    if (!v) {
        *ret = 0;
        return 0;
    }
    if (!json_is_integer(v))
        return gpt_err_set(err, -EINVAL, key, "%s: expected an integer", key);
    *ret = json_integer_value(v);
    return 0;
}

/* rank_step_ms: optional, an array of at most GPT_METRIC_RANKS_MAX
 * finite numbers >= 0. */
static int get_rank_ms(const json_t *o, struct gpt_metric *m, struct gpt_err *err)
{
    const json_t *a = json_object_get(o, "rank_step_ms");
    if (!a)
        return 0;
    if (!json_is_array(a) || json_array_size(a) > GPT_METRIC_RANKS_MAX)
        return gpt_err_set(err, -EINVAL, "rank_step_ms",
                           "rank_step_ms: expected an array of at most %d numbers",
                           GPT_METRIC_RANKS_MAX);
    size_t i;
    const json_t *v;
    json_array_foreach(a, i, v)
    {
        double x = json_number_value(v);
        if (!json_is_number(v) || !isfinite(x) || x < 0 || x > 1e12)
            return gpt_err_set(err, -EINVAL, "rank_step_ms",
                               "rank_step_ms[%zu]: expected milliseconds (a number >= 0)", i);
        m->rank_step_ms[i] = (float)x;
    }
    m->n_rank_step_ms = (int32_t)json_array_size(a);
    return 0;
}

int gpt_metric_from_json(const json_t *o, struct gpt_metric *ret, struct gpt_err *err)
{
    struct gpt_metric m;
    int64_t epoch = 0, tokens = 0, world = 0, mp = 0, mg = 0, mo = 0, ma = 0, mw = 0;
    int rc;
    if (!json_is_object(o))
        return gpt_err_set(err, -EINVAL, "", "metric: expected an object");
    memset(&m, 0, sizeof(m));
    if ((rc = get_int(o, "step", &m.step, err)) ||
        (rc = get_int(o, "max_steps", &m.max_steps, err)) ||
        (rc = get_int(o, "epoch", &epoch, err)) || (rc = get_int(o, "tokens", &tokens, err)) ||
        (rc = get_int(o, "world_size", &world, err)) ||
        (rc = get_int(o, "run_id", &m.run_id, err)) ||
        (rc = get_int(o, "mem_params_bytes", &mp, err)) ||
        (rc = get_int(o, "mem_grads_bytes", &mg, err)) ||
        (rc = get_int(o, "mem_optim_bytes", &mo, err)) ||
        (rc = get_int(o, "mem_acts_bytes", &ma, err)) ||
        (rc = get_int(o, "mem_work_bytes", &mw, err)) ||
        (rc = get_real(o, "loss", NAN, &m.loss, err)) ||
        (rc = get_real(o, "val_loss", NAN, &m.val_loss, err)) ||
        (rc = get_real(o, "accuracy", NAN, &m.accuracy, err)) ||
        (rc = get_real(o, "lr", NAN, &m.lr, err)) ||
        (rc = get_real(o, "grad_norm", NAN, &m.grad_norm, err)) ||
        (rc = get_real(o, "tokens_per_s", NAN, &m.tokens_per_s, err)) ||
        (rc = get_real(o, "ms_per_step", NAN, &m.ms_per_step, err)) ||
        (rc = get_real(o, "mfu", NAN, &m.mfu, err)) ||
        (rc = get_real(o, "eta_s", NAN, &m.eta_s, err)) ||
        (rc = get_real(o, "time", 0, &m.time, err)) || (rc = get_rank_ms(o, &m, err)))
        return rc;
    m.epoch = (uint64_t)epoch;
    m.tokens = (uint64_t)tokens;
    m.world_size = (int32_t)world;
    m.mem_params_bytes = (uint64_t)mp;
    m.mem_grads_bytes = (uint64_t)mg;
    m.mem_optim_bytes = (uint64_t)mo;
    m.mem_acts_bytes = (uint64_t)ma;
    m.mem_work_bytes = (uint64_t)mw;
    *ret = m;
    return 0;
}

int gpt_event_from_json(const json_t *o, struct gpt_event *ret, struct gpt_err *err)
{
    struct gpt_event e;
    int rc;
    if (!json_is_object(o))
        return gpt_err_set(err, -EINVAL, "", "event: expected an object");
    memset(&e, 0, sizeof(e));
    const json_t *kind = json_object_get(o, "kind"), *msg = json_object_get(o, "message");
    if (!json_is_string(kind))
        return gpt_err_set(err, -EINVAL, "kind", "kind: expected a string");
    if (msg && !json_is_string(msg))
        return gpt_err_set(err, -EINVAL, "message", "message: expected a string");
    snprintf(e.kind, sizeof(e.kind), "%s", json_string_value(kind));
    if (msg)
        snprintf(e.message, sizeof(e.message), "%s", json_string_value(msg));
    if ((rc = get_int(o, "step", &e.step, err)) || (rc = get_int(o, "run_id", &e.run_id, err)) ||
        (rc = get_real(o, "time", 0, &e.time, err)))
        return rc;
    *ret = e;
    return 0;
}
