/*
 * cmd_sample: `gptctl sample JOB --prompt TEXT | --prompt-ids IDS`: gptd
 * samples from the job's snapshot as its owner; the text is printed
 * escaped, the prompt set apart from what the model wrote.
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
