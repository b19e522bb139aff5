/*
 * cli_opt: a gptd subcommand's option table (see cli_opt.h): getopt_long
 * and --help from the same rows. Main thread; owns nothing.
 */
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli_opt.h"
#include "suggest.h"

/* The help's second column: where an option's text starts. */
#define CLI_HELP_COL 25
/* getopt_long's value for row i (above any short option's character). */
#define CLI_OPT_VAL 0x100

void cli_cmd_help(const struct cli_cmd *cmd, FILE *f)
{
    fputs(cmd->intro, f);
    fputs("\noptions:\n", f);
    for (size_t i = 0; i < cmd->n_opts; i++) {
        const struct cli_opt *o = &cmd->opts[i];
        char left[80], shortname[8] = "";
        if (o->short_name)
            snprintf(shortname, sizeof(shortname), "-%c, ", o->short_name);
        int n = snprintf(left, sizeof(left), "  %s--%s%s%s", shortname, o->name,
                         o->value ? " " : "", o->value ? o->value : "");
        fprintf(f, "%s%*s", left, n < CLI_HELP_COL - 2 ? CLI_HELP_COL - n : 2, "");
        for (const char *s = o->help; *s;) {
            size_t len = strcspn(s, "\n");
            fprintf(f, "%.*s\n", (int)len, s);
            s += len;
            if (*s == '\n' && *++s)
                fprintf(f, "%*s", CLI_HELP_COL, "");
        }
    }
}

uint64_t cli_cmd_bit(const struct cli_cmd *cmd, const char *name)
{
    for (size_t i = 0; i < cmd->n_opts; i++)
        if (strcmp(cmd->opts[i].name, name) == 0)
            return UINT64_C(1) << i;
    return 0;
}

/* "a or b", "a, b or c": a choice row's values, for its error. */
static void cli_choices_text(const char *const *choices, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; choices[i] && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s",
                                 i == 0           ? ""
                                 : choices[i + 1] ? ", "
                                                  : " or ",
                                 choices[i]);
}

/* Checks and stores one row's value. 0, or -EINVAL after saying why. */
static int cli_opt_store(const struct cli_cmd *cmd, const struct cli_opt *o, const char *v,
                         void *args)
{
    char *field = (char *)args + o->off, *end, list[128];
    errno = 0;
    switch (o->kind) {
    case CLI_OPT_STR:
        *(const char **)field = v;
        return 0;
    case CLI_OPT_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (!errno && end != v && !*end && v[0] != '-' && x >= o->lo && x <= o->hi) {
            *(uint64_t *)field = x;
            return 0;
        }
        if (o->lo == 0 && o->hi == UINT64_MAX)
            fprintf(stderr, "%s: --%s must be an unsigned integer, got '%s'\n", cmd->prog, o->name,
                    v);
        else
            fprintf(stderr, "%s: --%s must be in [%llu, %llu], got '%s'\n", cmd->prog, o->name,
                    (unsigned long long)o->lo, (unsigned long long)o->hi, v);
        return -EINVAL;
    }
    case CLI_OPT_FRACTION: {
        double x = strtod(v, &end);
        if (!errno && end != v && !*end && x >= 0 && x < 1) {
            *(double *)field = x;
            return 0;
        }
        fprintf(stderr, "%s: --%s must be in [0, 1), got '%s'\n", cmd->prog, o->name, v);
        return -EINVAL;
    }
    case CLI_OPT_CHOICE:
        for (int i = 0; o->choices[i]; i++)
            if (strcmp(v, o->choices[i]) == 0) {
                *(int *)field = i;
                return 0;
            }
        cli_choices_text(o->choices, list, sizeof(list));
        fprintf(stderr, "%s: --%s must be %s, got '%s'\n", cmd->prog, o->name, list, v);
        return -EINVAL;
    default:
        return 0;
    }
}

/* An option the table lacks (with the closest it has), or one without its
 * value; then the help. */
static void cli_unknown_option(const struct cli_cmd *cmd, const char *arg, int missing_value)
{
    const char *names[64], *hint = NULL;
    char word[GPT_SUGGEST_LEN_MAX + 1];
    for (size_t i = 0; i < cmd->n_opts; i++)
        names[i] = cmd->opts[i].name;
    snprintf(word, sizeof(word), "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
    if (missing_value)
        fprintf(stderr, "%s: %s needs a value\n", cmd->prog, arg);
    else if (strncmp(arg, "--", 2) == 0 && (hint = gpt_suggest(word, names, cmd->n_opts)))
        fprintf(stderr, "%s: unknown option %s (did you mean --%s?)\n", cmd->prog, arg, hint);
    else
        fprintf(stderr, "%s: unknown option %s\n", cmd->prog, arg);
    cli_cmd_help(cmd, stderr);
}

/* The row of getopt_long's value c (a long option's or a short name);
 * n_opts for none. */
static size_t cli_row_of(const struct cli_cmd *cmd, int c)
{
    if (c >= CLI_OPT_VAL)
        return (size_t)(c - CLI_OPT_VAL);
    for (size_t i = 0; i < cmd->n_opts; i++)
        if (cmd->opts[i].short_name == c)
            return i;
    return cmd->n_opts;
}

/* The first required row not given: says which, -EINVAL; else 0. */
static int cli_check_required(const struct cli_cmd *cmd, uint64_t given)
{
    for (size_t i = 0; i < cmd->n_opts; i++) {
        const struct cli_opt *o = &cmd->opts[i];
        if (!o->required || given & (UINT64_C(1) << i))
            continue;
        if (o->short_name)
            fprintf(stderr, "%s: -%c %s is required\n", cmd->prog, o->short_name,
                    o->value ? o->value : "");
        else
            fprintf(stderr, "%s: --%s is required\n", cmd->prog, o->name);
        cli_cmd_help(cmd, stderr);
        return -EINVAL;
    }
    return 0;
}

int cli_cmd_parse(const struct cli_cmd *cmd, int argc, char **argv, void *args, uint64_t *ret_given)
{
    assert(cmd->n_opts <= 64);
    struct option lo[64 + 1];
    char shorts[3 * 64 + 3] = ":"; /* ':': a missing value comes back as ':' */
    size_t ns = 1;
    for (size_t i = 0; i < cmd->n_opts; i++) {
        const struct cli_opt *o = &cmd->opts[i];
        bool takes = o->kind != CLI_OPT_HELP;
        lo[i] = (struct option){o->name, takes ? required_argument : no_argument, NULL,
                                CLI_OPT_VAL + (int)i};
        if (o->short_name) {
            shorts[ns++] = o->short_name;
            if (takes)
                shorts[ns++] = ':';
        }
    }
    lo[cmd->n_opts] = (struct option){NULL, 0, NULL, 0};
    shorts[ns] = 0;
    uint64_t given = 0;
    opterr = 0;
    optind = 1;
    for (;;) {
        int at = optind, c = getopt_long(argc, argv, shorts, lo, NULL);
        if (c == -1)
            break;
        size_t i = cli_row_of(cmd, c);
        if (c == '?' || c == ':' || i >= cmd->n_opts) {
            cli_unknown_option(cmd, argv[at < argc ? at : argc - 1], c == ':');
            return 2;
        }
        if (cmd->opts[i].kind == CLI_OPT_HELP) {
            cli_cmd_help(cmd, stdout);
            return 0;
        }
        if (cli_opt_store(cmd, &cmd->opts[i], optarg, args) < 0)
            return 2;
        given |= UINT64_C(1) << i;
    }
    *ret_given = given;
    return cli_check_required(cmd, given) < 0 ? 2 : -1;
}
