/*
 * http_web: the dashboard's files (daemon/web/), embedded in gptd at build
 * time by cmake/embed_web.cmake, which generates the table below; nothing
 * is read from disk at run time, so the page works offline and cannot be
 * swapped. Read-only constant data; any thread.
 */
#ifndef GPTD_HTTP_WEB_H
#define GPTD_HTTP_WEB_H

#include <stddef.h>

struct http_web_asset {
    const char *path; /* URL path: "/" for index.html, "/app.js", ... */
    const char *type; /* Content-Type */
    const unsigned char *data;
    size_t len;
};

extern const struct http_web_asset http_web_assets[];
extern const size_t http_web_assets_n;

/* The asset served at `url`, or NULL. */
const struct http_web_asset *http_web_find(const char *url);

#endif
