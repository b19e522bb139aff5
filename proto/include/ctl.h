/*
 * ctl: the control protocol between gptctl and gptd. JSON, one object per
 * line, over a Unix socket.
 *
 *   request  {"id": ID, "op": "submit", ...fields of the op}
 *   reply    {"id": ID, "ok": true, ...result}                 (one line), or
 *            {"id": ID, "ok": true, "type": "metric"|"event", ...} (streams)
 *            ... ending with {"id": ID, "ok": true, "type": "end", "state": S}
 *   failure  {"id": ID, "ok": false, "error": {"code", "message", "path"?}}
 *   waiting  {"id": ID, "ok": true, "type": "waiting", "ahead", "running",
 *            "per_uid", "threads"} before the reply of a request that waits
 *            for a slot of gptd's user work pool (sample, export,
 *            submit --resume-from)
 *
 * ID is a non-negative integer or a short string; it is echoed as given
 * (null when the request had none). Fields are checked against one const
 * table of ops: unknown fields, missing required fields and wrong types are
 * errors that name the field in `path`. Each field's row names the slot of
 * struct gpt_ctl_request it fills (offsetof); each op's row carries the
 * flags (enum gpt_ctl_op_flag) that gptd's one dispatcher, daemon/handlers.c,
 * applies before any op runs.
 *
 * Pure: bytes in, structs out. No sockets, threads, clocks or globals other
 * than the const tables. Safe from any thread.
 */
#ifndef GPT_CTL_H
#define GPT_CTL_H

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpt_err.h"

#define GPT_CTL_LINE_MAX   (1u << 20) /* longest request line, '\n' excluded */
#define GPT_CTL_ID_MAX     64         /* longest string id */
#define GPT_CTL_PROMPT_MAX 4096       /* sample: prompt bytes */
/* The sampling temperature when none is given: gptctl sample (the daemon)
 * and gptd run --sample alike. */
#define GPT_SAMPLE_TEMPERATURE_DEFAULT 0.8
#define GPT_CTL_OUTPUT_MAX             4000 /* export: output path bytes */
#define GPT_CTL_SOCKET_DEFAULT         "/run/gptd/gptd.sock"
#define GPT_CTL_SOCKET_NAME            "gptd.sock" /* inside $RUNTIME_DIRECTORY */

/* Error codes of decode failures, as returned by gpt_ctl_request_decode and
 * named by gpt_ctl_errname(). */
#define GPT_CTL_E_TOO_LONG   (-EMSGSIZE)   /* "line_too_long" */
#define GPT_CTL_E_BAD_JSON   (-EBADMSG)    /* "bad_json": not JSON or not an object */
#define GPT_CTL_E_UNKNOWN_OP (-EOPNOTSUPP) /* "unknown_op" */
#define GPT_CTL_E_BAD_FIELD  (-EINVAL)     /* "bad_request": missing/unknown/wrong-typed */

enum gpt_ctl_op {
    GPT_CTL_OP_SUBMIT,
    GPT_CTL_OP_VALIDATE,
    GPT_CTL_OP_LIST,
    GPT_CTL_OP_STATUS,
    GPT_CTL_OP_LOGS,
    GPT_CTL_OP_CANCEL,
    GPT_CTL_OP_RESUME,
    GPT_CTL_OP_SNAPSHOTS,
    GPT_CTL_OP_SAMPLE,
    GPT_CTL_OP_NODES,
    GPT_CTL_OP_PING,
    GPT_CTL_OP_EXPORT,
    GPT_CTL_OP_SAMPLES,
    GPT_CTL_OP_COUNT
};

