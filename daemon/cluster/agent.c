/*
 * agent: one node's elastic agent (see agent.h). Owns the node's workers of
 * the current round, their store client (through struct store_kv) and the
 * mailbox they post to. Everything but the worker callbacks and the kv runs
 * on the loop thread; the snapshot scan runs on a libuv work thread and
 * touches only its own fields.
 */
#include "agent.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "failure_class.h"
#include "fsid.h"
#include "jobspec.h"
#include "log.h"
#include "mailbox.h"
#include "monotime.h"
#include "paths.h"
#include "rdzv.h"
#include "snapshot.h"
#include "store_client.h"
#include "store_kv.h"
#include "workers.h"

enum agent_state {
    AGENT_IDLE,
    AGENT_STOPPING,
    AGENT_JOINING,
    AGENT_JOINED,
    AGENT_RUNNING,
    AGENT_EXITED,
    AGENT_WAITING,
};

static const char *const agent_state_names[] = {"idle",    "stopping", "joining", "joined",
                                                "running", "exited",   "waiting"};

struct agent {
    uv_loop_t *loop;
    struct cluster *cl;
    char node_id[64];
    char state_dir[1024];
    char host[CLUSTER_HOST_MAX];
    int port;
    uint8_t secret[STORE_SECRET_MAX];
    size_t secret_len;
    char bind_host[64];
    int workers_default;
    int comm_timeout_ms;
    bool snapshot_dir_own;
    const char *data_roots, *snapshot_roots; /* borrowed from the daemon's config */

    struct mailbox mb; /* the workers' records (worker threads post, the loop drains) */

    /* the published round */
    struct round_doc cur; /* decoded (proto/round_doc.h) */
    bool have_cur;
    uint64_t gen;
    int64_t round;
    int phase; /* enum rdzv_phase */
    int64_t job;
    bool stop_snapshot;
    bool lost;
    int64_t resume_step; /* the round's resume_step (rdzv.h), -1 none */

    /* the job's spec, parsed once per job */
    int64_t spec_job;
    uint64_t spec_hash; /* of its text: a resume may change keys of the same job */
    bool spec_ok;
    struct gpt_job spec;
    char snapdir[GPT_JOB_PATH_MAX];
    uid_t owner_uid; /* the round's "uid": the job's files are opened as it */
    uint64_t token;  /* the round's "token": this node's snapshot folder is claimed with it */

    /* the workers of one round */
    struct workers *ws;
    struct store_kv *kv;
    uint64_t ws_gen;
    int64_t ws_round, ws_job;
    int ws_stop; /* 0, GPT_STOP_SNAPSHOT, or -1 aborted */

    /* their exit, reported in heartbeats until the next round */
    uint64_t exit_gen;
    int64_t exit_round, exit_job;
    int exit_rc;
    int64_t exit_step;
    char exit_msg[256];
    uint64_t exit_mark; /* the outbox up to the exit: reported once it is delivered */

    /* the snapshot scan before a join */
    bool scanning;
    uv_work_t scan;
    char scan_dir[GPT_JOB_PATH_MAX];
    int64_t scan_pin; /* look for this step only (-1: the newest) */
    uid_t scan_uid;   /* the scan reads the folder as the job's owner */
    uint64_t scan_token;
    int scan_claim_rc; /* the scan's claim of the folder (0, or why it is another's) */
    struct gpt_err scan_claim_err;
    int joined_claim_rc; /* scan_claim_rc of the joined round */
    struct gpt_err joined_claim_err;
    char scan_path[GPT_JOB_PATH_MAX];
    int64_t scan_step;
    uint64_t scan_gen;
    int64_t scan_round, scan_job;

    uint64_t joined_gen;
    int64_t joined_round, joined_snap;
    char joined_path[GPT_JOB_PATH_MAX]; /* the pinned snapshot's file here, "" none */

    /* leaving: no new round; done once the workers are gone */
    bool leaving;
    uv_timer_t leave_timer;
    void (*leave_done)(void *ctx);
    void *leave_ctx;

    int state;
    bool closing;
    int handles;
    void (*done)(void *ctx);
    void *done_ctx;
};

/* ---- state ---- */

