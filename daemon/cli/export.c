/*
 * export: `gptd export SNAPSHOT --format hf|llmc|gguf -o PATH` (offline,
 * as the user who runs it) and export_model, which the daemon's `export`
 * op runs on a work thread as the job's owner. Owns nothing between calls.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "export.h"
#include "export_model.h"
#include "run_dir.h"

#define EXPORT_NAME_MAX      128     /* GGUF general.name kept (as the daemon's job name) */
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

static void export_usage(FILE *f)
{
    fprintf(f, "usage: gptd export SNAPSHOT --format hf|llmc|gguf -o PATH [--vocab DIR]\n"
               "                   [--dtype f32|f16|bf16]\n"
               "  SNAPSHOT          a gptd snapshot (.gpts), or a Hugging Face folder or an\n"
               "                    llm.c checkpoint to convert\n"
               "  --format F        hf: a Hugging Face GPT2LMHeadModel folder; llmc: an llm.c\n"
               "                    checkpoint (version 3); gguf: GGUF v3 for llama.cpp\n"
               "  -o PATH           the folder (hf) or file to write; written atomically,\n"
               "                    an existing folder or a symbolic link is refused\n"
               "  --vocab DIR       GPT-2 tokenizer files (encoder.json + vocab.bpe or\n"
               "                    vocab.json + merges.txt) to ship with the model\n"
               "  --dtype T         gguf: the matrices as f32 (default), f16 or bf16\n"
               "  --name NAME       gguf: the model's name (general.name); default: the job's\n"
               "                    name in the spec.json of the `gptd run` folder SNAPSHOT\n"
               "                    lies in, else SNAPSHOT's file name without its extension\n");
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

int gptd_export_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"format", required_argument, NULL, 'f'}, {"output", required_argument, NULL, 'o'},
        {"vocab", required_argument, NULL, 'v'},  {"dtype", required_argument, NULL, 'd'},
        {"name", required_argument, NULL, 'n'},   {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *format = NULL, *out = NULL, *vocab = NULL, *dtype = NULL, *name_opt = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "f:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            format = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'v':
            vocab = optarg;
            break;
        case 'd':
            dtype = optarg;
            break;
        case 'n':
            name_opt = optarg;
            break;
        case 'h':
            export_usage(stdout);
            return 0;
        default:
            export_usage(stderr);
            return 2;
        }
    }
    if (argc - optind != 1 || !format || !out) {
        fprintf(stderr, "gptd export: %s\n",
                argc - optind != 1 ? "give exactly one SNAPSHOT"
                : !format          ? "--format is required"
                                   : "-o PATH is required");
        export_usage(stderr);
        return 2;
    }
    struct gpt_err err;
    gpt_err_clear(&err);
    enum gpt_fmt_kind kind = gpt_fmt_kind_parse(format, &err);
    if (kind == GPT_FMT_NONE || kind == GPT_FMT_GPTS) {
        fprintf(stderr, "gptd export: --format: %s\n",
                kind == GPT_FMT_NONE ? err.msg : "give hf, llmc or gguf");
        return 2;
    }
    /* Written as any program this user runs would: under the umask. */
    mode_t mask = umask(022);
    umask(mask);
    char name[EXPORT_NAME_MAX];
    export_name(argv[optind], name_opt, name, sizeof(name));
    int rc = export_model(argv[optind], kind, out, vocab, dtype, name, mask, NULL, NULL, &err);
    if (rc < 0) {
        fprintf(stderr, "gptd export: %s\n", err.msg[0] ? err.msg : gpt_strerror(rc));
        return 1;
    }
    printf("%s\n", out);
    return 0;
}