/* Request fields; a bit each in `present`. */
enum gpt_ctl_field {
    GPT_CTL_F_SPEC,        /* object: a job spec */
    GPT_CTL_F_JOB,         /* integer >= 1: a job id */
    GPT_CTL_F_PRIORITY,    /* integer: higher runs first */
    GPT_CTL_F_FOLLOW,      /* bool: logs streams until the job ends */
    GPT_CTL_F_SINCE,       /* integer >= 0: logs from this step on */
    GPT_CTL_F_SNAPSHOT,    /* integer >= 1: a snapshot id */
    GPT_CTL_F_PROMPT,      /* string: sample prompt */
    GPT_CTL_F_TOKENS,      /* integer >= 1 */
    GPT_CTL_F_TEMPERATURE, /* number > 0 */
    GPT_CTL_F_TOP_K,       /* integer >= 0 */
    GPT_CTL_F_OVERRIDES,   /* object: "a.b" -> value, job keys a resume changes; on a
                            * submit, the (already applied) keys that set a sweep's job
                            * apart, kept with the job */
    GPT_CTL_F_SWEEP,       /* string: a sweep id (submit tags, list filters) */
    GPT_CTL_F_FORMAT,      /* string: export: hf, llmc or gguf */
    GPT_CTL_F_OUTPUT,      /* string: export: the absolute path to write */
    GPT_CTL_F_DTYPE,       /* string: export: f32, f16 or bf16 (gguf matrices) */
    GPT_CTL_F_PROMPT_IDS,  /* string: sample prompt as token ids "15496,11" (prompt_ids.h) */
    GPT_CTL_F_RESUME_FROM, /* integer >= 1: submit continues this job's snapshot */
    GPT_CTL_F_SWEEP_JOBS,  /* integer >= 1: a sweep's first submit: the jobs it will queue */
    GPT_CTL_F_UMASK,       /* integer 0..0777: export: the client's umask for what it writes */
    GPT_CTL_F_STATE,       /* string: list: only jobs in this state */
    GPT_CTL_F_USER,        /* integer >= 0: list: only jobs this uid owns */
    GPT_CTL_F_FORGET,      /* string: nodes: the node id whose node key the coordinator drops */
    GPT_CTL_F_COUNT
};

/* A decoded request. `spec` and `prompt` borrow from `root`. Each field's
 * slot is named by its row in the field table (offsetof), so adding a field
 * is one enum value, one slot here and one table row. */
struct gpt_ctl_request {
    json_t *id;       /* owned; json null when absent */
    json_t *root;     /* owned; the whole request object, NULL if undecodable */
    int op;           /* enum gpt_ctl_op, -1 if unknown */
    uint32_t present; /* 1u << enum gpt_ctl_field for each field given */
    json_t *spec;
    json_t *overrides;
    int64_t job, priority, since, snapshot, tokens, top_k;
    int64_t resume_from; /* submit: the job whose state the new job continues */
    int64_t sweep_jobs;  /* submit with a sweep: room wanted for this many jobs */
    int64_t umask;       /* export: permission bits the client's files leave out */
    int64_t user;        /* list: the owner's uid */
    bool follow;
    double temperature;
    const char *prompt;
    const char *sweep;
    const char *format, *output, *dtype;
    const char *prompt_ids;
    const char *state;  /* list: a job state ("running", ...) */
    const char *forget; /* nodes: a node id to release (root only) */
};

/* The JSON type of a field, and so the C type of its slot in the request. */
enum gpt_ctl_type {
    GPT_CTL_T_OBJECT, /* json_t * (borrowed from root) */
    GPT_CTL_T_INT,    /* int64_t, in [min, max] */
    GPT_CTL_T_BOOL,   /* bool */
    GPT_CTL_T_NUMBER, /* double, in (min, max] and finite */
    GPT_CTL_T_STRING, /* const char * (borrowed), at most max bytes, no NUL */
};

/* One row of the field table. */
struct gpt_ctl_field_info {
    const char *name;
    int type;         /* enum gpt_ctl_type */
    int64_t min, max; /* see enum gpt_ctl_type */
    size_t offset;    /* of the slot in struct gpt_ctl_request */
};

/* What the daemon's one dispatcher (daemon/handlers.c) applies to an op before
 * its handler runs, so no handler repeats it. */
enum gpt_ctl_op_flag {
    /* On a cluster member the coordinator holds the queue of record and
     * answers this op (the member forwards it with the client's uid). */
    GPT_CTL_OPF_FORWARD = 1u << 0,
    /* Like FORWARD, but only when the request names a job (status). */
    GPT_CTL_OPF_FORWARD_JOB = 1u << 1,
    /* Changes a job: only the job's owner, or uid 0, may. */
    GPT_CTL_OPF_OWNER = 1u << 2,
    /* Replies are a stream of lines ending with {"type": "end"}. */
    GPT_CTL_OPF_STREAM = 1u << 3,
    /* Refused with -EAGAIN while gptd is stopping (it would start work). */
    GPT_CTL_OPF_NOT_STOPPING = 1u << 4,
};

