/*
 * test_cudnn_attn: the cuDNN attention graph (engine/ops/cuda/cuda_dnn_attn.c)
 * built against a fake cuDNN table, without a GPU or cuDNN:
 *  - the layouts of q, k^T, v, o, the statistics and the gradients in
 *    qkv's and out's memory, element for element;
 *  - forward and backward graphs: every descriptor finalized with the
 *    attributes its kind needs before it is finalized or used as another's
 *    attribute; each product's (m, k) x (k, n) = (m, n); each pointwise
 *    output shaped as its first input, each reduction's last dim 1; the
 *    operation counts and the variant pack's tensors; the backward never
 *    takes an engine that says it is nondeterministic;
 *  - a refusal (a finalize failing with NOT_SUPPORTED, or no deterministic
 *    engine) returns -ENOTSUP naming the step and status, and destroys
 *    all it made;
 *  - the per-shape cache: a refused shape is not asked of cuDNN again
 *    (the caller falls back), a built one is reused, an execution passes
 *    the caller's pointers and the by-value scalars, and a failed
 *    execution makes that shape refuse from then on.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cuda_dnn_attn.h"

/* ---- the fake cuDNN (values as cudnn_graph_v9.h) ---------------------------- */

enum {
    F_TENSOR = 17,
    F_POINTWISE = 0,
    F_OP_PW = 13,
    F_MATMUL = 18,
    F_OP_MM = 19,
    F_REDUCTION = 21,
    F_OP_RED = 22,
    F_OP_RESHAPE = 31,
    F_GRAPH = 15,
    F_HEUR = 4,
    F_CFG = 3,
    F_ENGINE = 2,
    F_PLAN = 5,
    F_VP = 16,
    F_AT_DESC = 15,
};

#define FAKE_ATTRS 16
#define FAKE_DESCS 4096

struct fattr {
    int name, type;
    int64_t n;
    int64_t v[64]; /* integers and enums */
    void *d[64];   /* descriptors, handles and pointers */
    float f;
};

struct fdesc {
    int type, finalized, live, cfg_index;
    struct fattr a[FAKE_ATTRS];
    int na;
};

static struct fdesc descs[FAKE_DESCS];
static int ndescs, live, creates, executes, misuse;
static int fail_type = -1, fail_status = 3000, nondet_all, exec_status;
static int last_vp_n;
static int64_t last_vp_uids[32];
static void *last_vp_ptrs[32];

static void fake_reset(void)
{
    memset(descs, 0, sizeof(descs));
    ndescs = live = creates = executes = misuse = 0;
    fail_type = -1;
    nondet_all = exec_status = 0;
}

static struct fattr *attr(struct fdesc *d, int name)
{
    for (int i = 0; i < d->na; i++)
        if (d->a[i].name == name)
            return &d->a[i];
    return NULL;
}

static size_t fake_version(void)
{
    return 91900;
}

static const char *fake_error_string(int status)
{
    return status == 3000 ? "CUDNN_STATUS_NOT_SUPPORTED" : "fake";
}

static int fake_create(void **h)
{
    static int handle;
    *h = &handle;
    return 0;
}

static int fake_destroy(void *h)
{
    (void)h;
    return 0;
}

static int fake_set_stream(void *h, void *s)
{
    (void)h;
    (void)s;
    return 0;
}

static int fake_create_desc(int type, void **ret)
{
    assert_true(ndescs < FAKE_DESCS);
    struct fdesc *d = &descs[ndescs++];
    d->type = type;
    d->live = 1;
    live++;
    creates++;
    *ret = d;
    return 0;
}

static int fake_destroy_desc(void *p)
{
    struct fdesc *d = p;
    if (!d->live)
        misuse++; /* destroyed twice */
    d->live = 0;
    live--;
    return 0;
}

static int fake_set(void *p, int name, int type, int64_t n, const void *values)
{
    struct fdesc *d = p;
    if (d->finalized || n > 64 || d->na >= FAKE_ATTRS) {
        misuse++;
        return 2000;
    }
    struct fattr *a = attr(d, name);
    if (!a)
        a = &d->a[d->na++];
    memset(a, 0, sizeof(*a));
    a->name = name;
    a->type = type;
    a->n = n;
    for (int64_t i = 0; i < n; i++) {
        switch (type) {
        case 3: /* INT64 */
            a->v[i] = ((const int64_t *)values)[i];
            break;
        case 2: /* BOOLEAN */
            a->v[i] = ((const _Bool *)values)[i];
            break;
        case 0: /* HANDLE */
        case 6: /* VOID_PTR */
        case F_AT_DESC:
            a->d[i] = ((void *const *)values)[i];
            if (type == F_AT_DESC && !((struct fdesc *)a->d[i])->finalized)
                misuse++; /* an unfinalized descriptor as a value */
            break;
        default: /* the int enums: data type, modes, operators */
            a->v[i] = ((const int *)values)[i];
        }
    }
    return 0;
}

