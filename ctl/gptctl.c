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

static int cmd_help(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv);

/* The commands, in the order of the usage text. */
static const struct ctl_cmd ctl_cmds[] = {
    {"submit",
     "FILE [a.b=v ...] [--follow] [--priority N] [-m] [--init-from JOB[:SNAPSHOT]]"
     " [--resume-from JOB[:SNAPSHOT]]",
     "queue a job, print its id (-m: one job per combination of a.b=v1,v2 choices;"
     " --resume-from: continue that job's full state)",
     cmd_submit, GPT_CTL_OP_SUBMIT},
    {"validate", "FILE [a.b=v ...]", "check a job file fully, without submitting", cmd_submit,
     GPT_CTL_OP_VALIDATE},
    {"list", "[--sweep ID]", "all jobs, or one sweep's", cmd_list, GPT_CTL_OP_LIST},
    {"status", "[JOB]", "the daemon, or one job", cmd_status, GPT_CTL_OP_STATUS},
    {"logs", "[-f] [--since STEP] JOB", "metrics and events (-f: follow until the end)", cmd_logs,
     GPT_CTL_OP_LOGS},
    {"cancel", "JOB", "stop a job (it writes a snapshot first)", cmd_job_op, GPT_CTL_OP_CANCEL},
    {"resume", "JOB [KEY=VALUE ...] [--snapshot ID]",
     "queue a finished job again from a snapshot, changing keys such as trainer.max_steps",
     cmd_job_op, GPT_CTL_OP_RESUME},
    {"snapshots", "JOB", "a job's snapshots", cmd_job_op, GPT_CTL_OP_SNAPSHOTS},
    {"sample", "JOB --prompt TEXT|--prompt-ids IDS [--tokens N] [--temperature T] [--top-k K]",
     "generate text from the newest snapshot", cmd_sample, GPT_CTL_OP_SAMPLE},
    {"plot", "JOB... -o FILE.svg [--lr]",
     "train and validation loss against step, one curve per job (--lr: a learning-rate panel)",
     cmd_plot, GPT_CTL_OP_LOGS},
    {"export", "JOB [--snapshot ID] --format hf|llmc|gguf -o PATH [--dtype f32|f16|bf16]",
     "write a snapshot as a Hugging Face folder, an llm.c checkpoint or GGUF", cmd_export,
     GPT_CTL_OP_EXPORT},
    {"nodes", "", "the nodes of the cluster", cmd_nodes, GPT_CTL_OP_NODES},
    {"help", "", "this text", cmd_help, -1},
};

#define CTL_N_CMDS    (sizeof(ctl_cmds) / sizeof(ctl_cmds[0]))
#define CTL_USAGE_COL 30 /* the help column */

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
            "The socket is --socket, else $GPTD_SOCKET, else %s.\n"
            "Job files are JSON or YAML (.yaml/.yml). Exit status: 0 ok, 1 the request\n"
            "failed, 2 usage error, 3 cannot reach gptd.\n",
            GPT_CTL_SOCKET_DEFAULT);
}

static int cmd_help(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)c, (void)cmd, (void)argc, (void)argv;
    ctl_usage(stdout);
    return 0;
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
    const struct ctl_cmd *cmd = NULL;
    for (size_t i = 0; i < CTL_N_CMDS && n > 0; i++)
        if (strcmp(args[0], ctl_cmds[i].name) == 0)
            cmd = &ctl_cmds[i];
    optind = 0; /* GNU getopt: start over; each command parses args[1..] */
    int rc;
    if (cmd)
        rc = cmd->run(&c, cmd, n, args);
    else
        rc = ctl_usage_error("unknown command \"%s\"", n > 0 ? args[0] : "");
    if (c.fd >= 0)
        close(c.fd);
    gpt_ctl_linebuf_done(&c.lb);
    free(args);
    return rc;
}
