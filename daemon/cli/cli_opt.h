/*
 * cli_opt: the option table of a gptd subcommand (`gptd tokenize`, `gptd
 * export`). One row per option makes getopt_long's table, checks and
 * stores the value, and writes the option's lines of --help, so the
 * help (and the man page and bash completion checked against it) cannot
 * fall behind the parser. Main thread; owns nothing.
 */
#ifndef GPTD_CLI_OPT_H
#define GPTD_CLI_OPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum cli_opt_kind {
    CLI_OPT_HELP,     /* prints the help on stdout; the command exits 0 */
    CLI_OPT_STR,      /* a const char * field */
    CLI_OPT_U64,      /* a uint64_t field in [lo, hi] */
    CLI_OPT_FRACTION, /* a double field in [0, 1) */
    CLI_OPT_CHOICE,   /* an int field: the index of the value in `choices` */
};

struct cli_opt {
    const char *name;           /* the long name, without "--" */
    char short_name;            /* -X, or 0 */
    const char *value;          /* the value's name in the help ("DIR"); NULL: none */
    int kind;                   /* enum cli_opt_kind */
    size_t off;                 /* of the field in the command's arguments struct */
    uint64_t lo, hi;            /* CLI_OPT_U64's range */
    const char *const *choices; /* CLI_OPT_CHOICE's values, NULL-terminated */
    int required;               /* the command refuses to run without it */
    const char *help;           /* its --help text; '\n' starts another line */
};

/* A subcommand: its name in messages, the help's text before the option
 * list (the usage line and what the command does), the table. */
struct cli_cmd {
    const char *prog; /* "gptd tokenize" */
    const char *intro;
    const struct cli_opt *opts;
    size_t n_opts; /* at most 64 */
};

/* The --help text: cmd->intro, then one entry per row. */
void cli_cmd_help(const struct cli_cmd *cmd, FILE *f);

/* Parses argv's options (getopt_long from the table, argv[0] being the
 * subcommand) into `args`, the struct the rows' offsets point into.
 * Returns -1 to go on, with optind at the first operand, or the exit
 * status: 0 after --help, 2 after a bad option or value (said on stderr,
 * the help after an unknown option) or a required option left out. Bit i
 * of *ret_given is set when row i was given. */
int cli_cmd_parse(const struct cli_cmd *cmd, int argc, char **argv, void *args,
                  uint64_t *ret_given);

/* Bit of the row named `name` in cli_cmd_parse's *ret_given (0 when the
 * table has none). */
uint64_t cli_cmd_bit(const struct cli_cmd *cmd, const char *name);

#endif