static int64_t *dims_of(void *t)
{
    struct fattr *a = attr(t, 902);
    return a ? a->v : NULL;
}

static int same_dims(void *x, void *y)
{
    const int64_t *a = dims_of(x), *b = dims_of(y);
    return a && b && memcmp(a, b, 4 * sizeof(int64_t)) == 0;
}

/* The attributes each kind needs, and the shapes its inputs must agree on. */
static int finalize_ok(struct fdesc *d)
{
    switch (d->type) {
    case F_TENSOR:
        return attr(d, 906) && attr(d, 901) && attr(d, 902) && attr(d, 902)->n == 4 &&
               attr(d, 903) && attr(d, 903)->n == 4 && attr(d, 900);
    case F_POINTWISE:
        return attr(d, 0) && attr(d, 1) && (attr(d, 0)->v[0] != 501 || attr(d, 9));
    case F_OP_PW: {
        struct fattr *pd = attr(d, 750), *x = attr(d, 751), *y = attr(d, 753);
        if (!pd || !x || !y || !same_dims(x->d[0], y->d[0]))
            return 0;
        int mode = (int)attr(pd->d[0], 0)->v[0];
        int binary = mode == 0 || mode == 1 || mode == 6 || mode == 9 || mode == 303;
        if (binary && !attr(d, 752))
            return 0;
        return mode != 601 || (attr(d, 752) && attr(d, 758));
    }
    case F_MATMUL:
        return attr(d, 1500) != NULL;
    case F_OP_MM: {
        struct fattr *a = attr(d, 1520), *b = attr(d, 1521), *c = attr(d, 1522);
        if (!a || !b || !c || !attr(d, 1523))
            return 0;
        const int64_t *da = dims_of(a->d[0]), *db = dims_of(b->d[0]), *dc = dims_of(c->d[0]);
        return da[0] == dc[0] && da[1] == dc[1] && db[0] == dc[0] && db[1] == dc[1] &&
               da[2] == dc[2] && da[3] == db[2] && db[3] == dc[3];
    }
    case F_REDUCTION:
        return attr(d, 1600) && attr(d, 1601);
    case F_OP_RED: {
        struct fattr *x = attr(d, 1610), *y = attr(d, 1611);
        if (!x || !y || !attr(d, 1612))
            return 0;
        const int64_t *dx = dims_of(x->d[0]), *dy = dims_of(y->d[0]);
        return dx[0] == dy[0] && dx[1] == dy[1] && dx[2] == dy[2] && dy[3] == 1;
    }
    case F_OP_RESHAPE: {
        struct fattr *x = attr(d, 2200), *y = attr(d, 2201);
        if (!x || !y)
            return 0;
        const int64_t *dx = dims_of(x->d[0]), *dy = dims_of(y->d[0]);
        return dx[0] * dx[1] * dx[2] * dx[3] == dy[0] * dy[1] * dy[2] * dy[3];
    }
    case F_GRAPH:
        return attr(d, 800) && attr(d, 801) && attr(d, 801)->n > 0;
    case F_HEUR:
        return attr(d, 200) && attr(d, 201);
    case F_PLAN:
        return attr(d, 400) && attr(d, 401);
    case F_VP:
        return attr(d, 1000) && attr(d, 1001) && attr(d, 1003) &&
               attr(d, 1000)->n == attr(d, 1001)->n;
    default:
        return 0;
    }
}

static int fake_finalize(void *p)
{
    struct fdesc *d = p;
    if (d->type == fail_type)
        return fail_status;
    if (d->finalized || !finalize_ok(d)) {
        misuse++;
        return 2000;
    }
    d->finalized = 1;
    return 0;
}

