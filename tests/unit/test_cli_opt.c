/*
 * Unit tests of daemon/cli/cli_opt (the option tables of gptd tokenize and
 * gptd export) and proto/export_args (the export checks gptd export,
 * gptctl export and the daemon share): values stored by kind and checked
 * against their range, the given bits, required options, unknown options
 * with a hint, --help built from the rows, and the export refusals.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli_opt.h"
#include "export_args.h"

struct t_args {
    const char *name;
    uint64_t count;
    double share;
    int mode;
};

static const char *const t_modes[] = {"head", "random", "tail", NULL};
static const struct cli_opt t_opts[] = {
    {"name", 'o', "NAME", CLI_OPT_STR, offsetof(struct t_args, name), .required = 1,
     .help = "the name"},
    {"count", 0, "N", CLI_OPT_U64, offsetof(struct t_args, count), 1, 10,
     .help = "how many\nat most 10"},
    {"share", 0, "F", CLI_OPT_FRACTION, offsetof(struct t_args, share), .help = "a share"},
    {"mode", 0, "head|random|tail", CLI_OPT_CHOICE, offsetof(struct t_args, mode),
     .choices = t_modes, .help = "which"},
    {"help", 'h', NULL, CLI_OPT_HELP, .help = "this help"},
};
static const struct cli_cmd t_cmd = {"gptd t", "usage: gptd t -o NAME FILE\n", t_opts,
                                     sizeof(t_opts) / sizeof(t_opts[0])};

/* Parses a NULL-terminated argv (argv[0] "t"); what went to stderr in err. */
static int parse(struct t_args *a, uint64_t *given, char *err, size_t cap, ...)
{
    char *argv[16] = {"t"};
    int argc = 1;
    va_list ap;
    va_start(ap, cap);
    for (char *w; (w = va_arg(ap, char *)) && argc < 15;)
        argv[argc++] = w;
    va_end(ap);
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(STDERR_FILENO);
    assert_non_null(tmp);
    dup2(fileno(tmp), STDERR_FILENO);
    int rc = cli_cmd_parse(&t_cmd, argc, argv, a, given);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(tmp);
    size_t n = fread(err, 1, cap - 1, tmp);
    err[n] = 0;
    fclose(tmp);
    return rc;
}

static void test_values_stored(void **state)
{
    (void)state;
    struct t_args a = {0};
    uint64_t given = 0;
    char err[4096];
    assert_int_equal(parse(&a, &given, err, sizeof(err), "--count", "7", "--share", "0.25",
                           "--mode", "tail", "-o", "x", "file", NULL),
                     -1);
    assert_string_equal(a.name, "x");
    assert_int_equal(a.count, 7);
    assert_true(a.share == 0.25);
    assert_int_equal(a.mode, 2);
    assert_int_equal(optind, 9); /* the operand */
    assert_int_equal(given, cli_cmd_bit(&t_cmd, "name") | cli_cmd_bit(&t_cmd, "count") |
                                cli_cmd_bit(&t_cmd, "share") | cli_cmd_bit(&t_cmd, "mode"));
    assert_int_equal(cli_cmd_bit(&t_cmd, "count"), 2);
    assert_int_equal(cli_cmd_bit(&t_cmd, "none"), 0);
    assert_string_equal(err, "");
}

static void test_values_refused(void **state)
{
    (void)state;
    struct t_args a = {0};
    uint64_t given;
    char err[4096];
    assert_int_equal(parse(&a, &given, err, sizeof(err), "-o", "x", "--count", "11", NULL), 2);
    assert_non_null(strstr(err, "gptd t: --count must be in [1, 10], got '11'"));
    assert_int_equal(parse(&a, &given, err, sizeof(err), "-o", "x", "--count", "-1", NULL), 2);
    assert_int_equal(parse(&a, &given, err, sizeof(err), "-o", "x", "--count", "3x", NULL), 2);
    assert_int_equal(parse(&a, &given, err, sizeof(err), "-o", "x", "--share", "1", NULL), 2);
    assert_non_null(strstr(err, "--share must be in [0, 1), got '1'"));
    assert_int_equal(parse(&a, &given, err, sizeof(err), "-o", "x", "--mode", "mid", NULL), 2);
    assert_non_null(strstr(err, "--mode must be head, random or tail, got 'mid'"));
}

