/*
 * gptctl: the command-line client of gptd. Parses the global options, then
 * runs one row of the command table, which also makes the usage text. The
 * commands build one request, send it over the control socket and print
 * the replies: aligned tables for people, raw JSON lines with --json.
 * Decisions live in the daemon; the client only talks and formats (see
 * gptctl.h for the files).
 *
 * Exit status: 0 ok, 1 the request failed, 2 usage, 3 cannot reach gptd.
 * Single-threaded; blocking I/O.
 */
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gptctl.h"
#include "suggest.h"

static int cmd_help(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);

/* Each command's options: the one source of its help text, of the check
 * that rejects (and corrects) an unknown option before the command parses
 * its arguments, and of what tests/integration/doc_lint.sh compares with
 * gptctl(1) and the bash completion. */
static const struct ctl_opt submit_opts[] = {
    {"follow", 'f', NULL, "print the job's logs until it ends, as logs -f"},
    {"priority", 'p', "N", "queue priority (higher runs first; default 0)"},
    {"multirun", 'm', NULL, "a sweep: one job per combination of a.b=v1,v2 choices"},
    {"init-from", 'i', "JOB[:SNAPSHOT]", "start from the weights of another job of yours"},
    {"resume-from", 0, "JOB[:SNAPSHOT]", "continue another job's full training state"},
    {NULL, 0, NULL, NULL},
};
static const struct ctl_opt list_opts[] = {
    {"sweep", 0, "ID", "only the jobs of sweep ID (from submit -m)"},
    {"state", 0, "STATE", "only jobs queued, waiting, running, completed, failed or cancelled"},
    {"user", 0, "USER", "only the jobs of USER (a name or a uid)"},
    {NULL, 0, NULL, NULL},
};
static const struct ctl_opt logs_opts[] = {
    {"follow", 'f', NULL, "keep printing live records until the job ends"},
    {"since", 's', "STEP", "start at training step STEP"},
    {"csv", 0, NULL, "metric records as CSV with a header row (events left out)"},
    {NULL, 0, NULL, NULL},
};
static const struct ctl_opt cancel_opts[] = {
    {"wait", 0, NULL, "return once the job has stopped (its snapshot written), not at once"},
    {NULL, 0, NULL, NULL},
};
static const struct ctl_opt resume_opts[] = {
    {"snapshot", 's', "ID", "continue from snapshot ID (default: the newest valid one)"},
    {NULL, 0, NULL, NULL},
};
static const struct ctl_opt sample_opts[] = {
    {"prompt", 'p', "TEXT", "the prompt, as text"},
    {"prompt-ids", 'i', "IDS", "the prompt as comma-separated token ids"},
    {"tokens", 'n', "N", "how many tokens to generate"},
    {"temperature", 't', "T", "sampling temperature (0: greedy)"},
    {"top-k", 'k', "K", "sample among the K likeliest tokens only"},
    {"snapshot", 's', "ID", "use snapshot ID instead of the newest"},
    {NULL, 0, NULL, NULL},
};
static const struct ctl_opt plot_opts[] = {
    {"output", 'o', "FILE.svg", "the SVG file to write"},
    {"lr", 0, NULL, "add a learning-rate panel"},
    {NULL, 0, NULL, NULL},
};
static const struct ctl_opt export_opts[] = {
    {"snapshot", 's', "ID", "export snapshot ID (default: the newest)"},
    {"format", 'f', "FMT", "hf (a Hugging Face folder), llmc (an llm.c checkpoint) or gguf"},
    {"output", 'o', "PATH", "the folder (hf) or file (llmc, gguf) to write"},
    {"dtype", 0, "DTYPE", "f32, f16 or bf16 weights (default f32)"},
    {NULL, 0, NULL, NULL},
};
static const struct ctl_opt nodes_opts[] = {
    {"forget", 0, "NODE",
     "root, on the coordinator: drop NODE's node key, so the next gptd to join as NODE takes the "
     "id"},
    {NULL, 0, NULL, NULL},
};
static const struct ctl_opt no_opts[] = {{NULL, 0, NULL, NULL}};

