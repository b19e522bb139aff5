/*
 * hostport: HOST:PORT parsing (see hostport.h). No state.
 */
#include "hostport.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int hostport_parse(const char *s, int port_min, const char *what, char *host, size_t cap,
                   int *ret_port, struct gpt_err *err)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s || (size_t)(colon - s) >= cap)
        return gpt_err_set(err, -EINVAL, what, "expected HOST:PORT, got \"%s\"", s);
    char *end = NULL;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end || errno || port < port_min || port > 65535)
        return gpt_err_set(err, -EINVAL, what,
                           "expected HOST:PORT with a port from %d to 65535, got \"%s\"", port_min,
                           s);
    const char *h = s;
    size_t n = (size_t)(colon - s);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n == 0)
        return gpt_err_set(err, -EINVAL, what, "expected HOST:PORT, got \"%s\"", s);
    memcpy(host, h, n);
    host[n] = '\0';
    *ret_port = (int)port;
    return 0;
}
