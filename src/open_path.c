/*
 * open_path.c - open a file a user named without blocking on a FIFO or a device, and refuse
 * what is not a file by its kind (src/open_path.h): a FIFO with no writer held
 * `kvtier replay --trace` in open() for ever.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "open_path.h"

static const char *kind(mode_t m, bool allow_chr)
{
	if (S_ISREG(m) || (allow_chr && S_ISCHR(m)))
		return NULL;
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISSOCK(m))
		return "a socket";
	if (S_ISBLK(m))
		return "a block device";
	return S_ISCHR(m) ? "a character device" : "not a regular file";
}

const char *kvt__path_unfit(const char *path, bool allow_chr)
{
	struct stat st;
	return stat(path, &st) < 0 ? NULL : kind(st.st_mode, allow_chr);
}

int kvt__open_path(const char *path, int flags, mode_t mode, bool allow_chr, const char **what)
{
	*what = NULL;
	int fd = open(path, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, mode);
	if (fd < 0) {
		int e = errno;
		/* a FIFO opened for writing with no reader: ENXIO; name it by its kind */
		if (e == ENXIO && (*what = kvt__path_unfit(path, allow_chr)))
			return -EINVAL;
		return -e;
	}
	struct stat st;
	int fl;
	if (fstat(fd, &st) < 0 || (fl = fcntl(fd, F_GETFL)) < 0 ||
	    (!(*what = kind(st.st_mode, allow_chr)) && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)) {
		int e = errno;
		close(fd);
		return -e;
	}
	if (*what) {
		close(fd);
		return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	}
	return fd;
}