/* The commands, in the order of the usage text. */
static const struct ctl_cmd ctl_cmds[] = {
    {"submit",
     "FILE [a.b=v ...] [--follow] [--priority N] [-m] [--init-from JOB[:SNAPSHOT]]"
     " [--resume-from JOB[:SNAPSHOT]]",
     "queue a job, print its id (-m: one job per combination of a.b=v1,v2 choices;"
     " --resume-from: continue that job's full state)",
     cmd_submit, GPT_CTL_OP_SUBMIT, submit_opts,
     "gptctl submit -m job.yaml optimizer.lr=1e-3,3e-3 model.n_embd=32,48"},
    {"validate", "FILE [a.b=v ...]", "check a job file fully, without submitting", cmd_submit,
     GPT_CTL_OP_VALIDATE, no_opts, "gptctl validate job.yaml trainer.max_steps=200"},
    {"list", "[--sweep ID] [--state STATE] [--user USER]",
     "all jobs, or one sweep's with each job's overrides, then its runs best first", cmd_list,
     GPT_CTL_OP_LIST, list_opts, "gptctl list --sweep sw-1a2b3c4d"},
    {"sweep", "ID",
     "a sweep's runs sorted by best validation loss (then final loss): overrides, steps,"
     " tokens, time",
     cmd_sweep, GPT_CTL_OP_LIST, no_opts, "gptctl sweep sw-1a2b3c4d"},
    {"status", "[JOB]", "the daemon, or one job", cmd_status, GPT_CTL_OP_STATUS, no_opts,
     "gptctl status 4"},
    {"logs", "[-f] [--since STEP] [--csv] JOB", "metrics and events (-f: follow until the end)",
     cmd_logs, GPT_CTL_OP_LOGS, logs_opts, "gptctl logs -f 4"},
    {"cancel", "JOB [--wait]", "stop a job (it writes a snapshot first; --wait: until it has)",
     cmd_job_op, GPT_CTL_OP_CANCEL, cancel_opts, "gptctl cancel --wait 4 && gptctl resume 4"},
    {"resume", "JOB [KEY=VALUE ...] [--snapshot ID]",
     "queue a finished job again from a snapshot, changing keys such as trainer.max_steps",
     cmd_job_op, GPT_CTL_OP_RESUME, resume_opts, "gptctl resume 4 trainer.max_steps=600"},
    {"snapshots", "JOB", "a job's snapshots", cmd_job_op, GPT_CTL_OP_SNAPSHOTS, no_opts,
     "gptctl snapshots 4"},
    {"sample", "JOB --prompt TEXT|--prompt-ids IDS [--tokens N] [--temperature T] [--top-k K]",
     "generate text from the newest snapshot", cmd_sample, GPT_CTL_OP_SAMPLE, sample_opts,
     "gptctl sample 4 --prompt 'Once upon a time' --tokens 64 --temperature 0.8"},
    {"samples", "JOB",
     "the job's last samples (gptd keeps each sample reply: prompt, snapshot, settings, text)",
     cmd_samples, GPT_CTL_OP_SAMPLES, no_opts, "gptctl samples 4"},
    {"plot", "JOB|RUN_DIR... -o FILE.svg [--lr]",
     "train and validation loss against step, one curve per job or gptd run folder (--lr: a"
     " learning-rate panel)",
     cmd_plot, GPT_CTL_OP_LOGS, plot_opts, "gptctl plot 4 5 gptd-snapshots/tiny/run-* -o loss.svg"},
    {"export", "JOB [--snapshot ID] --format hf|llmc|gguf -o PATH [--dtype f32|f16|bf16]",
     "write a snapshot as a Hugging Face folder, an llm.c checkpoint or GGUF", cmd_export,
     GPT_CTL_OP_EXPORT, export_opts, "gptctl export 4 --format gguf -o model.gguf --dtype f16"},
    {"nodes", "[--forget NODE]",
     "the nodes of the cluster (--forget, root on the coordinator: release NODE's id for a gptd"
     " whose state directory was wiped)",
     cmd_nodes, GPT_CTL_OP_NODES, nodes_opts, "gptctl nodes"},
    {"help", "[COMMAND]", "this text, or one command's", cmd_help, -1, no_opts,
     "gptctl help submit"},
};