const char *agent_state(const struct agent *a)
{
    return agent_state_names[a->state];
}

int64_t agent_job(const struct agent *a)
{
    return a->job;
}

static void agent_set_state(struct agent *a, int state)
{
    if (a->state == state)
        return;
    log_debug("agent: %s -> %s", agent_state_names[a->state], agent_state_names[state]);
    a->state = state;
    cluster_heartbeat_soon(a->cl);
}

/* This node's assignment in the published world (the cluster adds it to
 * the round as "me"), NULL when this process is not a member. */
static const struct round_member *agent_me(const struct agent *a)
{
    const struct round_member *me = &a->cur.me;
    if (a->have_cur && a->cur.has_me && strcmp(me->id, a->node_id) == 0 &&
        me->inc == cluster_incarnation(a->cl))
        return me;
    return NULL;
}

static int agent_workers_for(const struct agent *a)
{
    return a->spec_ok && a->spec.distributed.workers_per_node > 0
               ? a->spec.distributed.workers_per_node
               : a->workers_default;
}

/* Parses the published spec of a new job; false when it cannot run here. */
static bool agent_load_spec(struct agent *a)
{
    const char *spec = a->cur.spec;
    uint64_t hash = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = spec ? spec : ""; *p; p++)
        hash = (hash ^ (unsigned char)*p) * 1099511628211ull;
    if (a->spec_job == a->job && a->spec_hash == hash)
        return a->spec_ok;
    a->spec_job = a->job;
    a->spec_hash = hash;
    a->spec_ok = false;
    struct gpt_err err;
    if (!spec || gpt_jobspec_parse(spec, strlen(spec), NULL, 0, &a->spec, &err) < 0) {
        log_error("agent: job %" PRId64 ": cannot use its spec: %s", a->job,
                  spec ? err.msg : "missing");
        return false;
    }
    int k;
    if (a->spec.snapshot.dir[0] && a->snapshot_dir_own)
        k = snprintf(a->snapdir, sizeof(a->snapdir), "%s", a->spec.snapshot.dir);
    else if (a->spec.snapshot.dir[0])
        k = snprintf(a->snapdir, sizeof(a->snapdir), "%s/%s", a->spec.snapshot.dir, a->node_id);
    else
        k = snprintf(a->snapdir, sizeof(a->snapdir), "%s/jobs/%" PRId64 "/snapshots", a->state_dir,
                     a->job);
    if (k < 0 || (size_t)k >= sizeof(a->snapdir)) {
        log_error("agent: job %" PRId64 ": snapshot directory too long", a->job);
        return false;
    }
    /* Whose job it is travels with the round; without it nothing is opened. */
    if (a->cur.uid < 0) {
        log_error("agent: job %" PRId64 ": the round does not say whose job it is", a->job);
        return false;
    }
    a->owner_uid = (uid_t)a->cur.uid;
    a->token = a->cur.token; /* 0: an older coordinator, no claim */
    /* On failure the workers, opening the folder as the owner, fail the
     * job with the reason. */
    if (paths_snapshot_dir_prepare(a->state_dir, a->snapdir, a->owner_uid, &err) < 0)
        log_warn("agent: job %" PRId64 ": %s", a->job, err.msg);
    a->spec_ok = true;
    return true;
}

static void agent_reconcile(struct agent *a);
static void agent_on_mailbox_closed(void *ctx);
static void agent_leave_check(struct agent *a);

/* Claims this node's snapshot folder for the job (the owner marker names
 * the job's token, as on the coordinator), so the snapshots written here
 * record their owner and no other job's folder is used. A folder without a
 * marker is adopted (a member may hold copies from before the marker). A
 * folder that cannot be opened is left to the workers, which fail with
 * the reason. Scan thread, with the owner's file-system identity. */
static void agent_claim_as_owner(struct agent *a)
{
    char real[GPT_JOB_PATH_MAX];
    struct gpt_err err;
    a->scan_claim_rc = 0;
    if (!a->scan_token || paths_snapshot_dir_open(a->scan_dir, a->snapshot_roots, a->state_dir,
                                                  real, sizeof(real), &err) < 0)
        return;
    struct gpt_snapshot_owner me = {a->scan_token, a->scan_job, (uint32_t)a->scan_uid};
    int rc = gpt_snapshot_owner_claim(real, &me, GPT_OWNER_ADOPT, NULL, &err);
    if (rc < 0) {
        a->scan_claim_rc = rc;
        gpt_err_set(&a->scan_claim_err, rc, "snapshot.dir", "%s", err.msg);
    }
}

