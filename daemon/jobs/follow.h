/*
 * follow: the one implementation of a `logs` stream's bookkeeping, shared
 * by its two sources:
 *
 *   local   (jobs.c)   the history from this node's database in chunks,
 *                      then the live fan-out of the records the job
 *                      queue stores;
 *   remote  (mirror.c) a member's stream of the coordinator's job: the
 *                      history read from the coordinator in chunks, then
 *                      the coordinator's feed.
 *
 * Both keep the stream's state in the client's `logs` (control.h), start
 * it with follow_begin (at most max_followers_per_job following streams
 * per job; a connection that already streams never gets here: the
 * dispatcher refuses it), filter records with
 * follow_filter and end it with an "end" record (follow_end_json). The
 * source only fetches.
 *
 * Loop thread only; follow_filter and follow_end_json are pure.
 */
#ifndef GPTD_FOLLOW_H
#define GPTD_FOLLOW_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "control.h"
#include "db.h"
#include "gpt_err.h"
#include "mailbox.h"

#define FOLLOW_REPLAY_CHUNK 256 /* metrics per history chunk of the local source */

enum follow_verdict {
    FOLLOW_SKIP, /* not wanted by this stream */
    FOLLOW_SEND, /* send it */
    FOLLOW_END,  /* the end of the job: send it, then the stream is over */
};

/* What a stream does with a record of its job of `type` ("metric",
 * "event", "end"; NULL or other: skip) at `step`. Metrics and events
 * before `since` are skipped. `monotonic` (the remote source, which may
 * see a resumed world repeat steps): a metric must also be past
 * `after`, which then becomes its step. */
int follow_filter(struct control_logs *l, const char *type, int64_t step, bool monotonic);

/* The "end" record of a stream: {"type": "end", "job", "state", "error"?}
 * (error only when non-empty). New; NULL on ENOMEM. */
json_t *follow_end_json(int64_t job, const char *state, const char *error);

/* Starts a stream on `cl` (id copied) after the checks: -EBUSY when the
 * connection streams already, -GPT_E_LIMIT when `follow` and the job has
 * max_followers following streams in `ctl` already. The caller then
 * pumps its source. */
int follow_begin(struct control *ctl, int max_followers, struct control_client *cl,
                 const json_t *id, int64_t job, int64_t since, bool follow, bool remote,
                 struct gpt_err *err);

/* Sends one record (taken; NULL is ignored) on the stream. */
void follow_send(struct control_client *cl, json_t *rec);

/* Sends the end record (taken) and ends the stream. */
void follow_end(struct control_client *cl, json_t *end);

/* Ends the stream without a record (after an error reply, or when the
 * client goes). */
void follow_detach(struct control_client *cl);

/* ---- the local source ---- */

/* `logs` of a job in this node's database (-ENOENT: no such job) after
 * follow_begin's checks; sends the history's first chunk. */
int follow_local_start(struct db *db, struct control *ctl, int max_followers,
                       struct control_client *cl, const json_t *id, int64_t job, int64_t since,
                       bool follow, struct gpt_err *err);
/* Sends the next history chunks while the client's output is drained,
 * then switches the stream to live (follow) or ends it. */
void follow_local_pump(struct db *db, struct control_client *cl);
/* Live: a record of `job` (a metric or event, borrowed) to its local
 * streams past their history. A stream with more than `lag_bytes` of
 * output queued when a metric arrives goes back to the database from that
 * metric on, and rejoins the live stream once it has caught up. */
void follow_local_record(struct db *db, struct control *ctl, size_t lag_bytes, int64_t job,
                         const struct mailbox_msg *msg);
/* Live: the end of job `j` (in a final state) to its local streams. */
void follow_local_end(struct control *ctl, const struct db_job *j);
/* The end record of job `j` (new; NULL on ENOMEM). */
json_t *follow_job_end_json(const struct db_job *j);

#endif
