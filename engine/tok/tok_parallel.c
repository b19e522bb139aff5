/*
 * tok_parallel: encoding one large text on several threads with the same
 * ids as gpt_tok_encode. The text is cut into chunks at gpt_tok_safe_cut
 * points; threads (each with its own struct gpt_tok_enc) take chunks from
 * an atomic counter and the chunks' ids are joined in text order. The
 * calling thread starts and joins the threads; it blocks until done.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tok.h"

#define TOK_PAR_CHUNK_MIN   (256u << 10)
#define TOK_PAR_THREADS_MAX 256

struct tok_par_chunk {
    const unsigned char *text;
    size_t len;
    struct gpt_tok_ids ids;
    int rc;
    struct gpt_err err;
};

struct tok_par {
    const struct gpt_tok *t;
    unsigned flags;
    struct tok_par_chunk *chunks;
    size_t n;
    atomic_size_t next;
};

static void *tok_par_worker(void *arg)
{
    struct tok_par *p = arg;
    struct gpt_tok_enc *e = NULL;
    struct gpt_err err = {0};
    int rc = gpt_tok_enc_new(p->t, &e, &err);
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n)
            break;
        struct tok_par_chunk *c = &p->chunks[i];
        if (rc < 0) {
            c->rc = rc;
            c->err = err;
            continue;
        }
        c->rc = gpt_tok_encode(e, c->text, c->len, p->flags, &c->ids, &c->err);
    }
    gpt_tok_enc_free(e);
    return NULL;
}

int gpt_tok_encode_parallel(const struct gpt_tok *t, const void *text, size_t len, unsigned flags,
                            int threads, struct gpt_tok_ids *out, struct gpt_err *err)
{
    GPT_ASSERT(t && out && (text || len == 0));
    if (threads < 1 || threads > TOK_PAR_THREADS_MAX)
        return gpt_err_set(err, -EINVAL, NULL, "threads must be in [1, %d], got %d",
                           TOK_PAR_THREADS_MAX, threads);
    size_t target = len / ((size_t)threads * 4);
    if (target < TOK_PAR_CHUNK_MIN)
        target = TOK_PAR_CHUNK_MIN;
    size_t max_chunks = len / target + 2;
    struct tok_par p = {.t = t, .flags = flags};
    p.chunks = calloc(max_chunks, sizeof(*p.chunks));
    pthread_t *tids = calloc((size_t)threads, sizeof(*tids));
    int rc = 0;
    if (!p.chunks || !tids) {
        rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
        goto out;
    }
    const unsigned char *s = text;
    for (size_t pos = 0; pos < len && p.n < max_chunks;) {
        size_t end = len - pos <= target || p.n + 1 == max_chunks
                         ? len
                         : gpt_tok_safe_cut(s, len, pos + target);
        p.chunks[p.n++] = (struct tok_par_chunk){.text = s + pos, .len = end - pos};
        pos = end;
    }
    atomic_init(&p.next, 0);
    int started = 0;
    for (; started < threads && (size_t)started < p.n; started++)
        if (pthread_create(&tids[started], NULL, tok_par_worker, &p) != 0)
            break;
    if (started == 0)
        tok_par_worker(&p); /* no thread could start: encode here */
    for (int i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    size_t total = 0;
    for (size_t i = 0; i < p.n; i++) {
        if (p.chunks[i].rc < 0) {
            rc = p.chunks[i].rc;
            if (err)
                *err = p.chunks[i].err;
            goto out;
        }
        total += p.chunks[i].ids.n;
    }
    if (out->cap - out->n < total) {
        int32_t *v = realloc(out->v, (out->n + total) * sizeof(*v));
        if (!v) {
            rc = gpt_err_set(err, -ENOMEM, NULL, "out of memory");
            goto out;
        }
        out->v = v;
        out->cap = out->n + total;
    }
    for (size_t i = 0; i < p.n; i++) {
        if (p.chunks[i].ids.n)
            memcpy(out->v + out->n, p.chunks[i].ids.v, p.chunks[i].ids.n * sizeof(int32_t));
        out->n += p.chunks[i].ids.n;
    }
out:
    for (size_t i = 0; p.chunks && i < p.n; i++)
        gpt_tok_ids_done(&p.chunks[i].ids);
    free(p.chunks);
    free(tids);
    return rc;
}
