/*
 * export: `gptd export SNAPSHOT --format hf|llmc|gguf -o PATH` (offline,
 * as the user who runs it) and export_model, which the daemon's `export`
 * op runs on a work thread as the job's owner. Owns nothing between calls.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_opt.h"
#include "export.h"
#include "export_args.h"
#include "export_model.h"
#include "run_dir.h"

#define EXPORT_NAME_MAX       128     /* GGUF general.name kept (as the daemon's job name) */
#define EXPORT_SPEC_MAX_BYTES 1048576 /* largest spec.json read for the name */

int export_model(const char *in, enum gpt_fmt_kind kind, const char *out, const char *vocab_dir,
                 const char *dtype, const char *name, mode_t umask_bits, const char *tmp_prefix,
                 const atomic_int *cancel, struct gpt_err *err)
{
    const struct gpt_fmt_ops *o = gpt_fmt_ops_of(kind);
    if (!o || !o->write)
        return gpt_err_set(err, -ENOSYS, "format",
                           "the %s format is not built into this gptd (no writer)",
                           gpt_fmt_kind_name(kind));
    struct gpt_fmt_loaded l;
    int rc = gpt_fmt_load(in, &l, err);
    if (rc < 0)
        return rc;
    struct gpt_fmt_src src = {.cfg = l.cfg,
                              .params = l.params,
                              .n_params = l.n_params,
                              .vocab_dir = vocab_dir,
                              .dtype = dtype,
                              .name = name,
                              .cancel = cancel,
                              .file_mode = 0666 & ~umask_bits,
                              .dir_mode = 0777 & ~umask_bits,
                              .tmp_prefix = tmp_prefix};
    rc = gpt_fmt_export(kind, out, &src, err);
    gpt_fmt_loaded_done(&l);
    return rc;
}

/* The job's name from the spec.json a `gptd run` folder keeps beside its
 * snapshots (run_dir.h), into ret; false when `in` lies in no such folder. */
static bool export_run_name(const char *in, char *ret, size_t cap)
{
    const char *slash = strrchr(in, '/');
    char path[4096];
    int n = slash ? snprintf(path, sizeof(path), "%.*s/" RUN_DIR_SPEC, (int)(slash - in), in)
                  : snprintf(path, sizeof(path), RUN_DIR_SPEC);
    struct stat st;
    if (n < 0 || (size_t)n >= sizeof(path) || stat(path, &st) < 0 || !S_ISREG(st.st_mode) ||
        st.st_size > EXPORT_SPEC_MAX_BYTES)
        return false;
    json_t *spec = json_load_file(path, 0, NULL);
    const char *name = json_string_value(json_object_get(spec, "name"));
    bool ok = name && name[0];
    if (ok)
        snprintf(ret, cap, "%s", name);
    json_decref(spec);
    return ok;
}

/* GGUF general.name for `gptd export`: --name, else the run's job name,
 * else the file's stem ("snap-000000000200" of .../snap-000000000200.gpts,
 * "fortunes-hf" of a folder fortunes-hf/), as `gptctl export` names the
 * model after its job rather than "gptd". */
static void export_name(const char *in, const char *opt, char *ret, size_t cap)
{
    if (opt) {
        snprintf(ret, cap, "%s", opt);
        return;
    }
    if (export_run_name(in, ret, cap))
        return;
    size_t len = strlen(in);
    while (len > 1 && in[len - 1] == '/')
        len--;
    const char *base = in;
    for (size_t i = 0; i + 1 < len; i++)
        if (in[i] == '/')
            base = in + i + 1;
    size_t stem = len - (size_t)(base - in);
    for (size_t i = stem; i > 1; i--)
        if (base[i - 1] == '.') {
            stem = i - 1;
            break;
        }
    snprintf(ret, cap, "%.*s", (int)stem, base);
}

/* What `gptd export`'s command line says. */
struct export_args {
    const char *format, *out, *vocab, *dtype, *name;
};

#define EXPORT_ARG(f) offsetof(struct export_args, f)
static const struct cli_opt export_opts[] = {
    {"format", 'f', "F", CLI_OPT_STR, EXPORT_ARG(format),
     .help = "hf: a Hugging Face GPT2LMHeadModel folder;\n"
             "llmc: an llm.c checkpoint (version 3);\n"
             "gguf: GGUF v3 for llama.cpp"},
    {"output", 'o', "PATH", CLI_OPT_STR, EXPORT_ARG(out),
     .help = "the folder (hf) or file to write; written atomically,\n"
             "an existing folder or a symbolic link is refused"},
    {"vocab", 0, "DIR", CLI_OPT_STR, EXPORT_ARG(vocab),
     .help = "GPT-2 tokenizer files (encoder.json + vocab.bpe or\n"
             "vocab.json + merges.txt) to ship with the model"},
    {"dtype", 0, "T", CLI_OPT_STR, EXPORT_ARG(dtype),
     .help = "gguf: the matrices as f32 (default), f16 or bf16"},
    {"name", 0, "NAME", CLI_OPT_STR, EXPORT_ARG(name),
     .help = "gguf: the model's name (general.name); default: the job's\n"
             "name in the spec.json of the `gptd run` folder SNAPSHOT\n"
             "lies in, else SNAPSHOT's file name without its extension"},
    {"help", 'h', NULL, CLI_OPT_HELP, .help = "this help"},
};

static const struct cli_cmd export_cmd = {
    .prog = "gptd export",
    .intro = "usage: gptd export SNAPSHOT --format hf|llmc|gguf -o PATH [--vocab DIR]\n"
             "                   [--dtype f32|f16|bf16] [--name NAME]\n"
             "\n"
             "Writes SNAPSHOT, a gptd snapshot (.gpts), or a Hugging Face folder or an\n"
             "llm.c checkpoint to convert, in another tool's format.\n",
    .opts = export_opts,
    .n_opts = sizeof(export_opts) / sizeof(export_opts[0]),
};

int gptd_export_main(int argc, char **argv)
{
    struct export_args a = {0};
    uint64_t given;
    int rc = cli_cmd_parse(&export_cmd, argc, argv, &a, &given);
    if (rc >= 0)
        return rc;
    struct gpt_err err;
    gpt_err_clear(&err);
    struct gpt_export_args ea = {"SNAPSHOT", argc - optind, a.format, a.out, a.dtype};
    if (gpt_export_args_check(&ea, &err) < 0) {
        fprintf(stderr, "gptd export: %s\n", err.msg);
        cli_cmd_help(&export_cmd, stderr);
        return 2;
    }
    if (gpt_export_values_check(a.format, a.dtype, &err) < 0) {
        fprintf(stderr, "gptd export: %s\n", err.msg);
        return 2;
    }
    enum gpt_fmt_kind kind = gpt_fmt_kind_parse(a.format, &err);
    /* Written as any program this user runs would: under the umask. */
    mode_t mask = umask(022);
    umask(mask);
    char name[EXPORT_NAME_MAX];
    export_name(argv[optind], a.name, name, sizeof(name));
    rc = kind == GPT_FMT_NONE ? -EINVAL
                              : export_model(argv[optind], kind, a.out, a.vocab, a.dtype, name,
                                             mask, NULL, NULL, &err);
    if (rc < 0) {
        fprintf(stderr, "gptd export: %s\n", err.msg[0] ? err.msg : gpt_strerror(rc));
        return 1;
    }
    printf("%s\n", a.out);
    return 0;
}