/* Two engine configurations; the first's engine says it is nondeterministic. */
static int fake_get(void *p, int name, int type, int64_t req, int64_t *ret_n, void *values)
{
    struct fdesc *d = p;
    (void)type;
    if (!d->finalized && d->type != F_CFG && d->type != F_ENGINE) {
        misuse++;
        return 2000;
    }
    switch (name) {
    case 202: /* heuristics results */
        *ret_n = 2;
        for (int64_t i = 0; i < req && i < 2; i++) {
            struct fdesc *c = ((void **)values)[i];
            c->finalized = 1;
            c->cfg_index = (int)i;
        }
        return 0;
    case 300: { /* a config's engine */
        struct fdesc *e = *(void **)values;
        e->finalized = 1;
        e->cfg_index = d->cfg_index;
        *ret_n = 1;
        return 0;
    }
    case 1303: /* an engine's numerical notes */
        *ret_n = d->cfg_index == 0 || nondet_all ? 2 : 1;
        ((int *)values)[0] = 0; /* tensor core */
        if (*ret_n == 2)
            ((int *)values)[1] = 4; /* nondeterministic */
        return 0;
    case 402: /* a plan's workspace */
        *(int64_t *)values = 4096 + ((struct fdesc *)attr(d, 401)->d[0])->cfg_index;
        *ret_n = 1;
        return 0;
    default:
        misuse++;
        return 2000;
    }
}

static int fake_execute(void *h, void *plan, void *vp)
{
    struct fdesc *p = plan, *v = vp;
    (void)h;
    if (!p->finalized || !v->finalized)
        misuse++;
    struct fattr *u = attr(v, 1000), *ptr = attr(v, 1001);
    last_vp_n = (int)u->n;
    for (int64_t i = 0; i < u->n; i++) {
        last_vp_uids[i] = u->v[i];
        last_vp_ptrs[i] = ptr->d[i];
    }
    executes++;
    return exec_status;
}

static const struct gpt_cudnn_api fake = {
    fake_version,    fake_error_string, fake_create,       fake_destroy,
    fake_set_stream, fake_create_desc,  fake_destroy_desc, fake_set,
    fake_get,        fake_finalize,     fake_execute,
};

/* ---- checks ------------------------------------------------------------------ */

static void test_layouts(void **state)
{
    (void)state;
    /* B 2, T 5, C 12, NH 3: hs 4; qkv rows of 36, out rows of 12 */
    struct gpt_cudnn_sdpa_shape f = {2, 5, 12, 3, 0}, b = {2, 5, 12, 3, 1};
    int64_t d[4], s[4];
    const int64_t qd[4] = {2, 3, 5, 4}, qs[4] = {180, 4, 36, 1};
    const int64_t kd[4] = {2, 3, 4, 5}, ks[4] = {180, 4, 1, 36};
    const int64_t od[4] = {2, 3, 5, 4}, os[4] = {60, 4, 12, 1};
    const int64_t sd[4] = {2, 3, 5, 1}, ss[4] = {15, 5, 1, 1};
    assert_int_equal(gpt_cudnn_sdpa_layout(&f, GPT_CUDNN_Q, d, s), 0);
    assert_memory_equal(d, qd, sizeof(qd));
    assert_memory_equal(s, qs, sizeof(qs));
    assert_int_equal(gpt_cudnn_sdpa_layout(&f, GPT_CUDNN_K, d, s), 0);
    assert_memory_equal(d, kd, sizeof(kd));
    assert_memory_equal(s, ks, sizeof(ks));
    assert_int_equal(gpt_cudnn_sdpa_layout(&f, GPT_CUDNN_V, d, s), 0); /* forward: as q */
    assert_memory_equal(d, qd, sizeof(qd));
    assert_memory_equal(s, qs, sizeof(qs));
    assert_int_equal(gpt_cudnn_sdpa_layout(&b, GPT_CUDNN_V, d, s), 0); /* backward: as k^T */
    assert_memory_equal(d, kd, sizeof(kd));
    assert_memory_equal(s, ks, sizeof(ks));
    assert_int_equal(gpt_cudnn_sdpa_layout(&f, GPT_CUDNN_O, d, s), 0);
    assert_memory_equal(d, od, sizeof(od));
    assert_memory_equal(s, os, sizeof(os));
    assert_int_equal(gpt_cudnn_sdpa_layout(&b, GPT_CUDNN_DO, d, s), 0);
    assert_memory_equal(s, os, sizeof(os));
    assert_int_equal(gpt_cudnn_sdpa_layout(&f, GPT_CUDNN_STATS, d, s), 0);
    assert_memory_equal(d, sd, sizeof(sd));
    assert_memory_equal(s, ss, sizeof(ss));
    for (int uid = GPT_CUDNN_DQ; uid <= GPT_CUDNN_DV; uid++) {
        assert_int_equal(gpt_cudnn_sdpa_layout(&b, uid, d, s), 0);
        assert_memory_equal(d, qd, sizeof(qd));
        assert_memory_equal(s, qs, sizeof(qs));
    }
    assert_int_equal(gpt_cudnn_sdpa_layout(&f, GPT_CUDNN_DO, d, s), -EINVAL);
    assert_int_equal(gpt_cudnn_sdpa_layout(&f, GPT_CUDNN_DSUM, d, s), -EINVAL);
    assert_int_equal(gpt_cudnn_sdpa_layout(&f, GPT_CUDNN_SCALE, d, s), -EINVAL);
}

