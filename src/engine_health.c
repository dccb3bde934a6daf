/*
 * engine_health.c - how the engine stops waiting for a tier. Every call into a deeper tier
 * carries a guard with a deadline: store.deadline_floor_ms plus four times what the call
 * should cost (the tier's measured latency, plus the bytes queued ahead of it and its own
 * over the measured bandwidth, seeded from the cost model's tier profile), at most
 * store.tier_timeout_ms. Deadlines sit in a min-heap that the service thread checks on
 * every turn, however busy. A missed deadline completes the operation without the tier,
 * and leaves with the guard what the tier may still touch, released by whoever drops the
 * guard's last reference. A call to a local device (nvme) that is overdue while the device
 * keeps answering calls of its kind is queued, not stalled: its deadline moves on, up to
 * the ceiling. The circuit breaker stops calling a tier that keeps failing or
 * missing its deadlines, and probes it again after a cool-down.
 */
#include <math.h>

#include "engine_internal.h"

/* ------------------------------------------------------------ deadlines */

static void heap_swap(struct guard **h, size_t a, size_t b)
{
	struct guard *t = h[a];
	h[a] = h[b];
	h[b] = t;
	h[a]->heap_idx = a;
	h[b]->heap_idx = b;
}

static void heap_up(struct guard **h, size_t i)
{
	while (i > 0 && h[(i - 1) / 2]->deadline > h[i]->deadline) {
		heap_swap(h, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void heap_down(struct guard **h, size_t n, size_t i)
{
	for (;;) {
		size_t m = i, a = 2 * i + 1, b = a + 1;
		if (a < n && h[a]->deadline < h[m]->deadline)
			m = a;
		if (b < n && h[b]->deadline < h[m]->deadline)
			m = b;
		if (m == i)
			return;
		heap_swap(h, i, m);
		i = m;
	}
}

/* Under guard_lock. */
static void heap_remove(struct kvt_store *s, struct guard *g)
{
	size_t i = g->heap_idx;
	if (i == SIZE_MAX)
		return;
	s->heap_n--;
	if (i != s->heap_n) {
		s->heap[i] = s->heap[s->heap_n];
		s->heap[i]->heap_idx = i;
		heap_down(s->heap, s->heap_n, i);
		heap_up(s->heap, i);
	}
	g->heap_idx = SIZE_MAX;
}

/* What a call should take on l: latency, then the reads and writes queued ahead of it
 * drain at the tier's read and write bandwidth, then its own bytes at its kind's. */
static double deadline_estimate(struct link *l, uint64_t ahead_r, uint64_t ahead_w,
				uint64_t bytes, bool write)
{
	/* at least 1 B/s: 0 bytes over a bandwidth of 0 was NaN */
	double bw_r = (double)KVT_MAX(atomic_load(&l->bw_Bps[0]), 1);
	double bw_w = (double)KVT_MAX(atomic_load(&l->bw_Bps[1]), 1);
	return (double)atomic_load(&l->lat_ns) + (double)ahead_r * 1e9 / bw_r +
	       (double)ahead_w * 1e9 / bw_w + (double)bytes * 1e9 / (write ? bw_w : bw_r);
}

static uint64_t deadline_budget(struct kvt_store *s, const struct guard *g)
{
	struct link *l = g->l;
	if (atomic_load(&l->samples) < DEADLINE_WARMUP)
		return s->deadline_ceiling_ns;
	/* The floor is the allowance for jitter (scheduling, a GC pause, a busy core): every
	 * call gets it on top of what it should cost. */
	double est = deadline_estimate(l, g->ahead[0], g->ahead[1], g->bytes, g->write);
	double d = (double)s->deadline_floor_ns + DEADLINE_SLACK * est +
		   4.0 * (double)atomic_load(&l->dev_ns);
	/* "not below the ceiling" rather than "above it": a NaN estimate must be capped too
	 * (converted, it was ~2^63 ns, a call that never expired) */
	if (!(d < (double)s->deadline_ceiling_ns))
		return s->deadline_ceiling_ns;
	return (uint64_t)d;
}

/* Learn from an answer (in time or late: a late one says the tier got slower). */
static void deadline_learn(struct link *l, const struct guard *g, uint64_t now)
{
	uint64_t elapsed = now > g->start ? now - g->start : 1;
	uint64_t moved = g->ahead[0] + g->ahead[1] + g->bytes;
	uint64_t lat = atomic_load(&l->lat_ns);
	/* How far off the estimate was (before learning from this answer): its mean
	 * deviation widens the deadline of a tier whose answers vary (TCP's RTTVAR, RFC 6298),
	 * so a busy disk's spikes are not taken for a stall. */
	uint64_t err = (uint64_t)fabs(
		(double)elapsed - deadline_estimate(l, g->ahead[0], g->ahead[1], g->bytes, g->write));
	uint64_t dev = atomic_load(&l->dev_ns);
	/* The first answers replace the seed (a guess for server-class hardware) rather
	 * than being averaged with it. */
	bool first = atomic_fetch_add(&l->samples, 1) < DEADLINE_WARMUP / 2;
	atomic_store(&l->dev_ns, first ? KVT_MAX(dev, elapsed / 2) : (3 * dev + err) / 4);
	if (moved <= DEADLINE_SMALL_BYTES) {
		atomic_store(&l->lat_ns, first ? KVT_MAX(lat, elapsed) : (7 * lat + elapsed) / 8);
		return;
	}
	/* Bandwidth of this call's kind: the time left once latency and the other kind's
	 * queue are paid, over this kind's bytes (its queue ahead and its own). */
	uint64_t own = g->ahead[g->write] + g->bytes;
	/* Nothing of this kind moved (a remove or lookup answered while the other kind's
	 * bytes were queued): no bandwidth sample. Taken as one, it was 0 B/s, and then every
	 * estimate on the link 0 / 0: NaN, a deadline that never came (bench_stall_fs: calls
	 * on a hung mount "still out" 8 s after every deadline). */
	if (!own)
		return;
	double before = deadline_estimate(l, g->write ? g->ahead[0] : 0, g->write ? 0 : g->ahead[1],
					  0, g->write);
	double service = (double)elapsed - before;
	if (service < (double)elapsed / 8)
		service = (double)elapsed / 8 + 1;
	uint64_t sample = (uint64_t)((double)own * 1e9 / service);
	uint64_t bw = atomic_load(&l->bw_Bps[g->write]);
	atomic_store(&l->bw_Bps[g->write], first ? KVT_MIN(bw, sample) : (7 * bw + sample) / 8);
}

/* A guard for one call of bytes on link l. It has two references: the submitter's
 * (dropped by kvt__e_guard_arm, or the whole guard by kvt__e_guard_cancel) and the tier's (dropped when
 * the tier calls back). The service thread holds a third while it expires the call. */
struct guard *kvt__e_guard_new(struct kvt_store *s, struct link *l, const char *what,
			       uint64_t bytes, void *op, void (*resume)(void *, int64_t),
			       void (*expire)(struct guard *))
{
	struct guard *g = kvt__calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	/* Its place in the deadline heap is taken now, while the caller can still do without
	 * the call (every caller handles a NULL guard): grown at arm time, after the tier took
	 * the call, a failed allocation left the call with no deadline - on a hung tier, a
	 * call, a remove waiting for it and the store's close waited for good (until
	 * 2026-12-06). */
	pthread_mutex_lock(&s->guard_lock);
	if (s->heap_n + s->heap_resv == s->heap_cap) {
		size_t cap = s->heap_cap ? 2 * s->heap_cap : 256;
		struct guard **h = kvt__realloc(s->heap, cap * sizeof(*h));
		if (!h) {
			pthread_mutex_unlock(&s->guard_lock);
			kvt__free(g);
			return NULL;
		}
		s->heap = h;
		s->heap_cap = cap;
	}
	s->heap_resv++;
	pthread_mutex_unlock(&s->guard_lock);
	g->heap_idx = SIZE_MAX;
	g->s = s;
	g->l = l;
	g->what = what;
	g->write = !strcmp(what, "write");
	g->bytes = bytes;
	/* a read fills a slot or bounce buffer, a write sends one: whole slots, whatever the
	 * object's size (a partial chunk's slot is as large as a full one's) */
	g->held = g->write || !strcmp(what, "read") ? s->obj_max : 0;
	g->op = op;
	g->resume = resume;
	g->expire = expire;
	g->orphan_pin = -1;
	g->start = kvt__now_ns();
	g->ahead[0] = atomic_load(&l->queued_bytes[0]);
	g->ahead[1] = atomic_load(&l->queued_bytes[1]);
	atomic_fetch_add(&l->queued_bytes[g->write], bytes);
	if (g->write) {
		atomic_fetch_add(&l->live_write_bytes, bytes);
		atomic_fetch_add(&l->live_writes, 1);
	}
	atomic_store(&g->refs, 2);
	return g;
}

static void guard_put(struct guard *g)
{
	if (atomic_fetch_sub(&g->refs, 1) != 1)
		return;
	struct kvt_store *s = g->s;
	/* Last reference: the tier has answered and expire() (if it ran) has returned. */
	if (g->orphan_buf)
		kvt__e_bounce_put(s, g->orphan_buf);
	if (g->orphan_pin >= 0)
		kvt__dram_unpin(s->dram, g->orphan_pin);
	kvt__free(g->orphan_mem[0]);
	kvt__free(g->orphan_mem[1]);
	if (g->orphan_fn)
		g->orphan_fn(g);
	kvt__free(g);
}

/* The tier accepted the call: its deadline starts to count (from submission). */
void kvt__e_guard_arm(struct guard *g)
{
	struct kvt_store *s = g->s;
	g->budget = deadline_budget(s, g);
	uint64_t deadline = g->start + g->budget;
	bool wake = false;
	pthread_mutex_lock(&s->guard_lock);
	s->heap_resv--; /* the place kvt__e_guard_new took: there is room */
	if (atomic_load(&g->state) == G_PENDING) { /* not answered already */
		g->deadline = deadline;
		g->heap_idx = s->heap_n;
		s->heap[s->heap_n++] = g;
		heap_up(s->heap, g->heap_idx);
		wake = g->heap_idx == 0;
		if (wake)
			atomic_fetch_add(&s->heap_gen, 1);
	}
	pthread_mutex_unlock(&s->guard_lock);
	if (wake) { /* earlier than any the service thread knows of: tell it */
		pthread_mutex_lock(&s->work_lock);
		pthread_cond_signal(&s->work_cond);
		pthread_mutex_unlock(&s->work_lock);
	}
	guard_put(g);
}

/* The tier refused the call (returned < 0): it will never call back. */
void kvt__e_guard_cancel(struct guard *g)
{
	pthread_mutex_lock(&g->s->guard_lock);
	g->s->heap_resv--;
	pthread_mutex_unlock(&g->s->guard_lock);
	atomic_fetch_sub(&g->l->queued_bytes[g->write], g->bytes);
	if (g->write) {
		atomic_fetch_sub(&g->l->live_write_bytes, g->bytes);
		atomic_fetch_sub(&g->l->live_writes, 1);
	}
	kvt__free(g);
}

/* The tier's callback for every guarded call. */
void kvt__e_guard_cb(void *arg, int64_t rc)
{
	struct guard *g = arg;
	struct kvt_store *s = g->s;
	uint64_t now = kvt__now_ns();
	atomic_fetch_sub(&g->l->queued_bytes[g->write], g->bytes);
	if (rc >= 0 || rc == -ENOENT) {
		deadline_learn(g->l, g, now);
		atomic_store(&g->l->last_answer_ns[g->write], now);
	}
	pthread_mutex_lock(&s->guard_lock);
	int expected = G_PENDING;
	bool in_time = atomic_compare_exchange_strong(&g->state, &expected, G_DONE);
	if (in_time)
		heap_remove(s, g);
	else /* past its deadline: what it held is let go with this answer */
		atomic_fetch_sub(&g->l->late_bytes, g->held);
	pthread_mutex_unlock(&s->guard_lock);
	if (in_time && g->write) { /* else expiry took it off the backlog */
		atomic_fetch_sub(&g->l->live_write_bytes, g->bytes);
		atomic_fetch_sub(&g->l->live_writes, 1);
	}
	if (in_time && g->resume)
		g->resume(g->op, rc);
	else /* after the deadline: the operation went on without it; what it left with the
	      * guard is released with the last reference */
		g->late_rc = rc;
	guard_put(g);
}

/* An overdue call to a local device (nvme) whose device has answered a call of the same
 * kind since this one was submitted, and within this call's budget, is waiting its turn
 * behind work the device is doing, not stalled: under a mixed load, reads that arrive
 * after a write share the disk with it, and its estimate (what was queued ahead at
 * submission) comes out short (3 of the MLPerf KV run's 64 MiB writes missed 2.9-3.4 s
 * deadlines this way, docs/BENCHMARKS.md). Its deadline moves to a budget after that
 * answer, never past store.tier_timeout_ms from its start: a stalled device answers
 * nothing and its calls still go at their deadline. Not for remote tiers, where one
 * request can hang (a stuck placement group, a dropped connection) while others are
 * answered. Under guard_lock; true if the deadline moved. */
static bool deadline_extend(struct kvt_store *s, struct guard *g, uint64_t now)
{
	struct link *l = g->l;
	if (!l->local)
		return false;
	uint64_t last = atomic_load(&l->last_answer_ns[g->write]);
	uint64_t until = KVT_MIN(last + g->budget, g->start + s->deadline_ceiling_ns);
	if (last <= g->start || until <= now)
		return false;
	g->deadline = until;
	atomic_fetch_add(&l->deadline_extensions, 1);
	return true;
}

/* The service thread: expire every overdue call; returns the next deadline (UINT64_MAX:
 * none). Runs on every turn of the service loop, whatever else is queued. */
uint64_t kvt__e_guards_expire(struct kvt_store *s, uint64_t *gen)
{
	for (;;) {
		uint64_t now = kvt__now_ns();
		struct guard *due = NULL;
		uint64_t next = UINT64_MAX;
		pthread_mutex_lock(&s->guard_lock);
		*gen = atomic_load(&s->heap_gen);
		if (s->heap_n) {
			struct guard *g = s->heap[0];
			if (g->deadline <= now && deadline_extend(s, g, now)) {
				heap_down(s->heap, s->heap_n, 0);
				pthread_mutex_unlock(&s->guard_lock);
				continue;
			}
			if (g->deadline <= now) {
				int expected = G_PENDING;
				if (atomic_compare_exchange_strong(&g->state, &expected, G_EXPIRED)) {
					/* in this hold of the lock: the late answer takes it off */
					atomic_fetch_add(&g->l->late_bytes, g->held);
					if (g->write) { /* a hung write is no backlog: given up */
						atomic_fetch_sub(&g->l->live_write_bytes, g->bytes);
						atomic_fetch_sub(&g->l->live_writes, 1);
					}
				}
				heap_remove(s, g);
				atomic_fetch_add(&g->refs, 1); /* ours while expire() runs */
				due = g;
			} else {
				next = g->deadline;
			}
		}
		pthread_mutex_unlock(&s->guard_lock);
		if (!due)
			return next;
		struct link *l = due->l;
		atomic_fetch_add(&l->deadline_misses, 1);
		kvt__e_link_result(s, l, -ETIMEDOUT);
		uint64_t late = atomic_load(&l->late_bytes);
		if (late >= s->late_cap && late < s->late_cap + due->held)
			KVT_WARN(&s->log,
				 "%s tier holds %llu KiB in calls past their deadline (store memory it "
				 "may still use): no read or write goes to it until it answers them",
				 l->name, (unsigned long long)(late >> 10));
		KVT_WARN(&s->log,
			 "%s tier missed its deadline of %llu ms on a %s of %llu KiB (%s): %llu MiB "
			 "were queued ahead of it, expected at %llu MiB/s",
			 l->name, (unsigned long long)((due->deadline - due->start) / 1000000),
			 due->what, (unsigned long long)(due->bytes >> 10),
			 l->local ? "slow" : "remote: slow or unreachable",
			 (unsigned long long)((due->ahead[0] + due->ahead[1]) >> 20),
			 (unsigned long long)(atomic_load(&l->bw_Bps[due->write]) >> 20));
		if (due->expire) /* none for a fire-and-forget call */
			due->expire(due);
		guard_put(due);
	}
}

/* ------------------------------------------------------------ write backlog */

/* Would a write of bytes queue behind more than a quarter of the deadline ceiling on some
 * deeper tier that is in use (circuit closed)? A put that lands in DRAM completes before
 * its write-behind, so without this nothing bounds the writes queued at a slow tier: 16
 * GiB of DRAM over a disk that writes 1 GiB/s queued 14 s of writes, and every write past
 * the 10 s ceiling missed its deadline, was wasted and left its object on no deeper tier
 * (docs/BENCHMARKS.md, "MLPerf KV"). The put is told to retry (-EAGAIN), as when every
 * slot is pinned by write-behind; the dirty-page limit a kernel puts on writers is the
 * same idea. Only live calls count (answered or expired ones do not), and a tier whose
 * circuit is open is skipped, so a hung tier never turns into puts refused for ever. One
 * write is always let through (a tier with nothing live takes any object). */
bool kvt__e_wb_backlogged(struct kvt_store *s, uint64_t bytes)
{
	for (int i = s->dram_pos + 1; i < s->n_links; i++) {
		struct link *l = &s->links[i];
		uint64_t live = atomic_load(&l->live_write_bytes);
		uint64_t late = atomic_load(&l->late_bytes);
		/* skipped: an open circuit, or one that holds its share in late calls
		 * (kvt__e_link_late_full) - its writes are not given to it */
		if (!l->t || !live || atomic_load(&l->open_until_ns) || late >= s->late_cap)
			continue;
		double cap = (double)atomic_load(&l->bw_Bps[1]) *
			     ((double)s->deadline_ceiling_ns / 4e9);
		if ((double)(live + bytes) > cap)
			return true;
		/* nor may its writes, live and late, hold more than store->late_cap: a tier
		 * that hangs keeps what its calls held, and the rest of the pool must serve */
		uint64_t held = (uint64_t)(atomic_load(&l->live_writes) + (bytes ? 1 : 0)) * s->obj_max;
		if (held + late > s->late_cap)
			return true;
	}
	return false;
}

/* ------------------------------------------------------------ circuit breaker */

/* May this operation use the tier? Closed: yes. Open: no, except one probe after the
 * cool-down. */
bool kvt__e_link_usable(struct link *l)
{
	if (!l->t)
		return true;
	uint64_t until = atomic_load(&l->open_until_ns);
	if (!until)
		return true;
	if (kvt__now_ns() < until)
		return false;
	int expected = 0;
	return atomic_compare_exchange_strong(&l->probing, &expected, 1);
}

/* Does the tier hold as much of the engine's memory in unanswered late calls as it may
 * (store->late_cap)? Then no read or write is given to it, not even a probe of its
 * circuit: each would hold a DRAM slot or a bounce buffer more for as long as the tier
 * hangs. Until 2026-12-06 a hung tier behind DRAM held every slot its calls had, probes
 * added one each cool-down, and once the pool was held every put was refused -EAGAIN for
 * as long as the tier hung (integ.store_stall_fs, "puts while the tier hangs"). Checked
 * before kvt__e_link_usable, which may hand out the probe. */
bool kvt__e_link_late_full(const struct kvt_store *s, struct link *l)
{
	return l->t && atomic_load(&l->late_bytes) >= s->late_cap;
}

/* Give back the probe of a half-open circuit that was let through but made no call (a
 * lookup that an earlier tier answered in full, a write the tier refuses for its size,
 * no memory for the guard): otherwise nothing ever reports on the probe, and the tier is
 * skipped for good. Harmless on a closed circuit, where no probe is out. */
void kvt__e_link_unused(struct link *l)
{
	if (l->t && atomic_load(&l->open_until_ns))
		atomic_store(&l->probing, 0);
}

/* Record the outcome of an operation: errors that say the tier is unwell count. */
void kvt__e_link_result(struct kvt_store *s, struct link *l, int rc)
{
	bool failure = rc < 0 && rc != -ENOENT && rc != -ENOSPC && rc != -EDQUOT &&
		       rc != -EFBIG && rc != -EBADMSG && rc != -ECANCELED && rc != -EEXIST;
	if (!failure) {
		if (atomic_load(&l->open_until_ns))
			KVT_INFO(&s->log, "tier %s recovered", l->name);
		atomic_store(&l->fails, 0);
		atomic_store(&l->open_until_ns, 0);
		atomic_store(&l->cooldown_ns, 0);
		atomic_store(&l->probing, 0);
		return;
	}
	atomic_fetch_add(&l->errors, 1);
	uint32_t f = atomic_fetch_add(&l->fails, 1) + 1;
	/* Open and still cooling down: this is a call made before it opened, answering (or
	 * expiring) late - it says nothing new. Until 2026-12-05 each one doubled the cool-down:
	 * one stall with 12 calls out skipped the tier for 30 s instead of 0.5 s. Once cooled
	 * down, a failure doubles it: the probe's, or (not told apart) one of those earlier
	 * calls whose deadline ends after the cool-down. */
	uint64_t until = atomic_load(&l->open_until_ns);
	if (until && kvt__now_ns() < until)
		return;
	if (f >= BREAKER_FAILS) {
		uint64_t cd = atomic_load(&l->cooldown_ns);
		cd = cd ? KVT_MIN(cd * 2, BREAKER_MAX_NS) : BREAKER_BASE_NS;
		atomic_store(&l->cooldown_ns, cd);
		atomic_store(&l->open_until_ns, kvt__now_ns() + cd);
		atomic_store(&l->probing, 0);
		if (f == BREAKER_FAILS || cd > BREAKER_BASE_NS)
			KVT_WARN(&s->log, "tier %s: %u consecutive failures (%s); skipping it for %llu ms",
				 l->name, f, kvt_strerror(rc), (unsigned long long)(cd / 1000000));
	}
}