static void test_required_unknown_help(void **state)
{
    (void)state;
    struct t_args a = {0};
    uint64_t given;
    char err[4096];
    assert_int_equal(parse(&a, &given, err, sizeof(err), "--count", "2", "file", NULL), 2);
    assert_non_null(strstr(err, "gptd t: -o NAME is required"));
    assert_int_equal(parse(&a, &given, err, sizeof(err), "-o", "x", "--cuont", "2", NULL), 2);
    assert_non_null(strstr(err, "unknown option --cuont (did you mean --count?)"));
    assert_non_null(strstr(err, "usage: gptd t")); /* the help follows */
    assert_int_equal(parse(&a, &given, err, sizeof(err), "-o", NULL), 2);
    assert_non_null(strstr(err, "-o needs a value"));
    assert_int_equal(parse(&a, &given, err, sizeof(err), "-o", "x", "-q", NULL), 2);
    /* --help wins over a missing required option */
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    FILE *null = fopen("/dev/null", "w");
    dup2(fileno(null), STDOUT_FILENO);
    int rc = parse(&a, &given, err, sizeof(err), "--help", NULL);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    fclose(null);
    assert_int_equal(rc, 0);
}

static void test_help_from_rows(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    cli_cmd_help(&t_cmd, f);
    fclose(f);
    assert_string_equal(text, "usage: gptd t -o NAME FILE\n"
                              "\n"
                              "options:\n"
                              "  -o, --name NAME        the name\n"
                              "  --count N              how many\n"
                              "                         at most 10\n"
                              "  --share F              a share\n"
                              "  --mode head|random|tail  which\n"
                              "  -h, --help             this help\n");
    free(text);
}

static void test_export_args(void **state)
{
    (void)state;
    struct gpt_err err;
    struct gpt_export_args a = {"JOB", 1, "hf", "/tmp/x", NULL};
    assert_int_equal(gpt_export_args_check(&a, &err), 0);
    a.n_operands = 2;
    assert_int_equal(gpt_export_args_check(&a, &err), -EINVAL);
    assert_string_equal(err.msg, "give exactly one JOB");
    a = (struct gpt_export_args){"SNAPSHOT", 1, NULL, "/tmp/x", NULL};
    assert_int_equal(gpt_export_args_check(&a, &err), -EINVAL);
    assert_string_equal(err.msg, "--format is required");
    a = (struct gpt_export_args){"SNAPSHOT", 1, "hf", "", NULL};
    assert_int_equal(gpt_export_args_check(&a, &err), -EINVAL);
    assert_string_equal(err.msg, "-o PATH is required");
    assert_string_equal(err.path, "output");

    assert_int_equal(gpt_export_values_check("gguf", "bf16", &err), 0);
    assert_int_equal(gpt_export_values_check("llmc", NULL, &err), 0);
    assert_int_equal(gpt_export_values_check("gpts", NULL, &err), -EINVAL);
    assert_string_equal(err.msg, "format must be hf, llmc or gguf, got \"gpts\"");
    assert_int_equal(gpt_export_values_check("gguf", "f8", &err), -EINVAL);
    assert_string_equal(err.msg, "dtype must be f32, f16 or bf16, got \"f8\"");
    assert_string_equal(err.path, "dtype");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_stored),         cmocka_unit_test(test_values_refused),
        cmocka_unit_test(test_required_unknown_help), cmocka_unit_test(test_help_from_rows),
        cmocka_unit_test(test_export_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
