/*
 * handlers_work: queuing an op's work (`sample`, `export`, the copy of
 * `submit --resume-from`) in the user work pool for its client (see
 * handlers.h, userwork.h). The op files call down to it; it calls none of
 * them. Loop thread only.
 */
#include "handlers.h"

int handler_userwork_submit(struct daemon_ctx *d, struct control_client *cl, const json_t *id,
                            struct userwork_item *it, bool with_client, struct gpt_err *err)
{
    struct userwork_wait w;
    it->uid = cl->uid;
    it->owner = with_client ? cl : NULL;
    int rc = userwork_submit(d->userwork, it, &w, err);
    if (rc == 1) {
        (void)control_reply_ok(cl, id,
                               json_pack("{s:s, s:i, s:i, s:i, s:i}", "type", "waiting", "ahead",
                                         w.ahead, "running", w.running_mine, "per_uid", w.per_uid,
                                         "threads", w.threads));
        rc = 0;
    }
    return rc;
}
