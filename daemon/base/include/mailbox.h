/*
 * mailbox: how records cross from worker threads to the loop thread. A
 * mutex-protected list (many producers, one consumer) and a uv_async that
 * wakes the loop; wakeups coalesce (libuv), so the loop drains the whole
 * list each time. A message is owned by the mailbox from its post until
 * the drain callback takes the list; messages still queued at close are
 * freed by the mailbox.
 *
 * The payload is what workers report (struct workers_opts' hooks):
 * metrics, events and the exit of the last worker. mailbox_post_* are the
 * hooks themselves, with the mailbox as their ctx.
 */
#ifndef GPTD_MAILBOX_H
#define GPTD_MAILBOX_H

#include <uv.h>

#include "metric.h"

enum mailbox_kind { MAILBOX_METRIC, MAILBOX_EVENT, MAILBOX_EXIT };

/* One record; allocated with calloc, freed with free. */
struct mailbox_msg {
    struct mailbox_msg *next;
    int kind;      /* enum mailbox_kind */
    char node[64]; /* the node that reported it; empty: this one */
    union {
        struct gpt_metric m;
        struct gpt_event e;
    } u;
};

/* Takes `list` (oldest first, linked through next; never NULL). Loop thread. */
typedef void (*mailbox_drain_fn)(void *ctx, struct mailbox_msg *list);

struct mailbox {
    uv_mutex_t mu;
    struct mailbox_msg *head, *tail; /* under mu */
    uv_async_t async;
    mailbox_drain_fn drain;
    void *ctx;
    void (*closed)(void *ctx);
};

/* Embedded init on the loop thread: 0 or a negative errno (uv's). */
int mailbox_init(struct mailbox *mb, uv_loop_t *loop, mailbox_drain_fn drain, void *ctx);

/* Appends `m` (taken) and wakes the loop. Any thread; holds the list's
 * mutex only for a pointer swap. */
void mailbox_post(struct mailbox *mb, struct mailbox_msg *m);

/* Worker hooks (ctx: the struct mailbox). A metric or event that cannot
 * be allocated is dropped (a lost metric is better than a stalled
 * trainer); the exit is retried until it can be: without it the run would
 * look alive forever. Any thread. */
void mailbox_post_metric(void *mb, const struct gpt_metric *m);
void mailbox_post_event(void *mb, const struct gpt_event *e);
void mailbox_post_exit(void *mb);

/* Drains now, as a wakeup would (loop thread): for records that must be
 * handled before something the loop is about to do. */
void mailbox_drain_now(struct mailbox *mb);

/* Frees a list the drain callback took (NULL is fine). */
void mailbox_free_list(struct mailbox_msg *list);

/* Closes the async handle (loop thread). When it is closed, queued
 * messages are freed, the mutex destroyed and closed(ctx) runs (NULL: no
 * call). No post may follow the close. */
void mailbox_close(struct mailbox *mb, void (*closed)(void *ctx));

#endif
