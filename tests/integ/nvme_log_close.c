/*
 * nvme_log_close.c - closing the nvme tier while the log's reinsertion is idle with objects
 * still listed must not hang. When the append point nears the segment reused next, that
 * segment's live objects are listed for re-appending (tier_nvme_log_reinsert.c); until the
 * list is worked off, the current segment's tail is kept for the copies (puts wait) and the
 * listed segment is not reused. A reinsertion read that fails (here: the segment file was
 * truncated behind the tier's back, so reads of it come back short) leaves the reinsertion
 * idle with the rest of the list, and the next turn reads on - unless close came first:
 * closing, no read is issued, and the puts close waits for waited forever on the room kept.
 * The test drives the ring thread into that state for real (reads failing, puts waiting on
 * the kept tail), stopping it between two of its turns by holding the tier's queue lock,
 * which it takes at the start of each turn and before its reinsertion step; there it sets
 * closing (as nv_close does, under that lock) and closes under a watchdog: close returns
 * and every put is answered. White-box (tier_nvme_log.h): it reads the log's state under
 * that lock. Catching the ring thread in that state is a race the test usually wins: it
 * tries again on a new store, up to ATTEMPTS times.
 */
#include <signal.h>

#include "nvme_util.h"
#include "tier_nvme_log.h"

#define OBJ 4096u /* one block: a read covers 72 of them, so the 24 MiB list is 86 reads */
#define ATTEMPTS 10
enum { N = 10000 }; /* the burst: fills segment 3, goes into 4, evicts none of the listed */

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "nvme_log_close: FAIL: close hung (reinsertion list kept)\n";
	ssize_t r = write(2, msg, sizeof(msg) - 1);
	(void)r;
	_exit(1);
}

/* The ring thread's state, read while it may be mid-turn (it writes some of it outside
 * qlock): a wrong reading can only make the test close sooner than it meant to, which must
 * not hang either. Not instrumented by TSan, which would report those reads as races. */
#if defined(__SANITIZE_THREAD__)
#define PEEK __attribute__((no_sanitize("thread")))
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PEEK __attribute__((no_sanitize("thread")))
#endif
#endif
#ifndef PEEK
#define PEEK
#endif

/* The current segment's tail kept for the listed copies, as nv_log_copy_room computes it. */
PEEK static uint64_t kept(const struct nv_log *lg)
{
	if (!lg->reins_left || (lg->rd_state == NV_RD_IDLE && lg->rq_head >= lg->rq_n))
		return 0;
	return lg->reins_left + (uint64_t)(lg->rq_n - lg->rq_head + 1) * NV_LOG_BLOCK;
}

/* Objects of segment 0 still listed after a failed read (idle, or reading the next ones:
 * none is ever read whole, so that read fails too), and the oldest waiting put blocked by
 * the tail kept for them; qlock held. */
PEEK static bool stopped_listed(struct nv_log *lg)
{
	struct nv_batch *fb = NULL; /* nv_log_filling, inline: not instrumented either */
	if (lg->count) {
		struct nv_batch *last = &lg->b[(lg->head + lg->count - 1) % NV_LOG_BUFS];
		fb = last->state == NV_B_FILL ? last : NULL;
	}
	return lg->reins_seg == 0 && lg->rd_state != NV_RD_READY && lg->rq_head > 0 &&
	       lg->rq_head < lg->rq_n && lg->wait_head && lg->have_cur &&
	       lg->cur_off + (fb ? fb->used : NV_LOG_BLOCK) + OBJ + kept(lg) >
		   lg->segs[lg->cur].bytes;
}

/* The segment being appended to (qlock held). */
PEEK static uint32_t current_seg(const struct nv_log *lg)
{
	return lg->have_cur ? lg->cur : 0;
}

/* Segment 0's list worked off (qlock held). */
PEEK static bool list_over(const struct nv_log *lg)
{
	return lg->reins_seg == 0 && lg->rq_n && lg->rq_head >= lg->rq_n;
}

