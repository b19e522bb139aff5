/* gpt_file: a whole small file from an open descriptor (gpt_file.h). */
#include "gpt_file.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int gpt_file_read_fd(int fd, const char *name, size_t max, const char *key, char **ret,
                     size_t *ret_len, struct gpt_err *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return gpt_err_set(err, -errno, key, "%s: %s", name, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return gpt_err_set(err, -EINVAL, key, "%s is not a regular file", name);
    if ((uint64_t)st.st_size > max)
        return gpt_err_set(err, -GPT_E_LIMIT, key, "%s: %lld bytes, larger than %zu", name,
                           (long long)st.st_size, max);
    size_t len = (size_t)st.st_size, got = 0;
    char *buf = malloc(len + 1);
    if (!buf)
        return gpt_err_set(err, -ENOMEM, key, "out of memory for %s", name);
    while (got < len) {
        ssize_t k = read(fd, buf + got, len - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            int rc = gpt_err_set(err, k < 0 ? -errno : -EIO, key, "%s: %s", name,
                                 k < 0 ? strerror(errno) : "shrank while read");
            free(buf);
            return rc;
        }
        got += (size_t)k;
    }
    buf[len] = '\0';
    *ret = buf;
    *ret_len = len;
    return 0;
}