/* agent_scan_work's part with the owner's file-system identity. */
static void agent_scan_as_owner(struct agent *a)
{
    struct gpt_snapshot_meta meta;
    struct gpt_err err;
    agent_claim_as_owner(a);
    if (a->scan_pin < 0) {
        if (gpt_snapshot_newest(a->scan_dir, NULL, 0, &meta, NULL, NULL, &err) == 0)
            a->scan_step = meta.step;
        return;
    }
    /* The round resumes from one step: only a complete file of that step
     * counts (gpt_snapshot_write's name). */
    int k = snprintf(a->scan_path, sizeof(a->scan_path), "%s/snap-%012" PRId64 "%s", a->scan_dir,
                     a->scan_pin, GPT_SNAPSHOT_SUFFIX);
    if (k > 0 && (size_t)k < sizeof(a->scan_path) &&
        gpt_snapshot_read(a->scan_path, &meta, NULL, NULL, NULL, &err) == 0 &&
        meta.step == a->scan_pin)
        a->scan_step = meta.step;
    else
        a->scan_path[0] = '\0';
}

static void agent_scan_work(uv_work_t *w)
{
    struct agent *a = w->data;
    struct gpt_err err;
    a->scan_step = -1;
    a->scan_path[0] = '\0';
    struct fsid_user u;
    struct fsid_saved saved = {0};
    if (fsid_user_lookup(a->scan_uid, &u, &err) < 0 || fsid_enter(&u, &saved, &err) < 0)
        return; /* the workers fail with the reason */
    agent_scan_as_owner(a);
    fsid_leave(&saved);
}

static void agent_scan_done(uv_work_t *w, int status)
{
    struct agent *a = w->data;
    a->scanning = false;
    a->handles--;
    if (a->closing) {
        agent_reconcile(a);
        return;
    }
    if (status == 0 && !a->lost && !a->leaving && a->have_cur && a->phase == RDZV_FORMING &&
        a->gen == a->scan_gen && a->round == a->scan_round && a->job == a->scan_job) {
        a->joined_gen = a->gen;
        a->joined_round = a->round;
        a->joined_snap = a->scan_step;
        a->joined_claim_rc = a->scan_claim_rc;
        a->joined_claim_err = a->scan_claim_err;
        snprintf(a->joined_path, sizeof(a->joined_path), "%s", a->scan_path);
        if (a->scan_pin >= 0)
            log_info("agent: round %" PRId64 " of job %" PRId64 " resumes from the step %" PRId64
                     " snapshot: %s",
                     a->round, a->job, a->scan_pin,
                     a->scan_path[0] ? a->scan_path : "not on this node");
        log_info("agent: joining round %" PRId64 " of job %" PRId64 " (newest snapshot: %s%" PRId64
                 ")",
                 a->round, a->job, a->scan_step < 0 ? "none " : "step ",
                 a->scan_step < 0 ? (int64_t)0 : a->scan_step);
        a->state = AGENT_JOINED;
        cluster_heartbeat_soon(a->cl);
    }
    agent_reconcile(a);
}

/* The exit code reported for a round (a heartbeat's exit_rc): a failure
 * no restart heals travels as its class's code, since the job key that
 * tells a missing data file from a lost connection stays on this node
 * (failure_class.h); anything else as it is. */
static int agent_exit_code(int rc, const struct gpt_err *err)
{
    return rc < 0 ? failure_class_code(failure_class_of(rc, err->path), rc) : rc;
}

/* Records the workers' exit of a round, reported in heartbeats (with
 * agent_on_heartbeat) once every record queued before it is delivered. */
static void agent_set_exit(struct agent *a, uint64_t gen, int64_t round, int64_t job, int rc,
                           int64_t step, const char *msg)
{
    a->exit_gen = gen;
    a->exit_round = round;
    a->exit_job = job;
    a->exit_rc = rc;
    a->exit_step = step;
    snprintf(a->exit_msg, sizeof(a->exit_msg), "%.250s", msg);
    a->exit_mark = cluster_outbox_mark(a->cl);
}