#define CTL_N_CMDS    (sizeof(ctl_cmds) / sizeof(ctl_cmds[0]))
#define CTL_USAGE_COL 30 /* the help column */
#define CTL_OPT_COL   28 /* the help column of a command's options */

static void ctl_usage(FILE *f)
{
    fprintf(f, "usage: gptctl [--socket PATH] [--json] COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < CTL_N_CMDS; i++) {
        const struct ctl_cmd *cmd = &ctl_cmds[i];
        char head[128];
        snprintf(head, sizeof(head), "%s%s%s", cmd->name, cmd->synopsis[0] ? " " : "",
                 cmd->synopsis);
        if (strlen(head) < CTL_USAGE_COL)
            fprintf(f, "  %-*s%s\n", CTL_USAGE_COL, head, cmd->help);
        else
            fprintf(f, "  %s\n  %-*s%s\n", head, CTL_USAGE_COL, "", cmd->help);
    }
    fprintf(f,
            "\n"
            "gptctl COMMAND --help (or gptctl help COMMAND) shows a command's options and an\n"
            "example. The socket is --socket, else $GPTD_SOCKET, else %s.\n"
            "Job files are JSON or YAML (.yaml/.yml). Exit status: 0 ok, 1 the request\n"
            "failed, 2 usage error, 3 cannot reach gptd.\n",
            GPT_CTL_SOCKET_DEFAULT);
}

static void ctl_opt_line(FILE *f, char short_name, const char *name, const char *arg,
                         const char *help)
{
    char head[96];
    snprintf(head, sizeof(head), "%c%c%s--%s%s%s", short_name ? '-' : ' ',
             short_name ? short_name : ' ', short_name ? ", " : "  ", name, arg ? " " : "",
             arg ? arg : "");
    if (strlen(head) < CTL_OPT_COL)
        fprintf(f, "  %-*s%s\n", CTL_OPT_COL, head, help);
    else
        fprintf(f, "  %s\n  %-*s%s\n", head, CTL_OPT_COL, "", help);
}

/* One command's help: usage, what it does, its options, one example. */
static void ctl_cmd_usage(FILE *f, const struct ctl_cmd *cmd)
{
    fprintf(f, "usage: gptctl %s%s%s\n\n%s\n\noptions:\n", cmd->name, cmd->synopsis[0] ? " " : "",
            cmd->synopsis, cmd->help);
    for (const struct ctl_opt *o = cmd->opts; o->name; o++)
        ctl_opt_line(f, o->short_name, o->name, o->arg, o->help);
    ctl_opt_line(f, 0, "json", NULL, "print gptd's replies as raw JSON lines");
    ctl_opt_line(f, 0, "socket", "PATH", "gptd's control socket");
    ctl_opt_line(f, 'h', "help", NULL, "this text");
    fprintf(f, "\nexample:\n  %s\n", cmd->example);
}

static const struct ctl_cmd *ctl_cmd_find(const char *name)
{
    for (size_t i = 0; i < CTL_N_CMDS; i++)
        if (strcmp(name, ctl_cmds[i].name) == 0)
            return &ctl_cmds[i];
    return NULL;
}

static int ctl_unknown_command(const char *name)
{
    const char *names[CTL_N_CMDS];
    for (size_t i = 0; i < CTL_N_CMDS; i++)
        names[i] = ctl_cmds[i].name;
    const char *hint = gpt_suggest(name, names, CTL_N_CMDS);
    if (hint)
        return ctl_usage_error("unknown command \"%s\" (did you mean %s?)", out_esc(name, 0), hint);
    return ctl_usage_error("unknown command \"%s\"", out_esc(name, 0));
}

static int cmd_help(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)c, (void)cmd;
    if (argc > 2)
        return ctl_usage_error("help takes one COMMAND");
    if (argc == 1) {
        ctl_usage(stdout);
        return 0;
    }
    const struct ctl_cmd *of = ctl_cmd_find(argv[1]);
    if (!of)
        return ctl_unknown_command(argv[1]);
    ctl_cmd_usage(stdout, of);
    return 0;
}

/* An option of the command's table, by long name (`len` bytes) or short
 * letter; NULL when it has none. */
