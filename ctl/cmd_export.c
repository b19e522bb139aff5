/*
 * cmd_export: `gptctl export JOB [--snapshot ID] --format hf|llmc|gguf -o
 * PATH` (the daemon writes PATH as the job's owner), `gptctl submit
 * --init-from JOB[:SNAPSHOT]`'s look-up of that job's snapshot and the
 * JOB[:SNAPSHOT] argument of --init-from and --resume-from. Thin: one
 * request each, decisions in the daemon.
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export_args.h"
#include "gptctl.h"

int cmd_export(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    static const struct option opts[] = {{"snapshot", required_argument, 0, 's'},
                                         {"format", required_argument, 0, 'f'},
                                         {"output", required_argument, 0, 'o'},
                                         {"dtype", required_argument, 0, 'd'},
                                         {0, 0, 0, 0}};
    const char *format = NULL, *out = NULL, *dtype = NULL;
    int64_t snap = 0, job;
    int ch;
    while ((ch = getopt_long(argc, argv, "s:f:o:", opts, NULL)) != -1) {
        switch (ch) {
        case 's':
            if (!ctl_parse_job(optarg, &snap))
                return EXIT_USAGE;
            break;
        case 'f':
            format = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'd':
            dtype = optarg;
            break;
        default:
            return EXIT_USAGE;
        }
    }
    struct gpt_export_args ea = {"JOB", argc - optind, format, out, dtype};
    struct gpt_err err;
    if (gpt_export_args_check(&ea, &err) < 0)
        return ctl_usage_error("%s", err.msg);
    if (!ctl_parse_job(argv[optind], &job))
        return EXIT_USAGE;
    /* The daemon has another working directory: relative paths are the
     * client's. */
    char abs[PATH_MAX], cwd[PATH_MAX];
    if (out[0] != '/') {
        if (!getcwd(cwd, sizeof(cwd)) ||
            snprintf(abs, sizeof(abs), "%s/%s", cwd, out) >= (int)sizeof(abs))
            return ctl_usage_error("-o: path too long");
        out = abs;
    }
    int rc = ctl_connect(c);
    if (rc)
        return rc;
    json_t *r = ctl_request(c, GPT_CTL_OP_EXPORT), *reply;
    json_object_set_new(r, "job", json_integer(job));
    json_object_set_new(r, "format", json_string(format));
    json_t *o = json_string(out);
    if (!o) {
        json_decref(r);
        return ctl_usage_error("-o must be valid UTF-8");
    }
    json_object_set_new(r, "output", o);
    if (snap)
        json_object_set_new(r, "snapshot", json_integer(snap));
    if (dtype)
        json_object_set_new(r, "dtype", json_string(dtype));
    /* gptd writes as this user: with this user's umask, as a program run
     * here would. */
    mode_t mask = umask(077);
    umask(mask);
    json_object_set_new(r, "umask", json_integer((json_int_t)(mask & 0777)));
    if ((rc = ctl_call(c, r, &reply)))
        return rc;
    if (!c->json)
        printf("%s\n", out_esc(json_string_value(json_object_get(reply, "output")), 0));
    json_decref(reply);
    return 0;
}

int ctl_init_from_path(struct ctl *c, const char *arg, char *ret, size_t cap)
{
    int64_t job, snap;
    int rc = ctl_job_snapshot_parse("--init-from", arg, &job, &snap);
    if (rc)
        return rc;
    rc = c->fd >= 0 ? 0 : ctl_connect(c);
    if (rc)
        return rc;
    /* Only the job's owner starts from its weights (the daemon reads them
     * as the submitting user too, so a file they cannot read fails). */
    json_t *r = ctl_request(c, GPT_CTL_OP_STATUS), *reply;
    json_object_set_new(r, "job", json_integer(job));
    if ((rc = ctl_call(c, r, &reply)))
        return rc;
    json_t *owner = json_object_get(json_object_get(reply, "job"), "owner_uid");
    if (!owner)
        owner = json_object_get(reply, "owner_uid");
    uid_t me = getuid();
    if (me != 0 && (!json_is_integer(owner) || json_integer_value(owner) != (json_int_t)me)) {
        fprintf(stderr, "%s: --init-from: job %lld belongs to uid %lld, not to you\n", ctl_prog,
                (long long)job, (long long)json_integer_value(owner));
        json_decref(reply);
        return EXIT_FAIL;
    }
    json_decref(reply);
    r = ctl_request(c, GPT_CTL_OP_SNAPSHOTS);
    json_object_set_new(r, "job", json_integer(job));
    if ((rc = ctl_call(c, r, &reply)))
        return rc;
    json_t *list = json_object_get(reply, "snapshots"), *s;
    const char *path = NULL;
    size_t i;
    json_array_foreach(list, i, s)
    {
        if (snap ? json_integer_value(json_object_get(s, "id")) == snap : i == 0) {
            path = json_string_value(json_object_get(s, "path"));
            break;
        }
    }
    if (!path || snprintf(ret, cap, "model.init_from=%s", path) >= (int)cap) {
        if (snap)
            fprintf(stderr, "%s: --init-from: job %lld has no snapshot %lld\n", ctl_prog,
                    (long long)job, (long long)snap);
        else
            fprintf(stderr, "%s: --init-from: job %lld has no snapshot yet\n", ctl_prog,
                    (long long)job);
        json_decref(reply);
        return EXIT_FAIL;
    }
    json_decref(reply);
    return 0;
}
