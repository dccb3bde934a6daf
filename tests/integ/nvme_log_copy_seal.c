/*
 * nvme_log_copy_seal.c - a batch of re-appended objects (tier_nvme_log_reinsert.c, copy_ready)
 * is never left unsealed. It holds the segment its objects come from (nv_seg.movers: not
 * reused until the batch is acknowledged), and it is sized to fit the tail of the current
 * segment. Until 2026-12-05, when its seal found no SQE (the SQ full and io_uring_enter
 * refusing to take it, as the kernel does when it cannot allocate requests) it stayed the
 * filling batch, to be sealed on a later turn. A batch write of the current segment failing
 * meanwhile gives that segment up (ack: the append point moves to its end), so the copies no
 * longer fitted: sealing them needed nv_log_advance into the next segment - the one they held.
 * Every put from then on waited, and close and flush with them, forever.
 *
 * The test drives the ring thread into that state for real, from inside the ring thread:
 * io_uring_submit and io_uring_submit_and_wait are interposed (the library's calls bind to
 * this file's; the real ones are liburing's, dlsym RTLD_NEXT), and the hook, called at the
 * end of every ring turn, sees the tier's state and the ring's unsubmitted SQEs without a
 * race. With the log's reinsertion of segment 0 about to run it
 *   1. holds the copy read's SQE back (a no-op goes in its place), and then the next put's
 *      batch write B0 (its put waits for it);
 *   2. lets the read go and waits for its completion, fills the SQ with no-ops that post no
 *      completion, and makes io_uring_submit fail (-EAGAIN) without submitting: on the next
 *      turn the copy of the read objects finds no SQE;
 *   3. after that turn, puts B0 back as a write on a bad fd (it fails, -EBADF: the current
 *      segment is given up) and lets everything through.
 * Then puts, a flush and close must complete (a watchdog turns a hang into a failure).
 * White-box: it reads the log's state (tier_nvme_log.h), on the ring thread only. Needs
 * IOSQE_CQE_SKIP_SUCCESS (Linux 5.17).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>

#include "nvme_util.h"
#include "tier_nvme_log.h"

#define OBJ (64u * 1024)
#define KEEP 4	/* objects written once into segment 0: its live ones at reuse */
#define WSET 32 /* live objects of the rest: removed after WSET more, so none is evicted */

enum { P_OFF, P_ARMED, P_READ, P_B0, P_FULL, P_DONE };
enum { SEEN_NONE, SEEN_STUCK, SEEN_DEFERRED };

static struct nv *_Atomic g_s; /* set once the tier is open: read by the ring thread */
static _Atomic int phase = P_OFF;
static int held; /* io_uring_submit fails without submitting (ring thread only) */
static _Atomic int seen = SEEN_NONE;
static struct io_uring_sqe rd_sqe, b0_sqe; /* the SQEs held back */

static int (*real_submit)(struct io_uring *);
static int (*real_submit_wait)(struct io_uring *, unsigned);

static void resolve(void)
{
	if (!real_submit) {
		real_submit = (int (*)(struct io_uring *))dlsym(RTLD_NEXT, "io_uring_submit");
		real_submit_wait = (int (*)(struct io_uring *, unsigned))dlsym(
		    RTLD_NEXT, "io_uring_submit_and_wait");
		if (!real_submit || !real_submit_wait) {
			fprintf(stderr, "nvme_log_copy_seal: liburing's submit not found\n");
			_exit(1);
		}
	}
}

/* A no-op that posts no completion (it cannot fail); tagged as the wake read's, which the
 * ring thread would take harmlessly for one if a completion came anyway. */
static void filler(struct io_uring_sqe *sqe)
{
	io_uring_prep_nop(sqe);
	sqe->flags = IOSQE_CQE_SKIP_SUCCESS;
	io_uring_sqe_set_data(sqe, &g_s->wake);
}

static bool is_filler(const struct io_uring_sqe *sqe)
{
	return sqe->opcode == IORING_OP_NOP && sqe->user_data == (uint64_t)(uintptr_t)&g_s->wake;
}

/* The SQEs not yet taken by the kernel, i-th of n. */
static struct io_uring_sqe *pending(struct io_uring *ring, unsigned i)
{
	return &ring->sq.sqes[(*ring->sq.khead + i) & ring->sq.ring_mask];
}

static unsigned npending(struct io_uring *ring)
{
	return ring->sq.sqe_tail - *ring->sq.khead;
}

/* The log batch whose write sqe is, or NULL. */
static struct nv_batch *batch_of(const struct io_uring_sqe *sqe)
{
	for (int i = 0; i < NV_LOG_BUFS; i++)
		if (sqe->opcode == IORING_OP_WRITEV &&
		    sqe->user_data == (uint64_t)(uintptr_t)&g_s->lg->b[i].io)
			return &g_s->lg->b[i];
	return NULL;
}

