/*
 * mirror: a member's view of the cluster's jobs, for the gptctl connected
 * to a node that is not the coordinator. The coordinator's SQLite is the
 * record; nothing is copied into the member's own database.
 *
 * - `list`, `status JOB` and `snapshots JOB` are asked of the coordinator
 *   (cluster_read_op) and answered with its result; so are `cancel JOB` and
 *   `resume JOB`, which the coordinator does to its queue, checking the
 *   client's uid as for its own clients.
 * - `logs JOB` replays the job's history from the coordinator's database in
 *   chunks (the next chunk only once the previous one is written to the
 *   client), then, with `follow`, the coordinator's feed (cluster.h) until
 *   the end of the job. Each history chunk names the feed position it is
 *   complete up to, so the switch to live records neither loses nor repeats
 *   one. The newest MIRROR_RING feed records are kept for that switch; metric
 *   steps sent to one client only increase (a resumed world repeats steps).
 *
 * Loop thread only. A client with a request in flight is referenced.
 */
#ifndef GPTD_MIRROR_H
#define GPTD_MIRROR_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cluster.h"
#include "config.h"
#include "control.h"
#include "ctl.h"
#include "gpt_err.h"

#define MIRROR_RING       1024 /* feed records kept */
#define MIRROR_HIST_CHUNK 256  /* metrics per history chunk */

struct mirror;

/* A new mirror fed by `cl` (it installs the cluster's feed hooks). Borrows
 * everything; NULL on ENOMEM. */
struct mirror *mirror_new(struct cluster *cl, struct control *ctl, const struct config *cfg);
/* After the cluster is closed. NULL allowed. */
void mirror_free(struct mirror *m);

/* list, status JOB, snapshots JOB, cancel JOB or resume JOB through the
 * coordinator; the reply comes later. Returns 0 or an error to reply with now. */
int mirror_read(struct mirror *m, struct control_client *cl, const struct gpt_ctl_request *req,
                struct gpt_err *err);
/* Starts a `logs` stream (validated request fields). */
int mirror_follow(struct mirror *m, struct control_client *cl, const json_t *id, int64_t job,
                  int64_t since, bool follow, struct gpt_err *err);
/* The client's output drained: the next history chunk. */
void mirror_client_drained(struct mirror *m, struct control_client *cl);

#endif