static void agent_start_workers(struct agent *a, const struct round_member *me)
{
    int base = me->rank_base;
    int n = me->workers;
    int world = a->cur.world;
    const char *prefix = a->cur.prefix;
    struct gpt_err err;
    gpt_err_clear(&err);
    a->kv = store_kv_new(a->host, a->port, a->secret, a->secret_len, a->node_id);
    if (a->kv)
        store_kv_set_node_key(a->kv, cluster_node_key_own(a->cl));
    if (!a->kv) {
        gpt_err_set(&err, -ENOMEM, NULL, "out of memory");
        goto fail;
    }
    /* This node's folder is another job's: nothing is read or written. */
    if (a->joined_gen == a->gen && a->joined_round == a->round && a->joined_claim_rc < 0) {
        err = a->joined_claim_err;
        goto fail;
    }
    /* Global rank 0 loads the snapshot and broadcasts the state; the round
     * put a node holding the pinned step first. */
    const char *resume_path = NULL;
    if (a->resume_step >= 0 && base == 0) {
        if (a->joined_gen != a->gen || a->joined_round != a->round || !a->joined_path[0]) {
            gpt_err_set(&err, -ENOENT, NULL,
                        "the step %" PRId64 " snapshot to resume from is not in %s on this node",
                        a->resume_step, a->snapdir);
            goto fail;
        }
        resume_path = a->joined_path;
    }
    struct workers_opts o = {
        .job = &a->spec,
        .n_workers = n,
        .snapshot_dir = a->snapdir,
        /* snapshot.on_invalid=restart: no usable snapshot starts over. */
        .resume = a->spec.snapshot.on_invalid == GPT_SNAPSHOT_ON_INVALID_RESTART
                      ? GPT_RESUME_START_OVER
                      : 1,
        .resume_path = resume_path,
        .run_id = a->cur.run_id,
        .world = world,
        .rank_base = base,
        .kv = store_kv_gpt(a->kv),
        .kv_prefix = prefix,
        .comm_timeout_ms = a->comm_timeout_ms,
        .bind_host = a->bind_host,
        .write_snapshots = true,
        .ctx = &a->mb,
        .on_metric = mailbox_post_metric,
        .on_event = mailbox_post_event,
        .on_exit = mailbox_post_exit,
        .access = &(struct workers_access){.uid = a->owner_uid,
                                           .data_roots = a->data_roots,
                                           .snapshot_roots = a->snapshot_roots,
                                           .state_dir = a->state_dir},
    };
    int rc = n >= 1 && world >= n && prefix ? workers_start(&o, &a->ws, &err)
                                            : gpt_err_set(&err, -EINVAL, NULL, "bad world");
    if (rc < 0)
        goto fail;
    a->ws_gen = a->gen;
    a->ws_round = a->round;
    a->ws_job = a->job;
    a->ws_stop = 0;
    log_info("agent: round %" PRId64 " of job %" PRId64 ": ranks %d-%d of %d", a->round, a->job,
             base, base + n - 1, world);
    agent_set_state(a, AGENT_RUNNING);
    return;
fail:
    log_error("agent: cannot start workers: %s", err.msg);
    store_kv_free(a->kv);
    a->kv = NULL;
    agent_set_exit(a, a->gen, a->round, a->job,
                   agent_exit_code(err.code < 0 ? err.code : -EIO, &err), 0, err.msg);
    agent_set_state(a, AGENT_EXITED);
    cluster_heartbeat_soon(a->cl);
}

static void agent_stop_workers(struct agent *a, int how)
{
    if (how < 0) {
        if (a->ws_stop != -1) {
            a->ws_stop = -1;
            workers_abort(a->ws);
            store_kv_abort(a->kv);
        }
    } else if (a->ws_stop == 0) {
        a->ws_stop = how;
        workers_request_stop(a->ws, how);
    }
}

