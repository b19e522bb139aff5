/*
 * fuzz_jobspec: libFuzzer target for the job-spec parser. Every input is
 * parsed as JSON and as YAML; a job that parses must serialise, and the
 * serialised form must parse back to the same JSON text (the round trip
 * the daemon relies on when it stores a job).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const overrides[] = {"trainer.log_every=5"};
    struct gpt_job job, again;
    struct gpt_err err;
    char *text, *text2;

    if (gpt_jobspec_parse((const char *)data, size, overrides, 1, &job, &err) == 0) {
        text = gpt_jobspec_to_json(&job);
        if (!text)
            abort();
        if (gpt_jobspec_parse(text, strlen(text), NULL, 0, &again, &err) != 0) {
            fprintf(stderr, "round trip failed: %s: %s\n%s\n", err.path, err.msg, text);
            abort();
        }
        text2 = gpt_jobspec_to_json(&again);
        if (!text2 || strcmp(text, text2) != 0)
            abort();
        free(text);
        free(text2);
    } else if (err.code != -GPT_E_SPEC || !memchr(err.msg, '\0', sizeof(err.msg))) {
        abort(); /* every failure here is a spec error with a message */
    }
    (void)gpt_jobspec_parse_yaml((const char *)data, size, NULL, 0, &job, &err);
    return 0;
}
