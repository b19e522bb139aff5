/*
 * mailbox: the MPSC list from worker threads to the loop (see mailbox.h).
 * Workers only touch mu, head and tail; everything else is the loop's.
 */
#include "mailbox.h"

#include <stdlib.h>

void mailbox_drain_now(struct mailbox *mb)
{
    uv_mutex_lock(&mb->mu);
    struct mailbox_msg *list = mb->head;
    mb->head = mb->tail = NULL;
    uv_mutex_unlock(&mb->mu);
    if (list)
        mb->drain(mb->ctx, list);
}

static void mailbox_on_async(uv_async_t *h)
{
    mailbox_drain_now(h->data);
}

int mailbox_init(struct mailbox *mb, uv_loop_t *loop, mailbox_drain_fn drain, void *ctx)
{
    mb->head = mb->tail = NULL;
    mb->drain = drain;
    mb->ctx = ctx;
    mb->closed = NULL;
    int rc = uv_mutex_init(&mb->mu);
    if (rc < 0)
        return rc;
    rc = uv_async_init(loop, &mb->async, mailbox_on_async);
    if (rc < 0) {
        uv_mutex_destroy(&mb->mu);
        return rc;
    }
    mb->async.data = mb;
    return 0;
}

void mailbox_post(struct mailbox *mb, struct mailbox_msg *m)
{
    m->next = NULL;
    uv_mutex_lock(&mb->mu);
    if (mb->tail)
        mb->tail->next = m;
    else
        mb->head = m;
    mb->tail = m;
    uv_mutex_unlock(&mb->mu);
    uv_async_send(&mb->async);
}

void mailbox_post_metric(void *mb, const struct gpt_metric *m)
{
    struct mailbox_msg *msg = calloc(1, sizeof(*msg));
    if (!msg)
        return;
    msg->kind = MAILBOX_METRIC;
    msg->u.m = *m;
    mailbox_post(mb, msg);
}

void mailbox_post_event(void *mb, const struct gpt_event *e)
{
    struct mailbox_msg *msg = calloc(1, sizeof(*msg));
    if (!msg)
        return;
    msg->kind = MAILBOX_EVENT;
    msg->u.e = *e;
    mailbox_post(mb, msg);
}

void mailbox_post_exit(void *mb)
{
    struct mailbox_msg *msg;
    while (!(msg = calloc(1, sizeof(*msg))))
        uv_sleep(10);
    msg->kind = MAILBOX_EXIT;
    mailbox_post(mb, msg);
}

void mailbox_free_list(struct mailbox_msg *list)
{
    while (list) {
        struct mailbox_msg *m = list;
        list = m->next;
        free(m);
    }
}

static void mailbox_on_closed(uv_handle_t *h)
{
    struct mailbox *mb = h->data;
    mailbox_free_list(mb->head);
    mb->head = mb->tail = NULL;
    uv_mutex_destroy(&mb->mu);
    if (mb->closed)
        mb->closed(mb->ctx);
}

void mailbox_close(struct mailbox *mb, void (*closed)(void *ctx))
{
    mb->closed = closed;
    uv_close((uv_handle_t *)&mb->async, mailbox_on_closed);
}