/* Brings the workers and the state in line with the published round. */
static void agent_reconcile(struct agent *a)
{
    if (a->closing) {
        if (a->ws) {
            agent_stop_workers(a, -1);
            return;
        }
        if (!a->scanning && a->handles == 1) {
            a->handles = 0;
            mailbox_close(&a->mb, agent_on_mailbox_closed);
        }
        return;
    }
    if (a->leaving) {
        agent_leave_check(a);
        if (!a->ws)
            return;
    }
    bool have = a->have_cur && !a->lost;
    if (a->ws) {
        bool same = have && a->ws_gen == a->gen && a->ws_round == a->round;
        if (same && a->phase == RDZV_RUNNING && agent_me(a)) {
            agent_set_state(a, AGENT_RUNNING);
        } else if (same && a->phase == RDZV_STOPPING) {
            agent_stop_workers(a, GPT_STOP_SNAPSHOT);
        } else if (have && a->ws_gen == a->gen && a->phase == RDZV_FORMING && a->stop_snapshot &&
                   a->ws_job == a->job) {
            /* A planned re-formation: stop at the step boundary the whole
             * world agrees on, each node writing its copy of the snapshot. */
            agent_stop_workers(a, GPT_STOP_SNAPSHOT);
            agent_set_state(a, AGENT_STOPPING);
        } else {
            agent_stop_workers(a, -1);
            agent_set_state(a, AGENT_STOPPING);
        }
        return;
    }
    if (!have) {
        agent_set_state(a, a->job ? AGENT_WAITING : AGENT_IDLE);
        return;
    }
    if (a->job == 0 || a->phase == RDZV_IDLE) {
        agent_set_state(a, AGENT_IDLE);
        return;
    }
    if (!agent_load_spec(a)) {
        agent_set_state(a, AGENT_IDLE);
        return;
    }
    switch (a->phase) {
    case RDZV_FORMING:
        if (a->joined_gen == a->gen && a->joined_round == a->round) {
            agent_set_state(a, AGENT_JOINED);
        } else if (!a->scanning) {
            a->scanning = true;
            a->handles++;
            snprintf(a->scan_dir, sizeof(a->scan_dir), "%s", a->snapdir);
            a->scan_pin = a->resume_step;
            a->scan_uid = a->owner_uid;
            a->scan_token = a->token;
            a->scan_claim_rc = 0;
            a->scan_gen = a->gen;
            a->scan_round = a->round;
            a->scan_job = a->job;
            a->scan.data = a;
            if (uv_queue_work(a->loop, &a->scan, agent_scan_work, agent_scan_done) < 0) {
                a->scanning = false;
                a->handles--;
            }
            agent_set_state(a, AGENT_JOINING);
        }
        break;
    case RDZV_RUNNING: {
        const struct round_member *me = agent_me(a);
        if (!me)
            agent_set_state(a, AGENT_WAITING);
        else if (a->exit_gen == a->gen && a->exit_round == a->round)
            agent_set_state(a, AGENT_EXITED);
        else
            agent_start_workers(a, me);
        break;
    }
    case RDZV_STOPPING:
        /* A member that never started this round's workers (it first saw
         * the round already stopping) has nothing to stop: it says so, or
         * the world would wait for it forever. */
        if (agent_me(a) && !(a->exit_gen == a->gen && a->exit_round == a->round)) {
            agent_set_exit(a, a->gen, a->round, a->job, GPT_TRAIN_STOPPED, 0, "");
            agent_set_state(a, AGENT_EXITED);
            cluster_heartbeat_soon(a->cl);
        } else {
            agent_set_state(a, agent_me(a) ? AGENT_EXITED : AGENT_WAITING);
        }
        break;
    default:
        agent_set_state(a, AGENT_WAITING);
        break;
    }
}

/* ---- inputs ---- */

