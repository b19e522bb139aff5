/*
 * http_conns: see http_conns.h. Owns the entries of a doubly linked list,
 * in the order the connections started; every field under `mu`.
 */
#include "http_conns.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>

struct http_conn {
    struct http_conn *prev, *next;
    int fd;
    bool busy;        /* a request is being answered */
    bool over;        /* came beyond the limit while every other one was busy */
    bool shut;        /* shut down by this table; libmicrohttpd closes it soon */
    int64_t since_ms; /* waiting since (start, or end of the last reply) */
};

struct http_conns {
    pthread_mutex_t mu;
    struct http_conn *head, *tail;
    int live; /* entries not shut down */
    int max;
    int64_t timeout_ms;
};

struct http_conns *http_conns_new(int max, int64_t timeout_ms)
{
    struct http_conns *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    pthread_mutex_init(&t->mu, NULL);
    t->max = max;
    t->timeout_ms = timeout_ms;
    return t;
}

void http_conns_free(struct http_conns *t)
{
    if (!t)
        return;
    for (struct http_conn *c = t->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* Under mu. The socket stays open (libmicrohttpd's); the peer and
 * libmicrohttpd both see the end of the stream. */
static void http_conns_shut(struct http_conns *t, struct http_conn *c)
{
    (void)shutdown(c->fd, SHUT_RDWR);
    c->shut = true;
    t->live--;
}

/* Under mu. Beyond the limit: shuts the oldest waiting connection other
 * than `c` down. Returns false when every other one is busy. */
static bool http_conns_make_room(struct http_conns *t, struct http_conn *c)
{
    if (t->live <= t->max)
        return true;
    struct http_conn *oldest = NULL;
    for (struct http_conn *o = t->head; o; o = o->next)
        if (o != c && !o->busy && !o->shut && (!oldest || o->since_ms < oldest->since_ms))
            oldest = o;
    if (!oldest)
        return false;
    http_conns_shut(t, oldest);
    return true;
}

struct http_conn *http_conns_open(struct http_conns *t, int fd, int64_t now_ms)
{
    struct http_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->fd = fd;
    c->since_ms = now_ms;
    pthread_mutex_lock(&t->mu);
    c->prev = t->tail;
    if (t->tail)
        t->tail->next = c;
    else
        t->head = c;
    t->tail = c;
    t->live++;
    c->over = !http_conns_make_room(t, c);
    pthread_mutex_unlock(&t->mu);
    return c;
}

void http_conns_close(struct http_conns *t, struct http_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&t->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        t->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        t->tail = c->prev;
    if (!c->shut)
        t->live--;
    pthread_mutex_unlock(&t->mu);
    free(c);
}

bool http_conns_request(struct http_conns *t, struct http_conn *c)
{
    if (!c)
        return false;
    pthread_mutex_lock(&t->mu);
    c->busy = true;
    /* Room may have come since it started: a reply ended, a connection
     * closed, or one now waits. */
    if (c->over)
        c->over = !http_conns_make_room(t, c);
    bool over = c->over;
    pthread_mutex_unlock(&t->mu);
    return over;
}

void http_conns_request_done(struct http_conns *t, struct http_conn *c, int64_t now_ms)
{
    if (!c)
        return;
    pthread_mutex_lock(&t->mu);
    c->busy = false;
    c->since_ms = now_ms;
    pthread_mutex_unlock(&t->mu);
}

int http_conns_sweep(struct http_conns *t, int64_t now_ms)
{
    int n = 0;
    pthread_mutex_lock(&t->mu);
    for (struct http_conn *c = t->head; c; c = c->next)
        if (!c->busy && !c->shut && now_ms - c->since_ms > t->timeout_ms) {
            http_conns_shut(t, c);
            n++;
        }
    pthread_mutex_unlock(&t->mu);
    return n;
}

int http_conns_live(struct http_conns *t)
{
    pthread_mutex_lock(&t->mu);
    int n = t->live;
    pthread_mutex_unlock(&t->mu);
    return n;
}
