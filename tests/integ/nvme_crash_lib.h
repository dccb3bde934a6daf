/*
 * nvme_crash_lib.h - what the NVMe crash tests (nvme_crash.c: the file-per-object publish;
 * nvme_log_crash.c: the small-object log; nvme_pool_crash.c: preallocated slots) share: the
 * self-checking objects their children write, the acknowledgement each child reports
 * through a pipe, the kill (at a random moment, or shortly after a given write was
 * acknowledged), and the parent's check after reopening - every listed object whole and
 * exact, every acknowledged write present. Why a header: all of them must hold the tier to
 * the same rule, and a fix to the check must reach all. Include after nvme_util.h.
 */
#ifndef KVT_NVME_CRASH_LIB_H
#define KVT_NVME_CRASH_LIB_H

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>

#include "nvme_util.h"

#define MAX_OBJ ((5u << 20) + 4096)
#define LARGE_OBJ (4u << 20) /* above: a new file is fallocated before its pieces are written */

static const char *fsync_modes[] = {"none", "data", "full"};

/* Up to 512 KiB; one object in 16 is 4-5 MiB, more than two 2 MiB pieces, so the kill also
 * lands in that write path (create, fallocate, pieces). */
static inline uint64_t obj_len(uint64_t i)
{
	uint64_t h = mix64(i ^ 0xabcdef);
	if (h % 16 == 0)
		return LARGE_OBJ + 4096 * (1 + (h >> 8) % 256);
	return 4096 * (1 + h % ((512u << 10) / 4096));
}

struct slot {
	uint64_t id;
	int ack_fd;
	struct batch *b;
};

/* Runs on the tier's thread: report the acknowledged id to the parent, then count. */
static inline void child_cb(void *arg, int64_t res)
{
	struct slot *sl = arg;
	if (res == 0 && write(sl->ack_fd, &sl->id, sizeof(sl->id)) != sizeof(sl->id))
		_exit(5);
	batch_cb(sl->b, res);
}

/* Polls done(arg) every millisecond until it is true (then 1) or max_us passed (0): for a
 * kill meant to land after progress the child shows on disk or in a side file. */
static inline int crash_wait_until(bool (*done)(void *arg), void *arg, uint64_t max_us)
{
	uint64_t end = kvt__now_ns() + max_us * 1000;
	while (kvt__now_ns() < end) {
		if (done(arg))
			return 1;
		usleep(1000);
	}
	return 0;
}

/* Reads the ids the child writing into ack_rd reports acknowledged into acked (*got: the
 * bytes read so far, which crash_kill_from keeps), until one satisfies want (NULL: any
 * id), the child closes the pipe (it exited: crash_kill_from says so) or max_us passed.
 * 1 when one satisfied want. Why: a kill meant to land after some write completed must
 * wait for it, not for a time that a slow or loaded machine may not have written it in. */
static inline int crash_wait_ack(int ack_rd, uint64_t *acked, size_t cap, size_t *got,
				 bool (*want)(uint64_t id), uint64_t max_us)
{
	uint64_t end = kvt__now_ns() + max_us * 1000;
	for (;;) {
		uint64_t now = kvt__now_ns();
		if (now >= end || *got == cap * sizeof(*acked))
			return 0;
		struct pollfd pfd = {.fd = ack_rd, .events = POLLIN};
		if (poll(&pfd, 1, (int)((end - now + 999999) / 1000000)) <= 0)
			continue; /* timed out (checked above) or interrupted */
		size_t old = *got;
		ssize_t r = read(ack_rd, (char *)acked + old, cap * sizeof(*acked) - old);
		if (r <= 0)
			return 0;
		*got += (size_t)r;
		for (size_t i = old / sizeof(*acked); i < *got / sizeof(*acked); i++)
			if (!want || want(acked[i]))
				return 1;
	}
}

/* After delay_us, SIGKILL the child writing into the pipe whose read end is ack_rd, and
 * collect the ids it saw acknowledged after the got bytes of them already read
 * (crash_wait_ack; closes ack_rd). The count of all, or -1 if the child had exited on its
 * own (it never does while healthy: a failed check in it). */
static inline int crash_kill_from(pid_t pid, int ack_rd, useconds_t delay_us, uint64_t *acked,
				  size_t cap, size_t got)
{
	usleep(delay_us);
	CHECK_EQ(kill(pid, SIGKILL), 0);
	int status;
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	if (!WIFSIGNALED(status)) {
		fprintf(stderr, "child exited early: status %d\n", WEXITSTATUS(status));
		return -1;
	}
	ssize_t r;
	while ((r = read(ack_rd, (char *)acked + got, cap * sizeof(*acked) - got)) > 0)
		got += (size_t)r;
	close(ack_rd);
	return (int)(got / sizeof(uint64_t));
}

/* crash_kill_from with nothing read before: a kill at a random moment. */
static inline int crash_kill(pid_t pid, int ack_rd, useconds_t delay_us, uint64_t *acked,
			     size_t cap)
{
	return crash_kill_from(pid, ack_rd, delay_us, acked, cap, 0);
}

/* The reopened tier: every object it lists reads back whole and exact, and (check_acked)
 * every acknowledged id of this iteration is there. Fills c with the listing; adds what it
 * listed to *listed_bytes and its large objects to *large. 0, or 1 after saying what failed. */
static inline int crash_verify(struct kvt_tier *t, int iter, struct collect *c, uint8_t *rbuf,
			       const uint64_t *acked, int n_acked, bool check_acked,
			       uint64_t *listed_bytes, long *large)
{
	c->n = 0;
	CHECK_EQ(t->ops->scan(t, collect_fn, c), 0);
	for (int i = 0; i < c->n; i++) {
		CHECK(c->bytes[i] <= MAX_OBJ);
		*listed_bytes += c->bytes[i];
		*large += c->bytes[i] > LARGE_OBJ;
		int rc = t_read1(t, &c->keys[i], rbuf, 0, c->bytes[i]);
		if (rc != (int)c->bytes[i] || check_object(rbuf, c->bytes[i], &c->keys[i])) {
			fprintf(stderr, "iteration %d: object %d of %d is torn (rc %d)\n", iter, i,
				c->n, rc);
			return 1;
		}
	}
	for (int i = 0; i < n_acked && check_acked; i++) {
		struct kvt_key k = make_key(77, acked[i]);
		int rc = t_read1(t, &k, rbuf, 0, obj_len(acked[i]));
		if (rc != (int)obj_len(acked[i]) || check_object(rbuf, obj_len(acked[i]), &k)) {
			fprintf(stderr, "iteration %d: acknowledged object %d lost (rc %d)\n", iter,
				i, rc);
			return 1;
		}
	}
	return 0;
}

#endif