static void agent_on_mail(void *ctx, struct mailbox_msg *list)
{
    struct agent *a = ctx;
    bool exited = false;
    while (list) {
        struct mailbox_msg *m = list;
        list = m->next;
        if (m->kind == MAILBOX_METRIC)
            cluster_send_metric(a->cl, a->ws_job, &m->u.m);
        else if (m->kind == MAILBOX_EVENT)
            cluster_send_event(a->cl, a->ws_job, &m->u.e);
        else
            exited = true;
        free(m);
    }
    if (!exited || !a->ws)
        return;
    /* Every worker has returned: this join does not block. */
    struct gpt_train_result res;
    struct gpt_err err;
    memset(&res, 0, sizeof(res));
    gpt_err_clear(&err);
    int rc = workers_join(a->ws, &res, &err);
    workers_free(a->ws);
    a->ws = NULL;
    store_kv_free(a->kv);
    a->kv = NULL;
    agent_set_exit(a, a->ws_gen, a->ws_round, a->ws_job, agent_exit_code(rc, &err), res.step,
                   rc < 0 ? err.msg : "");
    if (rc < 0 && a->ws_stop != -1)
        log_warn("agent: round %" PRId64 " workers failed: %s", a->ws_round, err.msg);
    else
        log_info("agent: round %" PRId64 " workers finished (%s)", a->ws_round,
                 rc == GPT_TRAIN_DONE      ? "done"
                 : rc == GPT_TRAIN_STOPPED ? "stopped"
                                           : "aborted");
    a->state = AGENT_EXITED;
    cluster_heartbeat_soon(a->cl);
    agent_reconcile(a);
}

static void agent_on_round(void *ctx, struct round_doc *cur)
{
    struct agent *a = ctx;
    round_doc_done(&a->cur);
    a->cur = *cur; /* taken */
    a->have_cur = true;
    a->lost = false;
    a->gen = cur->gen;
    a->round = cur->round;
    a->phase = rdzv_phase_parse(cur->phase);
    a->job = cur->job;
    a->stop_snapshot = cur->stop_snapshot;
    a->resume_step = cur->resume_step;
    agent_reconcile(a);
}

static void agent_on_lost(void *ctx)
{
    struct agent *a = ctx;
    a->lost = true;
    round_doc_done(&a->cur);
    a->have_cur = false;
    a->joined_gen = 0;
    agent_reconcile(a);
}

static void agent_on_heartbeat(void *ctx, struct cluster_msg *hb)
{
    struct agent *a = ctx;
    snprintf(hb->state, sizeof(hb->state), "%s", agent_state_names[a->state]);
    hb->gen = a->gen;
    hb->round = a->state == AGENT_RUNNING  ? a->ws_round
                : a->state == AGENT_JOINED ? a->joined_round
                                           : a->round;
    hb->job = a->job;
    hb->present |= CLUSTER_MSG_BIT(STATE) | CLUSTER_MSG_BIT(GEN) | CLUSTER_MSG_BIT(ROUND) |
                   CLUSTER_MSG_BIT(JOB);
    if (a->job) {
        hb->workers = agent_workers_for(a);
        hb->present |= CLUSTER_MSG_BIT(WORKERS);
    }
    if (a->state == AGENT_JOINED) {
        hb->snap_step = a->joined_snap;
        hb->present |= CLUSTER_MSG_BIT(SNAP);
    }
    /* The exit goes after the records the workers sent before it: the
     * coordinator ends a job on it, and drains its inbox before reading
     * heartbeats, so the final metric, snapshot row and done event are
     * stored first. */
    if (a->exit_gen == a->gen && a->exit_job == a->job &&
        cluster_outbox_delivered(a->cl, a->exit_mark)) {
        hb->exit_round = a->exit_round;
        hb->exit_rc = a->exit_rc;
        hb->exit_step = a->exit_step;
        snprintf(hb->exit_msg, sizeof(hb->exit_msg), "%s", a->exit_msg);
        hb->present |= CLUSTER_MSG_BIT(EXIT_ROUND) | CLUSTER_MSG_BIT(EXIT_RC) |
                       CLUSTER_MSG_BIT(EXIT_STEP) | CLUSTER_MSG_BIT(EXIT_MSG);
    }
}

/* ---- leaving ---- */

static void agent_on_leave_timer(uv_timer_t *t)
{
    struct agent *a = t->data;
    if (a->ws) {
        log_warn("agent: the world did not let this node go in time; aborting its workers");
        agent_stop_workers(a, -1);
    } else {
        agent_leave_check(a);
    }
}

