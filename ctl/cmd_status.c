/*
 * cmd_status: `gptctl status [JOB]` (one job with its runs, or the daemon)
 * and `gptctl nodes` (the hosts of a cluster, or this gptd's own row).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gptctl.h"

/* The keys whose values differ between two specs ("trainer.max_steps
 * 300 -> 600"), appended to buf. */
static void ctl_spec_diff(const json_t *a, const json_t *b, char *buf, size_t cap)
{
    const char *sect, *key;
    const json_t *sb, *vb;
    size_t len = strlen(buf);
    json_object_foreach((json_t *)b, sect, sb)
    {
        json_object_foreach((json_t *)sb, key, vb)
        {
            const json_t *va = json_object_get(json_object_get(a, sect), key);
            if (json_equal((json_t *)va, (json_t *)vb))
                continue;
            char *x = va ? json_dumps(va, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
            char *y = json_dumps(vb, JSON_ENCODE_ANY | JSON_COMPACT);
            int w = snprintf(buf + len, cap - len, "%s%s.%s %s -> %s", len ? ", " : "", sect, key,
                             x ? x : "-", y ? y : "?");
            free(x);
            free(y);
            if (w < 0 || (size_t)w >= cap - len)
                return;
            len += (size_t)w;
        }
    }
}

/* status JOB's runs: world size, outcome, and what the spec changed. */
static void ctl_print_runs(const json_t *runs)
{
    if (!json_array_size(runs))
        return;
    printf("runs:\n");
    size_t i;
    const json_t *r, *prev = NULL;
    json_array_foreach((json_t *)runs, i, r)
    {
        char a[64], b[64], changes[1024] = "";
        const json_t *spec = json_object_get(r, "spec");
        if (prev && json_is_object(spec) && json_is_object(prev))
            ctl_spec_diff(prev, spec, changes, sizeof(changes));
        printf("  run %s: world %d, %s, started %s%s%s\n",
               fmt_int(a, sizeof(a), json_object_get(r, "id")),
               (int)json_integer_value(json_object_get(r, "world_size")),
               out_esc(json_string_value(json_object_get(r, "status")), 0),
               fmt_time(b, sizeof(b), json_object_get(r, "started")), changes[0] ? "; " : "",
               out_esc(changes, 0));
        if (json_is_object(spec))
            prev = spec;
    }
}

/* status JOB: the job's fields as a two-column table, then its runs. */
static void status_print_job(const json_t *j)
{
    struct table t = {.ncols = 2};
    char a[64], b[64], step[80], label[256], ranks[1024];
    snprintf(step, sizeof(step), "%s/%s", fmt_int(a, sizeof(a), json_object_get(j, "step")),
             fmt_int(b, sizeof(b), json_object_get(j, "max_steps")));
    table_row(&t, "job:", fmt_int(a, sizeof(a), json_object_get(j, "id")));
    table_row(&t, "name:", json_string_value(json_object_get(j, "name")));
    table_row(&t, "state:", json_string_value(json_object_get(j, "state")));
    table_row(&t, "step:", step);
    table_row(&t, "loss:", fmt_real(a, sizeof(a), json_object_get(j, "loss"), 4));
    table_row(&t, "val loss:", fmt_real(a, sizeof(a), json_object_get(j, "val_loss"), 4));
    table_row(&t, "best val loss:", fmt_real(a, sizeof(a), json_object_get(j, "best_val_loss"), 4));
    table_row(&t, "tokens seen:",
              fmt_rate(a, sizeof(a), (double)json_integer_value(json_object_get(j, "tokens"))));
    double t0 = json_number_value(json_object_get(j, "started"));
    double t1 = json_number_value(json_object_get(j, "finished"));
    table_row(&t, "elapsed:",
              t0 > 0 ? fmt_duration(a, sizeof(a), (t1 > 0 ? t1 : (double)time(NULL)) - t0) : "-");
    if (fmt_overrides(label, sizeof(label), json_object_get(j, "overrides"))[0])
        table_row(&t, "overrides:", label);
    if (json_object_get(j, "sweep"))
        table_row(&t, "sweep:", json_string_value(json_object_get(j, "sweep")));
    if (json_object_get(j, "parent_job")) /* submit --resume-from */
        table_row(&t, "continues job:", fmt_int(a, sizeof(a), json_object_get(j, "parent_job")));
    const char *rk = fmt_rank_ms(ranks, sizeof(ranks), json_object_get(j, "rank_step_ms"));
    if (rk)
        table_row(&t, "rank ms/step:", rk);
    table_row(&t, "owner uid:", fmt_int(a, sizeof(a), json_object_get(j, "owner_uid")));
    table_row(&t, "priority:", fmt_int(a, sizeof(a), json_object_get(j, "priority")));
    table_row(&t, "created:", fmt_time(a, sizeof(a), json_object_get(j, "created")));
    table_row(&t, "started:", fmt_time(a, sizeof(a), json_object_get(j, "started")));
    table_row(&t, "finished:", fmt_time(a, sizeof(a), json_object_get(j, "finished")));
    table_row(&t, "snapshots:", json_string_value(json_object_get(j, "snapshot_dir")));
    if (json_object_get(j, "restarts"))
        table_row(&t, "restarts:", fmt_int(a, sizeof(a), json_object_get(j, "restarts")));
    if (json_object_get(j, "error"))
        table_row(&t, "error:", json_string_value(json_object_get(j, "error")));
    table_print(&t);
    ctl_print_runs(json_object_get(j, "runs"));
}

/* status without a JOB: the daemon's running job or, on a coordinator,
 * jobs (one cell). */
static const char *status_running(const json_t *s, char *buf, size_t cap)
{
    const json_t *all = json_object_get(s, "running_jobs"), *v;
    size_t k;
    if (json_array_size(all) > 1) {
        buf[0] = 0;
        json_array_foreach(all, k, v)
        {
            size_t off = strlen(buf);
            snprintf(buf + off, cap - off, "%s%lld", k ? ", " : "",
                     (long long)json_integer_value(v));
        }
        return buf;
    }
    if (json_integer_value(json_object_get(s, "running_job")))
        return fmt_int(buf, cap, json_object_get(s, "running_job"));
    return "none";
}

/* status without a JOB: the daemon's version, node, queue, user work,
 * state folder, socket and node limit. */
static void status_print_daemon(const json_t *s)
{
    struct table t = {.ncols = 2};
    char a[64], b[64], ids[256], line[96];
    table_row(&t, "gptd:", json_string_value(json_object_get(s, "version")));
    table_row(&t, "node:", json_string_value(json_object_get(s, "node")));
    table_row(&t, "pid:", fmt_int(a, sizeof(a), json_object_get(s, "pid")));
    table_row(&t, "started:", fmt_time(a, sizeof(a), json_object_get(s, "started")));
    table_row(&t,
              json_array_size(json_object_get(s, "running_jobs")) > 1 ? "running jobs:"
                                                                      : "running job:",
              status_running(s, ids, sizeof(ids)));
    table_row(&t, "queued jobs:", fmt_int(b, sizeof(b), json_object_get(s, "queued")));
    const json_t *uw = json_object_get(s, "user_work");
    if (uw) {
        snprintf(line, sizeof(line), "%s running, %s waiting",
                 fmt_int(a, sizeof(a), json_object_get(uw, "running")),
                 fmt_int(b, sizeof(b), json_object_get(uw, "waiting")));
        table_row(&t, "user work:", line);
    }
    table_row(&t, "state dir:", json_string_value(json_object_get(s, "state_dir")));
    if (json_is_string(json_object_get(s, "state_dir_error")))
        table_row(&t, "state dir error:", json_string_value(json_object_get(s, "state_dir_error")));
    table_row(&t, "socket:", json_string_value(json_object_get(s, "socket")));
    if (json_object_get(s, "max_nodes")) {
        snprintf(line, sizeof(line), "%s (open-file limit %s)",
                 fmt_int(a, sizeof(a), json_object_get(s, "max_nodes")),
                 fmt_int(b, sizeof(b), json_object_get(s, "open_files_max")));
        table_row(&t, "max nodes:", line);
    }
    table_print(&t);
}

int cmd_status(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    int64_t job = 0;
    if (argc > 2)
        return ctl_usage_error("usage: status [JOB]");
    if (argc == 2 && !ctl_parse_job(argv[1], &job))
        return EXIT_USAGE;
    int rc = ctl_connect(c);
    if (rc)
        return rc;
    json_t *r = ctl_request(c, GPT_CTL_OP_STATUS), *reply;
    if (job)
        json_object_set_new(r, "job", json_integer(job));
    if ((rc = ctl_call(c, r, &reply)))
        return rc;
    if (!c->json && job)
        status_print_job(json_object_get(reply, "job"));
    else if (!c->json)
        status_print_daemon(reply);
    json_decref(reply);
    return 0;
}

/* nodes --forget NODE: the coordinator releases NODE's id (root only). */
static int ctl_nodes_forget(struct ctl *c, const char *node)
{
    int rc = ctl_connect(c);
    json_t *r, *reply;
    if (rc)
        return rc;
    r = ctl_request(c, GPT_CTL_OP_NODES);
    json_object_set_new(r, "forget", json_string(node));
    if ((rc = ctl_call(c, r, &reply)))
        return rc;
    if (!c->json)
        printf("forgot node %s: the next gptd to join as it takes the id\n", out_esc(node, 0));
    json_decref(reply);
    return 0;
}

int cmd_nodes(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    static const struct option opts[] = {{"forget", required_argument, 0, 'f'}, {0, 0, 0, 0}};
    const char *forget = NULL;
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (ch != 'f')
            return EXIT_USAGE;
        forget = optarg;
    }
    if (optind < argc)
        return ctl_usage_error("nodes takes no arguments but --forget NODE");
    if (forget)
        return ctl_nodes_forget(c, forget);
    int rc = ctl_connect(c);
    json_t *reply;
    if (rc || (rc = ctl_call(c, ctl_request(c, GPT_CTL_OP_NODES), &reply)))
        return rc;
    if (!c->json) {
        /* A cluster's nodes carry a heartbeat age and their current ranks;
         * a single gptd reports its job instead. */
        struct table t = {
            .ncols = 10,
            .right = {false, false, true, true, true, true, false, false, false, false}};
        table_row(&t, "NODE", "STATE", "HEARTBEAT", "WORKERS", "JOB", "RANKS", "DEVICES",
                  "GPU UTIL", "GPU MEM", "VERSION");
        size_t i;
        json_t *n;
        json_array_foreach(json_object_get(reply, "nodes"), i, n)
        {
            char w[32], j[32], rk[48], hb[32], gu[256], gm[512];
            const json_t *gpus = json_object_get(n, "gpus");
            const json_t *age = json_object_get(n, "heartbeat_age_s");
            const char *ranks = json_string_value(json_object_get(n, "ranks"));
            int64_t job = json_integer_value(json_object_get(n, "job"));
            snprintf(hb, sizeof(hb), "%s", "-");
            if (json_is_number(age))
                snprintf(hb, sizeof(hb), "%.1fs ago", json_number_value(age));
            /* The job placed on the node (a cluster's) or running there
             * (a single gptd's), and its ranks of that job's world. */
            snprintf(rk, sizeof(rk), "%s", ranks ? ranks : "-");
            if (job)
                fmt_int(j, sizeof(j), json_object_get(n, "job"));
            else
                snprintf(j, sizeof(j), "-");
            table_row(&t, json_string_value(json_object_get(n, "node")),
                      json_string_value(json_object_get(n, "state")), hb,
                      fmt_int(w, sizeof(w), json_object_get(n, "workers")), j, rk,
                      json_string_value(json_object_get(n, "devices")),
                      fmt_gpus_util(gu, sizeof(gu), gpus), fmt_gpus_mem(gm, sizeof(gm), gpus),
                      json_string_value(json_object_get(n, "version")));
        }
        table_print(&t);
        /* Nodes kept off placement: why, and until when. */
        json_array_foreach(json_object_get(reply, "nodes"), i, n)
        {
            const char *why = json_string_value(json_object_get(n, "quarantine"));
            const char *until = json_string_value(json_object_get(n, "quarantined_until"));
            if (why)
                printf("quarantined: %s until %s: %s\n",
                       out_esc(json_string_value(json_object_get(n, "node")), 0),
                       out_esc(until ? until : "?", 0), out_esc(why, 0));
        }
        /* Where the cluster meets and who keeps its queue. */
        const char *rdzv = json_string_value(json_object_get(reply, "rdzv"));
        json_array_foreach(json_object_get(reply, "nodes"), i, n)
        {
            const char *role = json_string_value(json_object_get(n, "role"));
            if (rdzv && role && strcmp(role, "coordinator") == 0)
                printf("coordinator: %s, store at %s\n",
                       out_esc(json_string_value(json_object_get(n, "node")), 0), out_esc(rdzv, 0));
        }
    }
    json_decref(reply);
    return 0;
}