/* The graph's operations, and the tensor of uid `uid` among the descriptors. */
static struct fdesc *graph_of(void)
{
    for (int i = 0; i < ndescs; i++)
        if (descs[i].type == F_GRAPH)
            return &descs[i];
    return NULL;
}

static struct fdesc *tensor_uid(int64_t uid)
{
    for (int i = 0; i < ndescs; i++)
        if (descs[i].type == F_TENSOR && attr(&descs[i], 906)->v[0] == uid)
            return &descs[i];
    return NULL;
}

static void check_built(const struct gpt_cudnn_sdpa_shape *s, int nops, int nuids,
                        int64_t workspace)
{
    struct gpt_cudnn_sdpa_plan p;
    char why[256] = "";
    int rc = gpt_cudnn_sdpa_build(&fake, (void *)&fake, s, &p, why, sizeof(why));
    assert_int_equal(rc, 0);
    assert_int_equal(misuse, 0);
    for (int i = 0; i < ndescs; i++)
        assert_true(descs[i].finalized || descs[i].type == F_VP);
    assert_int_equal(attr(graph_of(), 801)->n, nops);
    assert_int_equal(p.nuids, nuids);
    for (int i = 0; i < p.nuids; i++) { /* each once, each a tensor of the graph */
        for (int j = 0; j < i; j++)
            assert_true(p.uids[i] != p.uids[j]);
        struct fdesc *t = tensor_uid(p.uids[i]);
        assert_non_null(t);
        int64_t d[4], st[4];
        if (gpt_cudnn_sdpa_layout(s, (int)p.uids[i], d, st) == 0) {
            assert_memory_equal(attr(t, 902)->v, d, sizeof(d));
            assert_memory_equal(attr(t, 903)->v, st, sizeof(st));
        } else {
            assert_int_equal(attr(t, 908)->v[0], 1); /* the scalars, by value */
        }
    }
    assert_int_equal(p.workspace_bytes, workspace);
    assert_non_null(p.plan);
    assert_true(fabsf(p.scale - 1.0f / sqrtf((float)(s->C / s->NH))) < 1e-7f);
    gpt_cudnn_sdpa_plan_done(&fake, &p);
    assert_int_equal(live, 0);
    assert_int_equal(misuse, 0);
}

static void test_forward_graph(void **state)
{
    (void)state;
    fake_reset();
    struct gpt_cudnn_sdpa_shape s = {4, 1024, 768, 12, 0};
    /* Q K^T, scale, two indices, >=, select, max, -, exp, sum, log, +, /, P V;
     * Q K V O Stats scale neg; the first engine (determinism not asked) */
    check_built(&s, 14, 7, 4096);
}

static void test_backward_graph(void **state)
{
    (void)state;
    fake_reset();
    struct gpt_cudnn_sdpa_shape s = {4, 1024, 768, 12, 1};
    /* D: *, sum, *1; P: Q K^T, scale, - stats, mask (4), exp; dV: reshape,
     * product; dS: dO V^T, - D, * P, * scale; dK: reshape, product; dQ:
     * reshape of K^T, product. The second engine: the first says it is
     * nondeterministic. */
    check_built(&s, 21, 13, 4097);
}

static void test_refusals(void **state)
{
    (void)state;
    struct gpt_cudnn_sdpa_shape s = {2, 256, 256, 4, 1};
    struct gpt_cudnn_sdpa_plan p;
    char why[256];
    fake_reset();
    fail_type = F_GRAPH;
    assert_int_equal(gpt_cudnn_sdpa_build(&fake, (void *)&fake, &s, &p, why, sizeof(why)),
                     -ENOTSUP);
    assert_non_null(strstr(why, "backward"));
    assert_non_null(strstr(why, "graph: status 3000 (CUDNN_STATUS_NOT_SUPPORTED)"));
    assert_int_equal(live, 0); /* everything made was destroyed */
    assert_null(p.plan);
    fake_reset();
    nondet_all = 1; /* only nondeterministic engines: no backward plan */
    assert_int_equal(gpt_cudnn_sdpa_build(&fake, (void *)&fake, &s, &p, why, sizeof(why)),
                     -ENOTSUP);
    assert_non_null(strstr(why, "no deterministic engine"));
    assert_int_equal(live, 0);
    s.backward = 0; /* the forward takes them */
    assert_int_equal(gpt_cudnn_sdpa_build(&fake, (void *)&fake, &s, &p, why, sizeof(why)), 0);
    gpt_cudnn_sdpa_plan_done(&fake, &p);
    fake_reset();
    struct gpt_cudnn_sdpa_shape odd = {1, 64, 60, 4, 0}; /* hs 15: not a multiple of 8 */
    assert_int_equal(gpt_cudnn_sdpa_build(&fake, (void *)&fake, &odd, &p, why, sizeof(why)),
                     -EINVAL);
    assert_int_equal(creates, 0);
}

