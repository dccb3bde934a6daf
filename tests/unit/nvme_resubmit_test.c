/*
 * nvme_resubmit_test.c - the rest of a short read waits for room in a full submission queue
 * (src/tier_nvme_ops.c, resubmit; the ring loop issues it: nv_io_resume). A real io_uring
 * and a real file: the object's file holds half its bytes when the read is issued (the
 * kernel's read stops short at its end), the rest lands before the completion is handled,
 * and the ring's SQ is full of unsubmitted NOPs then - as the background closes of removed
 * objects' cached fds can fill it (tier_nvme_fdc.c). Until 2026-12-06 the read failed with
 * -EIO; now it waits until submissions make room, reads the rest, and returns every byte.
 * Why a unit test: the tier's ring submits its SQEs on every turn of its loop, so a full SQ
 * at the moment a short I/O completes cannot be forced from outside it.
 * kvt-test-labels: onethread (no second thread, so nothing for TSan to check: scripts/test.sh
 * leaves it out of the TSan pass)
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tier_nvme_internal.h"

#define LEN 8192

static int64_t got;
static int calls;

static void done_cb(void *arg, int64_t res)
{
	(void)arg;
	got = res;
	calls++;
}

/* The next CQE (waiting for it), handed back. */
static int next_cqe(struct io_uring *ring, void **data)
{
	struct io_uring_cqe *cqe;
	assert_int_equal(io_uring_wait_cqe(ring, &cqe), 0);
	int res = cqe->res;
	*data = io_uring_cqe_get_data(cqe);
	io_uring_cqe_seen(ring, cqe);
	return res;
}

static void test_short_read_waits_for_an_sqe(void **state)
{
	(void)state;
	char path[] = "/tmp/kvt-resubmit-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	uint8_t *want = malloc(LEN), *buf = calloc(1, LEN);
	assert_non_null(want);
	assert_non_null(buf);
	for (int i = 0; i < LEN; i++)
		want[i] = (uint8_t)(i * 7 + 3);
	assert_int_equal(pwrite(fd, want, LEN / 2, 0), LEN / 2); /* half the object so far */

	struct nv *s = calloc(1, sizeof(*s));
	struct nv_op *op = calloc(1, sizeof(*op));
	struct nv_io *io = calloc(1, sizeof(*io));
	struct nv_ent ent;
	memset(&ent, 0, sizeof(ent));
	assert_non_null(s);
	assert_non_null(op);
	assert_non_null(io);
	assert_int_equal(io_uring_queue_init(4, &s->ring, 0), 0);
	s->open_files = 8;
	s->active = 1;
	/* a read of the whole object (one piece, issued) through a cached fd */
	struct nv_fdc c = {.fd = fd, .refs = 1, .ent = &ent};
	op->type = OP_READ;
	op->stage = ST_R_DATA;
	op->segs = op->seg_inline;
	op->seg_inline[0] = (struct kvt_seg){0, LEN, buf};
	op->nsegs = 1;
	op->soff = LEN;
	op->size = LEN;
	op->fdc = &c;
	op->cb = done_cb;
	op->pending = 1;
	io->op = op;
	io->kind = IO_READ;
	io->len = LEN;
	io->buf = buf;

	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
	assert_non_null(sqe);
	io_uring_prep_read(sqe, fd, buf, LEN, 0);
	io_uring_sqe_set_data(sqe, io);
	assert_int_equal(io_uring_submit(&s->ring), 1);
	void *data;
	int res = next_cqe(&s->ring, &data);
	assert_ptr_equal(data, io);
	assert_int_equal(res, LEN / 2); /* short: the file ended there */

	/* The rest lands; the SQ is full when the short completion is handled. */
	assert_int_equal(pwrite(fd, want + LEN / 2, LEN / 2, LEN / 2), LEN / 2);
	int nops = 0;
	while ((sqe = io_uring_get_sqe(&s->ring))) {
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data(sqe, NULL);
		nops++;
	}
	assert_true(nops > 0);
	nv_on_cqe(s, io, res);
	printf("a short read's rest with the SQ full: %s (%lld)\n",
	       calls ? "the read ended" : "waits", (long long)got);
	assert_int_equal(calls, 0); /* not failed: waiting for an SQE */
	assert_int_equal(op->pending, 1);

	/* The ring loop's next turn: the SQ was submitted, and the rest goes in. */
	assert_int_equal(io_uring_submit(&s->ring), nops);
	for (int i = 0; i < nops; i++) {
		next_cqe(&s->ring, &data);
		assert_null(data);
	}
	nv_io_resume(s);
	assert_int_equal(io_uring_submit(&s->ring), 1);
	res = next_cqe(&s->ring, &data);
	assert_ptr_equal(data, io);
	nv_on_cqe(s, io, res);
	assert_int_equal(calls, 1);
	assert_int_equal(got, LEN);
	assert_memory_equal(buf, want, LEN);
	assert_int_equal(c.refs, 0); /* the read let its cached fd go */

	io_uring_queue_exit(&s->ring);
	close(fd);
	free(io);
	free(op);
	free(s);
	free(buf);
	free(want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_short_read_waits_for_an_sqe),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
