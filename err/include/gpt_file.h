/*
 * gpt_file: read a whole small file (a vocabulary, a config.json) from a
 * descriptor the caller opened, with the checks every such read needs: a
 * regular file, at most a given size, no short read. Pure of policy: the
 * caller opens (openat, O_NONBLOCK against FIFOs) and names the file.
 */
#ifndef GPT_FILE_H
#define GPT_FILE_H

#include <stddef.h>

#include "gpt_err.h"

/* Reads all of fd (left open: the caller closes it) into a new
 * NUL-terminated buffer, *ret (free()), of *ret_len bytes. `name` names
 * the file in errors and `key` is the job key they carry (NULL for none).
 * -EINVAL when fd is not a regular file, -GPT_E_LIMIT when it holds more
 * than `max` bytes, -EIO when it shrank while read, -errno on a failed
 * read, -ENOMEM. */
int gpt_file_read_fd(int fd, const char *name, size_t max, const char *key, char **ret,
                     size_t *ret_len, struct gpt_err *err);

#endif