static int fake_alloc(size_t n, void **ret)
{
    *ret = malloc(n); /* kept as long as the process, like the real workspaces */
    return *ret ? 0 : -ENOMEM;
}

static void test_cache(void **state)
{
    (void)state;
    struct gpt_cudnn_sdpa_entry *e = NULL, *again = NULL;
    fake_reset();
    /* refused once: the second ask costs cuDNN nothing */
    struct gpt_cudnn_sdpa_shape no = {1, 128, 128, 2, 0};
    fail_type = F_OP_MM;
    assert_int_equal(gpt_cudnn_sdpa_get(&fake, 0, &no, fake_alloc, &e), -ENOTSUP);
    int made = creates;
    assert_true(made > 0);
    fail_type = -1;
    assert_int_equal(gpt_cudnn_sdpa_get(&fake, 0, &no, fake_alloc, &e), -ENOTSUP);
    assert_int_equal(creates, made);
    /* built once, then reused; another device builds its own */
    struct gpt_cudnn_sdpa_shape yes = {2, 128, 128, 2, 1};
    assert_int_equal(gpt_cudnn_sdpa_get(&fake, 0, &yes, fake_alloc, &e), 0);
    made = creates;
    assert_int_equal(gpt_cudnn_sdpa_get(&fake, 0, &yes, fake_alloc, &again), 0);
    assert_ptr_equal(e, again);
    assert_int_equal(creates, made);
    assert_int_equal(gpt_cudnn_sdpa_get(&fake, 1, &yes, fake_alloc, &again), 0);
    assert_true(e != again);
    assert_non_null(e->workspace);
    assert_true(e->extra_off >= (size_t)e->plan.workspace_bytes && e->extra_off % 256 == 0);
    assert_int_equal(e->extra_bytes, 2 * 128 * 3 * 128 * 2); /* dqkv in bf16 */
    /* an execution: the caller's pointers by uid, the scalars by value */
    struct gpt_cudnn_sdpa_io io;
    static char mem[GPT_CUDNN_UIDS];
    for (int i = 0; i < GPT_CUDNN_UIDS; i++)
        io.ptr[i] = &mem[i];
    assert_int_equal(gpt_cudnn_sdpa_exec(&fake, e, NULL, &io), 0);
    assert_int_equal(executes, 1);
    assert_int_equal(last_vp_n, 13);
    for (int i = 0; i < last_vp_n; i++) {
        int64_t uid = last_vp_uids[i];
        if (uid == GPT_CUDNN_SCALE)
            assert_true(*(float *)last_vp_ptrs[i] == 1.0f / sqrtf(64.0f));
        else if (uid == GPT_CUDNN_ONE)
            assert_true(*(float *)last_vp_ptrs[i] == 1.0f);
        else if (uid == GPT_CUDNN_NEG)
            assert_true(*(float *)last_vp_ptrs[i] < -1e30f);
        else
            assert_ptr_equal(last_vp_ptrs[i], &mem[uid]);
    }
    assert_int_equal(misuse, 0);
    /* a failed execution: refused from then on, without asking cuDNN */
    exec_status = 3000;
    assert_int_equal(gpt_cudnn_sdpa_exec(&fake, e, NULL, &io), -ENOTSUP);
    exec_status = 0;
    made = creates;
    assert_int_equal(gpt_cudnn_sdpa_get(&fake, 0, &yes, fake_alloc, &again), -ENOTSUP);
    assert_int_equal(gpt_cudnn_sdpa_exec(&fake, e, NULL, &io), -ENOTSUP);
    assert_int_equal(executes, 2);
    assert_int_equal(creates, made);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts),        cmocka_unit_test(test_forward_graph),
        cmocka_unit_test(test_backward_graph), cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