/* Steps 1: hold back the copy read, then a batch write of the current segment. */
static void scan(struct io_uring *ring)
{
	struct nv_log *lg = g_s->lg;
	for (unsigned i = 0; i < npending(ring); i++) {
		struct io_uring_sqe *sqe = pending(ring, i);
		int p = atomic_load(&phase);
		if (p == P_ARMED && sqe->user_data == (uint64_t)(uintptr_t)&lg->rd_io) {
			rd_sqe = *sqe;
			filler(sqe);
			atomic_store(&phase, P_READ);
		} else if (p == P_READ && batch_of(sqe) && batch_of(sqe)->seg == lg->cur) {
			b0_sqe = *sqe;
			filler(sqe);
			atomic_store(&phase, P_B0);
		}
	}
}

static bool cq_holds(struct io_uring *ring, const void *data, unsigned *n)
{
	unsigned head = *ring->cq.khead, tail = io_uring_smp_load_acquire(ring->cq.ktail);
	bool found = false;
	for (unsigned i = head; i != tail; i++) {
		const struct io_uring_cqe *c = &ring->cq.cqes[i & ring->cq.ring_mask];
		if (c->user_data == (uint64_t)(uintptr_t)data) {
			found = true;
			if (n)
				++*n;
		}
	}
	return found;
}

int io_uring_submit(struct io_uring *ring)
{
	resolve();
	if (g_s && ring == &g_s->ring && atomic_load(&phase) != P_OFF) {
		if (held) /* the SQEs stay: the caller's next io_uring_get_sqe fails */
			return -EAGAIN;
		scan(ring);
	}
	return real_submit(ring);
}

/* The end of a ring turn (tier_nvme_ring.c nv_ring_main). */
int io_uring_submit_and_wait(struct io_uring *ring, unsigned wait_nr)
{
	resolve();
	if (!g_s || ring != &g_s->ring || atomic_load(&phase) == P_OFF ||
	    atomic_load(&phase) == P_DONE)
		return real_submit_wait(ring, wait_nr);
	struct nv_log *lg = g_s->lg;
	if (atomic_load(&phase) == P_FULL) {
		/* Step 3: this turn ran the copy of the read objects, with no SQE to be had. */
		struct nv_batch *fb = nv_log_filling(lg);
		if (fb && fb->nmv)
			atomic_store(&seen, SEEN_STUCK); /* made, and left unsealed */
		else if (lg->rd_state == NV_RD_READY)
			atomic_store(&seen, SEEN_DEFERRED); /* not made: the read waits */
		bool put = false;
		for (unsigned i = 0; i < npending(ring) && !put; i++) {
			struct io_uring_sqe *sqe = pending(ring, i);
			if ((put = is_filler(sqe))) {
				*sqe = b0_sqe;
				sqe->fd = -1; /* fails: -EBADF */
			}
		}
		if (!put) {
			fprintf(stderr, "nvme_log_copy_seal: no room to put the held write back\n");
			_exit(1);
		}
		held = 0;
		atomic_store(&phase, P_DONE);
		return real_submit_wait(ring, wait_nr);
	}
	scan(ring);
	if (atomic_load(&phase) != P_B0)
		return real_submit_wait(ring, wait_nr);
	/* Step 2: the read goes, and completes before this turn's completions are reaped. */
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	if (!sqe) {
		fprintf(stderr, "nvme_log_copy_seal: no SQE for the read\n");
		_exit(1);
	}
	*sqe = rd_sqe;
	int rc = real_submit_wait(ring, wait_nr);
	for (int tries = 0; !cq_holds(ring, &lg->rd_io, NULL); tries++) {
		if (tries > 10000) {
			fprintf(stderr, "nvme_log_copy_seal: the copy read never completed\n");
			_exit(1);
		}
		real_submit_wait(ring, io_uring_cq_ready(ring) + 1);
	}
	/* The SQ full, but for the wake read that the completions reaped now may re-arm. */
	unsigned wakes = 0;
	cq_holds(ring, &g_s->wake, &wakes);
	unsigned leave = wakes + (g_s->wake_armed ? 0 : 1);
	while (io_uring_sq_space_left(ring) > leave)
		filler(io_uring_get_sqe(ring));
	held = 1;
	atomic_store(&phase, P_FULL);
	return rc;
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "nvme_log_copy_seal: FAIL: the log hung (a copy batch that "
				  "cannot be sealed holds the segment it needs next)\n";
	ssize_t r = write(2, msg, sizeof(msg) - 1);
	(void)r;
	_exit(1);
}

/* The segment being appended to; the ring thread is idle (every put answered). */
static uint32_t current_seg(struct nv *s)
{
	pthread_mutex_lock(&s->qlock);
	uint32_t cur = s->lg->have_cur ? s->lg->cur : 0;
	pthread_mutex_unlock(&s->qlock);
	return cur;
}

static struct kvt_key wkey(uint64_t i)
{
	return make_key(2, i);
}