/* One store in dir: true when the ring thread was caught in that state, closing set. */
static bool attempt(const char *dir, struct kvt_tier **tp, struct batch *bt, uint8_t *b)
{
	/* 5 segments of 32 MiB; reinsertion lists up to 24 MiB of the segment reused next: of
	 * 4 KiB objects, whose kept tail (their bytes and a record block each) is 48 MiB, more
	 * than a segment - puts wait from the moment they are listed. */
	struct kvt_tier *t;
	CHECK_EQ(open_tier(&t, "nvme.dirs", dir, "nvme.bytes", "160MiB", "nvme.log_max", "256KiB",
			   "nvme.segment_bytes", "32MiB", "nvme.log_spare_pct", "0",
			   "nvme.log_reinsert_pct", "75", "nvme.fsync", "none", NULL),
		 0);
	*tp = t;
	struct nv *s = t->state;
	CHECK(s->lg && s->lg->log_max);
	/* Segments 0 .. 2 filled (the first cycle: no reinsertion, the segment after the
	 * current one does not exist yet); segment 0's first 6144 objects read, so that the
	 * index's LRU keeps them (96 MiB live) while segments 3 and 4 are written. */
	struct batch setup = BATCH_INIT;
	uint64_t i = 0;
	bool touched = false;
	for (;;) {
		pthread_mutex_lock(&s->qlock);
		uint32_t cur = current_seg(s->lg);
		pthread_mutex_unlock(&s->qlock);
		if (cur == 3)
			break;
		if (cur == 2 && !touched) {
			for (uint64_t r = 0; r < 6144; r++) {
				struct kvt_key k = make_key(1, r);
				CHECK_EQ(t_read1(t, &k, b, 0, OBJ), (int)OBJ);
			}
			touched = true;
		}
		CHECK(i < 100000);
		for (uint64_t end = i + 256; i < end; i++) {
			struct kvt_key k = make_key(1, i);
			batch_add(&setup);
			CHECK_EQ(t->ops->write(t, &k, b, OBJ, batch_cb, &setup), 0);
		}
		batch_wait(&setup, 0);
	}
	CHECK(touched);
	CHECK_EQ(setup.failed, 0);
	/* Every read of segment 0's objects now fails (short). */
	char seg0[400];
	snprintf(seg0, sizeof(seg0), "%s/log/0.kvl", dir);
	CHECK_EQ(truncate(seg0, NV_LOG_BLOCK), 0);
	for (int j = 0; j < N; j++) {
		struct kvt_key k = make_key(2, (uint64_t)j);
		batch_add(bt);
		CHECK_EQ(t->ops->write(t, &k, b, OBJ, batch_cb, bt), 0);
	}
	/* Stop the ring thread between two turns, again and again, until it is in the state
	 * (or the list is worked off). */
	for (int tries = 0; tries < 20000; tries++) {
		usleep(5); /* a turn or two of the ring thread */
		/* Taken back as soon as the ring thread lets go of it (a blocking lock let it run
		 * the whole list meanwhile), then held until it runs into it (or has nothing to
		 * do). */
		while (pthread_mutex_trylock(&s->qlock))
			;
		usleep(300);
		struct nv_log *lg = s->lg;
		bool found = stopped_listed(lg);
		bool over = list_over(lg);
		if (found)
			s->closing = true; /* as nv_close: seen by the ring thread's next turn */
		pthread_mutex_unlock(&s->qlock);
		if (found || over)
			return found;
	}
	return false;
}

int main(void)
{
	char root[] = "/tmp/kvt-nvme-log-close-XXXXXX";
	CHECK(mkdtemp(root));
	signal(SIGALRM, on_alarm);
	uint8_t *b = abuf(OBJ);
	fill_object(b, OBJ, &(struct kvt_key){{0}}); /* the tier does not parse objects */
	bool found = false;
	for (int a = 0; a < ATTEMPTS && !found; a++) {
		char dir[300];
		snprintf(dir, sizeof(dir), "%s/d%d", root, a);
		struct kvt_tier *t;
		struct batch bt = BATCH_INIT;
		found = attempt(dir, &t, &bt, b);
		printf("nvme_log_close: attempt %d: state %s\n", a, found ? "reached" : "missed");
		fflush(stdout); /* before a hang's watchdog exit */
		alarm(30);
		kvt__tier_close(t);
		alarm(0);
		batch_wait(&bt, 0); /* every put answered: stored, or cancelled by the close */
		printf("nvme_log_close: %d stored, %d cancelled, %d failed\n", bt.ok, bt.cancelled,
		       bt.failed);
		CHECK_EQ(bt.failed, 0);
		CHECK_EQ(bt.ok + bt.cancelled, N);
		rm_rf(dir);
	}
	CHECKM(found, "the ring thread was never caught idle with a list left");
	free(b);
	rm_rf(root);
	printf("nvme_log_close: ok\n");
	return 0;
}
