/*
 * cmd_sample: `gptctl sample JOB --prompt TEXT | --prompt-ids IDS`: gptd
 * samples from the job's snapshot as its owner; the text is printed
 * escaped, the prompt set apart from what the model wrote. And `gptctl
 * samples JOB`: the replies gptd kept for the job (its newest
 * sample_history), each as a header line (when, who, which snapshot, the
 * settings) and its prompt and text in the same layout.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gptctl.h"
#include "str_escape.h"

int cmd_sample(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    static const struct option opts[] = {{"prompt", required_argument, 0, 'p'},
                                         {"tokens", required_argument, 0, 'n'},
                                         {"temperature", required_argument, 0, 't'},
                                         {"top-k", required_argument, 0, 'k'},
                                         {"snapshot", required_argument, 0, 's'},
                                         {"prompt-ids", required_argument, 0, 'i'},
                                         {0, 0, 0, 0}};
    const char *prompt = NULL, *prompt_ids = NULL;
    int64_t tokens = 0, top_k = -1, snap = 0, job;
    double temp = 0;
    bool ok = true;
    int ch;
    while ((ch = getopt_long(argc, argv, "p:n:t:k:s:i:", opts, NULL)) != -1) {
        char *end;
        switch (ch) {
        case 'p':
            prompt = optarg;
            break;
        case 'i':
            prompt_ids = optarg;
            break;
        case 'n':
            tokens = ctl_parse_int(optarg, "--tokens", &ok);
            break;
        case 'k':
            top_k = ctl_parse_int(optarg, "--top-k", &ok);
            break;
        case 's':
            snap = ctl_parse_int(optarg, "--snapshot", &ok);
            break;
        case 't':
            temp = strtod(optarg, &end);
            if (*end || !(temp > 0))
                return ctl_usage_error("--temperature must be a number > 0");
            break;
        default:
            return EXIT_USAGE;
        }
        if (!ok)
            return EXIT_USAGE;
    }
    if (optind + 1 != argc || !prompt == !prompt_ids)
        return ctl_usage_error("usage: sample JOB --prompt TEXT | --prompt-ids ID,ID,... "
                               "[--tokens N] [--temperature T] [--top-k K]");
    if (!ctl_parse_job(argv[optind], &job))
        return EXIT_USAGE;
    int rc = ctl_connect(c);
    if (rc)
        return rc;
    json_t *r = ctl_request(c, GPT_CTL_OP_SAMPLE), *reply;
    json_object_set_new(r, "job", json_integer(job));
    json_t *p = json_string(prompt ? prompt : prompt_ids);
    if (!p)
        return ctl_usage_error(prompt ? "--prompt must be valid UTF-8"
                                      : "--prompt-ids must be token ids such as 15496,11");
    json_object_set_new(r, prompt ? "prompt" : "prompt_ids", p);
    if (tokens)
        json_object_set_new(r, "tokens", json_integer(tokens));
    if (temp > 0)
        json_object_set_new(r, "temperature", json_real(temp));
    if (top_k >= 0)
        json_object_set_new(r, "top_k", json_integer(top_k));
    if (snap)
        json_object_set_new(r, "snapshot", json_integer(snap));
    if ((rc = ctl_call(c, r, &reply)))
        return rc;
    /* The prompt, a line that says where the model takes over, then what it
     * wrote, newline-terminated; --json keeps the text whole. */
    const char *text = json_string_value(json_object_get(reply, "text"));
    size_t pl = prompt && text && strncmp(text, prompt, strlen(prompt)) == 0 ? strlen(prompt) : 0;
    if (!c->json && pl) {
        printf("%s\n", out_esc(prompt, GPT_STR_ESCAPE_KEEP_NEWLINE));
        printf("--- generated ---\n");
    }
    if (!c->json)
        printf("%s\n", out_esc(text ? text + pl : "", GPT_STR_ESCAPE_KEEP_NEWLINE));
    json_decref(reply);
    return 0;
}

/* One kept sample: a header line, the prompt, the separator, the text. */
static void samples_print_one(const json_t *s)
{
    char id[32], when[64], uid[32], snap[32], step[32], tokens[32], temp[32], top_k[32], seed[32];
    const char *prompt = json_string_value(json_object_get(s, "prompt"));
    const char *ids = json_string_value(json_object_get(s, "prompt_ids"));
    const char *text = json_string_value(json_object_get(s, "completion"));
    printf("sample %s at %s by uid %s from snapshot %s (step %s): tokens %s, temperature %s,"
           " top-k %s, seed %s%s\n",
           fmt_int(id, sizeof(id), json_object_get(s, "id")),
           fmt_time(when, sizeof(when), json_object_get(s, "time")),
           fmt_int(uid, sizeof(uid), json_object_get(s, "uid")),
           json_integer_value(json_object_get(s, "snapshot_id")) > 0
               ? fmt_int(snap, sizeof(snap), json_object_get(s, "snapshot_id"))
               : "-",
           fmt_int(step, sizeof(step), json_object_get(s, "step")),
           fmt_int(tokens, sizeof(tokens), json_object_get(s, "tokens")),
           fmt_real(temp, sizeof(temp), json_object_get(s, "temperature"), -1),
           fmt_int(top_k, sizeof(top_k), json_object_get(s, "top_k")),
           fmt_int(seed, sizeof(seed), json_object_get(s, "seed")),
           json_is_true(json_object_get(s, "truncated")) ? " (text cut at 16 KiB)" : "");
    if (ids)
        printf("prompt ids: %s\n", out_esc(ids, 0));
    else
        printf("%s\n", out_esc(prompt ? prompt : "", GPT_STR_ESCAPE_KEEP_NEWLINE));
    printf("--- generated ---\n%s\n", out_esc(text ? text : "", GPT_STR_ESCAPE_KEEP_NEWLINE));
}

int cmd_samples(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv)
{
    (void)cmd;
    int64_t job;
    if (argc != 2)
        return ctl_usage_error("usage: samples JOB");
    if (!ctl_parse_job(argv[1], &job))
        return EXIT_USAGE;
    int rc = ctl_connect(c);
    if (rc)
        return rc;
    json_t *r = ctl_request(c, GPT_CTL_OP_SAMPLES), *reply;
    json_object_set_new(r, "job", json_integer(job));
    if ((rc = ctl_call(c, r, &reply)))
        return rc;
    if (!c->json) {
        /* Oldest first, as logs: the newest ends up above the prompt. */
        const json_t *list = json_object_get(reply, "samples");
        size_t n = json_array_size(list);
        if (!n)
            printf("job %lld has no samples kept (gptctl sample keeps its replies)\n",
                   (long long)job);
        for (size_t i = n; i-- > 0;) {
            samples_print_one(json_array_get(list, i));
            if (i)
                printf("\n");
        }
    }
    json_decref(reply);
    return 0;
}