int main(void)
{
	const char *base = getenv("KVT_TEST_DIR");
	char root[512];
	snprintf(root, sizeof(root), "%s/kvt-nvme-log-copy-seal-XXXXXX",
		 base && *base ? base : "/tmp");
	if (base && *base)
		mkdir(base, 0755);
	CHECK(mkdtemp(root));
	signal(SIGALRM, on_alarm);
	resolve();
	/* 3 segments of 16 MiB; reinsertion lists up to 1.6 MiB of the segment reused next,
	 * once the current one has 9.6 MiB left (10 % + 4 batches of 2 MiB). */
	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", root, "nvme.bytes", "48MiB", "nvme.log_max", "256KiB",
			   "nvme.segment_bytes", "16MiB", "nvme.log_spare_pct", "0",
			   "nvme.log_reinsert_pct", "10", "nvme.fsync", "none", NULL),
		 0);
	struct nv *s = t->state;
	CHECK(s->lg && s->lg->log_max && s->lg->nmax == 3);
	if (!(s->ring.features & IORING_FEAT_CQE_SKIP)) {
		printf("nvme_log_copy_seal: skip: no IOSQE_CQE_SKIP_SUCCESS (Linux < 5.17)\n");
		kvt__tier_close(t);
		rm_rf(root);
		return 77;
	}
	g_s = s;
	uint8_t *b = abuf(OBJ), *rb = abuf(OBJ);
	struct kvt_key keep[KEEP];
	for (int i = 0; i < KEEP; i++) {
		keep[i] = make_key(1, (uint64_t)i);
		fill_object(b, OBJ, &keep[i]);
		CHECK_EQ(t_write(t, &keep[i], b, OBJ), 0);
	}
	/* Segments 0 and 1 filled, into segment 2 (the first lap: no reinsertion before, the
	 * segment after the current one did not exist); each object removed WSET puts later,
	 * so that segment 0 holds only the KEEP live and the puts below evict none (an
	 * eviction queues a tombstone, and a failed batch carrying one stops the log). */
	uint64_t n = 0;
	while (current_seg(s) < 2) {
		CHECK(n < 100000);
		struct batch bt = BATCH_INIT;
		for (int j = 0; j < 16; j++, n++) {
			struct kvt_key k = wkey(n);
			fill_object(b, OBJ, &k);
			batch_add(&bt);
			CHECK_EQ(t->ops->write(t, &k, b, OBJ, batch_cb, &bt), 0);
			batch_wait(&bt, 0); /* the buffer is the caller's until acknowledged */
			if (n >= WSET) {
				struct kvt_key old = wkey(n - WSET);
				CHECK_EQ(t_remove(t, &old), 0);
			}
		}
		CHECK_EQ(bt.failed, 0);
	}
	CHECK_EQ(t_flush(t), 0); /* the removals' tombstones written */
	pthread_mutex_lock(&s->qlock);
	CHECK(s->lg->reins_seg == UINT32_MAX && !s->lg->ntombs); /* not yet; none queued */
	pthread_mutex_unlock(&s->qlock);
	struct kvt_tier_stats st0 = {0};
	t->ops->stats(t, &st0);
	CHECK_EQ(st0.evictions, 0);

	/* One put at a time until the one held back fails. */
	alarm(60);
	atomic_store(&phase, P_ARMED);
	int rc = 0;
	for (int j = 0; j < 2000 && rc == 0; j++, n++) {
		struct kvt_key k = wkey(n);
		fill_object(b, OBJ, &k);
		rc = t_write(t, &k, b, OBJ);
	}
	printf("nvme_log_copy_seal: the held write: %d, the copy: %s\n", rc,
	       atomic_load(&seen) == SEEN_STUCK	     ? "made, left unsealed"
	       : atomic_load(&seen) == SEEN_DEFERRED ? "deferred (no SQE)"
						     : "not reached");
	fflush(stdout);
	CHECKM(atomic_load(&phase) == P_DONE && atomic_load(&seen) != SEEN_NONE,
	       "the copy never ran into a full SQ (phase %d)", atomic_load(&phase));
	CHECK_EQ(rc, -EBADF);
	alarm(30); /* a hang from here: the bug */

	/* The log goes on: into segment 0 (its copies dropped with the segment given up). */
	for (int j = 0; j < 64; j++, n++) {
		struct kvt_key k = wkey(n);
		fill_object(b, OBJ, &k);
		CHECK_EQ(t_write(t, &k, b, OBJ), 0);
	}
	CHECK_EQ(t_flush(t), 0);
	CHECK_EQ(current_seg(s), 0);
	for (uint64_t i = n - WSET; i < n; i++) {
		struct kvt_key k = wkey(i);
		memset(rb, 0, OBJ);
		CHECK_EQ(t_read1(t, &k, rb, 0, OBJ), (int)OBJ);
		CHECK_EQ(check_object(rb, OBJ, &k), 0);
	}
	kvt__tier_close(t);
	alarm(0);
	rm_rf(root);
	free(b);
	free(rb);
	printf("nvme_log_copy_seal: ok\n");
	return 0;
}