/* Done leaving once no worker is left and no join is being prepared. */
static void agent_leave_check(struct agent *a)
{
    if (!a->leaving || !a->leave_done || a->ws || a->scanning)
        return;
    void (*done)(void *) = a->leave_done;
    a->leave_done = NULL;
    uv_timer_stop(&a->leave_timer);
    done(a->leave_ctx);
}

void agent_leave(struct agent *a, double timeout_s, void (*done)(void *ctx), void *ctx)
{
    if (a->closing)
        return;
    if (a->leaving || !done) {
        if (a->ws)
            agent_stop_workers(a, -1);
        return;
    }
    a->leaving = true;
    a->leave_done = done;
    a->leave_ctx = ctx;
    if (a->ws) {
        log_notice("agent: leaving; the world stops at its next step boundary");
        uv_timer_start(&a->leave_timer, agent_on_leave_timer, (uint64_t)(timeout_s * 1000), 0);
        return;
    }
    uv_timer_start(&a->leave_timer, agent_on_leave_timer, 0, 0); /* never inside this call */
}

void agent_set_workers(struct agent *a, int workers)
{
    if (workers > 0)
        a->workers_default = workers;
}

/* ---- life cycle ---- */

int agent_new(uv_loop_t *loop, struct cluster *cl, const struct agent_opts *o, struct agent **ret,
              struct gpt_err *err)
{
    struct agent *a = calloc(1, sizeof(*a));
    if (!a)
        return gpt_err_set(err, -ENOMEM, NULL, "out of memory");
    a->loop = loop;
    a->cl = cl;
    a->resume_step = -1;
    snprintf(a->node_id, sizeof(a->node_id), "%s", o->node_id);
    snprintf(a->state_dir, sizeof(a->state_dir), "%s", o->state_dir);
    snprintf(a->host, sizeof(a->host), "%s", o->host);
    a->port = o->port;
    if (o->secret_len > sizeof(a->secret)) {
        free(a);
        return gpt_err_set(err, -EINVAL, NULL, "secret too long");
    }
    if (o->secret_len)
        memcpy(a->secret, o->secret, o->secret_len);
    a->secret_len = o->secret_len;
    snprintf(a->bind_host, sizeof(a->bind_host), "%s", o->bind_host ? o->bind_host : "");
    a->workers_default = o->workers > 0 ? o->workers : 1;
    a->comm_timeout_ms = o->comm_timeout_ms;
    a->snapshot_dir_own = o->snapshot_dir_own;
    a->data_roots = o->data_roots ? o->data_roots : "/";
    a->snapshot_roots = o->snapshot_roots ? o->snapshot_roots : "/";
    a->joined_round = a->exit_round = a->ws_round = -1;
    int rc = mailbox_init(&a->mb, loop, agent_on_mail, a);
    if (rc < 0) {
        free(a);
        return gpt_err_set(err, rc, NULL, "cannot set up the mailbox: %s", uv_strerror(rc));
    }
    uv_timer_init(loop, &a->leave_timer);
    a->leave_timer.data = a;
    a->handles = 1;
    struct cluster_node_hooks h = {a, agent_on_round, agent_on_lost, agent_on_heartbeat};
    cluster_set_node_hooks(cl, &h);
    *ret = a;
    return 0;
}

static void agent_on_timer_closed(uv_handle_t *h)
{
    struct agent *a = h->data;
    void (*done)(void *) = a->done;
    void *ctx = a->done_ctx;
    free(a);
    if (done)
        done(ctx);
}

static void agent_on_mailbox_closed(void *ctx)
{
    struct agent *a = ctx;
    round_doc_done(&a->cur);
    a->have_cur = false;
    uv_close((uv_handle_t *)&a->leave_timer, agent_on_timer_closed);
}

void agent_close(struct agent *a, void (*done)(void *ctx), void *ctx)
{
    uv_timer_stop(&a->leave_timer);
    a->leave_done = NULL;
    a->closing = true;
    a->done = done;
    a->done_ctx = ctx;
    if (a->ws) {
        agent_stop_workers(a, -1);
        return; /* agent_on_mail finishes the close */
    }
    if (!a->scanning) {
        a->handles = 0;
        mailbox_close(&a->mb, agent_on_mailbox_closed);
    }
}
