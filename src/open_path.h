/*
 * open_path.h - opening a file a user named (a trace to read, a trace or profile to write,
 * a plot) without waiting on it. open(2) of a FIFO blocks until the other end is opened,
 * for ever if nobody does; O_NONBLOCK makes it return at once, and what is not a regular
 * file (or, where the caller allows it, a character device such as /dev/null) is refused
 * by its kind before any byte moves. A pipe is read through stdin ("-"), never by name.
 */
#ifndef KVT_OPEN_PATH_H
#define KVT_OPEN_PATH_H

#include <stdbool.h>
#include <sys/types.h>

/* open(path, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, mode), then blocking again.
 * Returns the descriptor, or -errno: -EISDIR for a directory, -EINVAL for a FIFO, a
 * socket, a block device or (unless allow_chr) a character device, with *what saying
 * which ("a FIFO", ...); otherwise *what is NULL and -errno is open's. */
int kvt__open_path(const char *path, int flags, mode_t mode, bool allow_chr, const char **what);

/* What kvt__open_path() would refuse path for ("a directory", "a FIFO", ...), or NULL when
 * it is a regular file, an allowed character device, or does not exist (yet): for a path
 * another program opens (gnuplot's output). */
const char *kvt__path_unfit(const char *path, bool allow_chr);

#endif