/* One row of the op table. */
struct gpt_ctl_op_info {
    const char *name;
    uint32_t allowed;  /* 1u << enum gpt_ctl_field for each field it takes */
    uint32_t required; /* ... and for each it needs */
    uint32_t flags;    /* enum gpt_ctl_op_flag */
};

/* The table rows; NULL if out of range. Borrowed, static. */
const struct gpt_ctl_op_info *gpt_ctl_op_info(int op);
const struct gpt_ctl_field_info *gpt_ctl_field_info(int field);

/* Name of an op ("submit"), NULL if out of range. */
const char *gpt_ctl_op_name(int op);
/* Op of a name, -1 if unknown. */
int gpt_ctl_op_lookup(const char *name);
/* Field of a name, -1 if unknown. */
int gpt_ctl_field_lookup(const char *name);
/* True when the op's row carries every flag in `flags`. */
bool gpt_ctl_op_has(int op, uint32_t flags);

/* Decodes one line (`len` bytes, without the '\n', need not be NUL
 * terminated). Always initialises *ret (id is json null when it could not be
 * read), even on failure, so the caller can reply with the same id; release
 * it with gpt_ctl_request_done. Returns 0 or one of the GPT_CTL_E_* codes
 * (or -ENOMEM) with `err` naming the field in `path`. */
int gpt_ctl_request_decode(const char *line, size_t len, struct gpt_ctl_request *ret,
                           struct gpt_err *err);

/* Releases what decode allocated. NULL and zeroed structs are fine. */
void gpt_ctl_request_done(struct gpt_ctl_request *req);

/* Reply encoders. Each returns a new malloc'd line ending in '\n' (length in
 * *ret_len), or NULL on ENOMEM. `id` is borrowed (NULL = json null).
 * gpt_ctl_reply_ok steals `result` (an object whose keys are merged into the
 * reply; NULL for none). */
char *gpt_ctl_reply_ok(const json_t *id, json_t *result, size_t *ret_len);
/* `code` is a short name ("not_found"); `path` may be NULL or empty. */
char *gpt_ctl_reply_error(const json_t *id, const char *code, const char *message, const char *path,
                          size_t *ret_len);
/* An error reply from a return code and its detail: the code name comes
 * from gpt_ctl_errname(rc). */
char *gpt_ctl_reply_from_err(const json_t *id, int rc, const struct gpt_err *err, size_t *ret_len);

/* Stable machine names for codes, with the protocol's own names for decode
 * failures ("line_too_long", "bad_json", "unknown_op", "bad_request"), then
 * gpt_errname(). Never NULL. */
const char *gpt_ctl_errname(int rc);

/* Client side: a new request object {"id": id, "op": op}; NULL on ENOMEM. */
json_t *gpt_ctl_request_new(int op, int64_t id);
/* Serialises any object compactly as one line ending in '\n'; malloc'd. */
char *gpt_ctl_line_encode(const json_t *obj, size_t *ret_len);

/*
 * Line splitter with a bound: bytes go in as they arrive, complete lines
 * come out. A partial line longer than `max` is an error, so memory stays
 * below max + the largest single push.
 */
struct gpt_ctl_linebuf {
    char *buf;
    size_t len;     /* bytes held */
    size_t start;   /* first byte not yet returned as a line */
    size_t scanned; /* bytes after start known to hold no '\n' */
    size_t cap;
    size_t max;
};

void gpt_ctl_linebuf_init(struct gpt_ctl_linebuf *lb, size_t max);
void gpt_ctl_linebuf_done(struct gpt_ctl_linebuf *lb);
/* Appends bytes. -ENOMEM, or GPT_CTL_E_TOO_LONG when the pending partial
 * line (after removing complete lines) would exceed max. Complete lines
 * already inside are still returned by _next before the error matters to
 * the caller: call _next until it returns 0 first. */
int gpt_ctl_linebuf_push(struct gpt_ctl_linebuf *lb, const char *data, size_t n);
/* Returns 1 and a borrowed line (without '\n', valid until the next push)
 * when a complete line is available, 0 when not, or GPT_CTL_E_TOO_LONG
 * when a complete line is longer than max. */
int gpt_ctl_linebuf_next(struct gpt_ctl_linebuf *lb, const char **ret_line, size_t *ret_len);
/* Bytes of the pending partial line. */
size_t gpt_ctl_linebuf_pending(const struct gpt_ctl_linebuf *lb);

#endif