static const struct ctl_opt *ctl_opt_find(const struct ctl_cmd *cmd, const char *name, size_t len,
                                          char short_name)
{
    for (const struct ctl_opt *o = cmd->opts; o->name; o++)
        if (short_name ? o->short_name == short_name
                       : strlen(o->name) == len && strncmp(o->name, name, len) == 0)
            return o;
    return NULL;
}

static int ctl_unknown_option(const struct ctl_cmd *cmd, const char *arg)
{
    char word[GPT_SUGGEST_LEN_MAX + 1];
    const char *names[CTL_OPTS_MAX + 1];
    size_t n = 0;
    snprintf(word, sizeof(word), "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
    for (const struct ctl_opt *o = cmd->opts; o->name && n < CTL_OPTS_MAX; o++)
        names[n++] = o->name;
    names[n++] = "help";
    const char *hint = arg[1] == '-' ? gpt_suggest(word, names, n) : NULL;
    if (hint)
        return ctl_usage_error("%s: unknown option \"%s\" (did you mean --%s?)", cmd->name,
                               out_esc(arg, 0), hint);
    return ctl_usage_error("%s: unknown option \"%s\"", cmd->name, out_esc(arg, 0));
}

/* Reads args[1..n) against the command's options before the command does:
 * --help or -h anywhere (not as an option's value) prints the command's
 * help; an option it does not have is refused with the closest one it
 * has. Returns -1 to run the command, else the exit status. */
static int ctl_check_opts(const struct ctl_cmd *cmd, int n, char **args)
{
    for (int i = 1; i < n; i++) {
        const char *a = args[i];
        if (strcmp(a, "--") == 0)
            break;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            ctl_cmd_usage(stdout, cmd);
            return 0;
        }
        if (a[0] != '-' || !a[1])
            continue;
        const struct ctl_opt *o;
        if (a[1] == '-') {
            size_t len = strcspn(a + 2, "=");
            if (!(o = ctl_opt_find(cmd, a + 2, len, 0)))
                return ctl_unknown_option(cmd, a);
            if (o->arg && !a[2 + len])
                i++; /* its value, whatever it looks like */
            continue;
        }
        for (const char *p = a + 1; *p; p++) { /* -fm, -p5, -p 5 */
            if (!(o = ctl_opt_find(cmd, NULL, 0, *p)))
                return ctl_unknown_option(cmd, a);
            if (o->arg) {
                i += !p[1];
                break;
            }
        }
    }
    return -1;
}

int main(int argc, char **argv)
{
    struct ctl c = {.fd = -1};
    c.socket = getenv("GPTD_SOCKET");
    if (!c.socket || !c.socket[0])
        c.socket = GPT_CTL_SOCKET_DEFAULT;
    static const struct option opts[] = {{"socket", required_argument, 0, 'S'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int ch;
    /* Global options stop at the command ("+"): its options are its own. */
    while ((ch = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (ch) {
        case 'S':
            c.socket = optarg;
            break;
        case 'j':
            c.json = true;
            break;
        case 'h':
            ctl_usage(stdout);
            return 0;
        default:
            return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        ctl_usage(stderr);
        return EXIT_USAGE;
    }
    /* --json (and --socket) may also follow the command. */
    int n = 0;
    char **args = calloc((size_t)argc + 1, sizeof(char *));
    if (!args)
        return EXIT_FAIL;
    for (int i = optind; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            c.json = true;
        else if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc)
            c.socket = argv[++i];
        else if (strncmp(argv[i], "--socket=", 9) == 0)
            c.socket = argv[i] + 9;
        else
            args[n++] = argv[i];
    }
    const struct ctl_cmd *cmd = n > 0 ? ctl_cmd_find(args[0]) : NULL;
    optind = 0; /* GNU getopt: start over; each command parses args[1..] */
    int rc;
    if (!cmd) {
        rc = n > 0 ? ctl_unknown_command(args[0]) : ctl_usage_error("no COMMAND");
    } else {
        ctl_usage_set_command(cmd->name);
        if ((rc = ctl_check_opts(cmd, n, args)) < 0)
            rc = cmd->run(&c, cmd, n, args);
    }
    if (c.fd >= 0)
        close(c.fd);
    gpt_ctl_linebuf_done(&c.lb);
    free(args);
    return rc;
}
