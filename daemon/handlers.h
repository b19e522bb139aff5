/*
 * handlers: the control-request handlers behind the one dispatcher
 * (handlers.c). The dispatcher applies what the op tables say
 * (proto/ctl.c: forwarding to the coordinator, owner checks, refusal while
 * stopping; handlers.c: limits from the configuration) and then calls the
 * op's handler; handlers that live in files of their own are declared
 * here. Private to daemon/handlers*.c. (Not engine/ops/: those are the
 * engine's compute ops.)
 *
 * Loop thread only.
 */
#ifndef GPTD_HANDLERS_H
#define GPTD_HANDLERS_H

#include "daemon.h"

#define HANDLER_SAMPLE_TOKENS_DEFAULT 64 /* sample: tokens when the request names none */

/* A handler that replies itself (now, later or as a stream). Returns 0, or
 * an error the dispatcher replies with (and `err` says why). */
typedef int (*handler_run_fn)(struct daemon_ctx *d, struct control_client *cl,
                              const struct gpt_ctl_request *req, struct gpt_err *err);

/* sample on the node that holds the job (handlers_sample.c): queues the model
 * run on a uv work thread; the reply comes from its done callback. */
int handler_sample_run(struct daemon_ctx *d, struct control_client *cl,
                       const struct gpt_ctl_request *req, struct gpt_err *err);
/* sample on a cluster member: asks the coordinator where this node's copy
 * of the snapshot is, then samples that copy here. */
int handler_sample_member(struct daemon_ctx *d, struct control_client *cl,
                          const struct gpt_ctl_request *req, struct gpt_err *err);

/* export on the node that holds the job (handlers_export.c): checks the
 * owner, writes the model on a uv work thread as the job's owner; the
 * reply comes from its done callback. A member refuses (the coordinator
 * holds the records). */
int handler_export_run(struct daemon_ctx *d, struct control_client *cl,
                       const struct gpt_ctl_request *req, struct gpt_err *err);
int handler_export_member(struct daemon_ctx *d, struct control_client *cl,
                          const struct gpt_ctl_request *req, struct gpt_err *err);

/* Queues `it` (work, done, data set) in the user work pool for client
 * `cl` (handlers_work.c), whose uid it counts against and whose going
 * cancels it (when `with_client`); when it must wait for a slot, tells the
 * client so at once (a line of type "waiting" with request `id`, before
 * the answer). Returns 0 (the done callback will run) or an error for the
 * dispatcher (-GPT_E_LIMIT: the queue is full; -EAGAIN: gptd is
 * stopping). */
int handler_userwork_submit(struct daemon_ctx *d, struct control_client *cl, const json_t *id,
                            struct userwork_item *it, bool with_client, struct gpt_err *err);

/* Parses and fully validates a spec object (as `gptd run` would), paths
 * and file access as the client `uid` (handlers_spec.c). */
int handler_parse_spec(const struct daemon_ctx *d, const json_t *spec, uid_t uid,
                       struct gpt_job *job, struct gpt_err *err);
/* submit's checks before anything is queued (handlers_spec.c): the sweep
 * id, the spec (as `gptd run` would, paths as the client `uid`), a
 * snapshot only with --resume-from. Fills *job. */
int handler_submit_check(struct daemon_ctx *d, const struct gpt_ctl_request *req, uid_t uid,
                         struct gpt_job *job, struct gpt_err *err);

/* submit --resume-from (handlers_resume_from.c): checks the request,
 * holds a queue slot, reads the source's snapshot and writes the new
 * job's copy on the user work pool (as the source's and the new job's
 * owners); the reply comes when the job is queued or refused. */
int handler_resume_from_run(struct daemon_ctx *d, struct control_client *cl,
                            const struct gpt_ctl_request *req, struct gpt_err *err);

#endif
