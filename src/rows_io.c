/*
 * rows_io.c - one call per batch of chunks between a store and an engine's rows
 * (include/kvtier_layout.h says why). Reads and writes are submitted with direct
 * completions (the callback runs on the thread that completes the operation, as for the
 * *_sync wrappers): nothing needs kvt_poll, so the caller waits here, in C, with the
 * batch's deadline.
 *
 * Loads convert each chunk on the thread its read completes on (a verify or tier thread,
 * or the caller for a DRAM hit), so conversions run in parallel and overlap the next
 * reads; they read the verified object where it lies (a pinned DRAM slot or the engine's
 * bounce buffer, kvt__e_do_get_sink), without copying it into a staging buffer first,
 * unless the store protects its objects (decryption needs a buffer). A read that completes after its batch was given up (deadline, an earlier
 * failure) writes nothing: the batch marks itself abandoned under the handle's lock and
 * waits for the conversions already running, so no row is written once the call returns.
 * Staging buffers (or, where loads need none, just the permits to have an operation in
 * flight) belong to the handle; one whose operation is still in flight when its batch
 * returns goes back to the pool from the operation's callback.
 * A store's put still in flight when its call returns goes on: one that succeeds stored its
 * chunk though the call's result does not count it, and its key is kept for
 * kvt_rows_store_late (until 2026-12-06 nothing said so, and the vLLM tier never announced
 * such chunks).
 *
 * A started load (kvt_rows_load_start, an engine's scheduler thread) is submitted by the
 * handle's pump thread as permits come back (pump_main), so it goes on between its
 * caller's polls and its DRAM hits are converted there, not on the caller's thread.
 */
#include <time.h>

#include "engine_internal.h"
#include "layout_copy.h"

/* Client mode's workers (see struct serial_job). Why two: a client store's calls share one
 * connection, one exchange at a time, so more threads would only interleave their jobs
 * chunk by chunk (near a deadline every job would end part done instead of the oldest
 * whole); two let one job's conversion overlap the other's exchange, as the Python load
 * threads they replace did. */
#define SERIAL_WORKERS 2

/* Keys of store chunks that landed after their call returned (kvt_rows_store_late), kept
 * until taken: beyond this many the oldest are dropped. A caller takes them every engine
 * step; this many between two of its looks means a tier answering thousands at once. */
#define LATE_MAX 4096u
/* Client mode's cut puts watched at once (the oldest give way), looked up per store call
 * at most (one exchange each, within UNSURE_LOOKUP_NS in all), and for how long. */
#define UNSURE_MAX 64u
#define UNSURE_PER_CALL 8u
#define UNSURE_LOOKUP_NS (200ull * 1000000)
#define UNSURE_MIN_LEFT_NS (20ull * 1000000) /* less left: no lookups (a cut one drops the
					       * connection, which the next call pays for) */
#define UNSURE_MAX_NS (60ull * 1000000000)

struct kvt_rows {
	struct kvt_store *s;
	struct kvt_row_layout lay;
	char *rows;
	uint64_t n_rows;
	uint64_t chunk_bytes;
	uint32_t chunk_tokens;
	bool sink; /* loads convert from the object in place (no staging buffer) */
	pthread_mutex_t m;
	pthread_cond_t c; /* CLOCK_MONOTONIC: a buffer came back, a chunk finished */
	void **free_bufs; /* NULL entries: buffers not made yet (made when first needed) */
	uint32_t n_free, n_bufs;
	/* client mode: started loads, queued in arrival order for SERIAL_WORKERS threads made
	 * at the first one (see struct serial_job); under m */
	struct serial_job *sq_head, *sq_tail;
	pthread_cond_t sq_c; /* a job queued, or closing */
	pthread_t workers[SERIAL_WORKERS];
	uint32_t n_workers;
	bool closing;
	/* in-process started loads (kvt_rows_load_start), under m: the pump thread (made at
	 * the first) submits their chunks as permits come back - see pump_main */
	struct batch *jobs, *jobs_tail; /* in start order: the oldest is served first */
	pthread_cond_t pump_c; /* CLOCK_MONOTONIC: a job started, a permit came back, closing */
	pthread_t pump;
	bool pump_made;
	/* stores: the keys of chunks whose put succeeded but was not counted in its call's
	 * result (in flight or done out of order when the call returned), oldest first, a ring
	 * of LATE_MAX made at the first; under m */
	struct kvt_key *late;
	uint32_t late_head, late_n;
	/* client mode: store chunks whose put was cut at its call's deadline, which kvtierd
	 * may still store (a cut does not stop the daemon's write: daemon_cut 6). Looked up
	 * after a later store call that went through, and reported with the late ones once
	 * found (unsure_resolve); given up after UNSURE_MAX_NS. Under m. */
	struct unsure {
		struct kvt_key key;
		uint64_t since_ns;
	} unsure[UNSURE_MAX];
	uint32_t unsure_n;
};

enum { ST_PENDING = 0, ST_DONE = 1 }; /* else a -errno */

struct batch;
struct slot {
	struct batch *b;
	uint32_t idx;
	void *buf;
	struct kvt_key key; /* a store's: the caller's key, for a late report (its array is
			     * the caller's, gone once the call returns) */
};

typedef int (*submit_fn)(struct kvt_rows *r, struct slot *sl, const void *ctx);

struct load_ctx {
	const struct kvt_key *keys;
	const uint8_t *linked; /* linked[i]: keys[i-1] is chunk i's parent (NULL: every i > 0) */
};

/* Chunk i's parent in a load: the key before it, where the caller says it precedes it. */
static const struct kvt_key *load_parent(const struct kvt_key *keys, const uint8_t *linked,
					 size_t i)
{
	return i && (!linked || linked[i]) ? &keys[i - 1] : NULL;
}

struct batch {
	struct kvt_rows *r;
	const uint64_t *row_ids; /* valid while not abandoned (a job's own copy) */
	uint32_t refs;           /* the caller + operations in flight */
	uint32_t first_fail;     /* lowest failed index (n: none) */
	uint32_t converting;
	bool abandoned;
	_Atomic uint64_t convert_ns;
	int *state;
	struct slot *slots;
	/* the caller's side, under r->m */
	size_t n, next, done;
	bool load, finished, backoff;
	bool pumping;	  /* a batch_pump is running (it lets r->m go around each submit) */
	bool queued;	  /* a started load in r->jobs: only the pump thread submits it */
	bool want_pump;	  /* the pump thread is to look at it */
	struct batch *job_next;
	int fail;
	submit_fn submit;
	const void *ctx;
	uint64_t deadline, t_wait, t_submit, conv_here;
	struct kvt_key *own_keys; /* a started job's copies of its keys, links and rows */
	uint8_t *own_linked;
	uint64_t *own_rows;
	struct load_ctx lc;
};

/* Client mode (store.daemon): a started load is run (run_serial) by the handle's worker
 * threads, so the caller's thread only starts and polls it, as for an in-process store (a
 * caller thread that blocked instead - a Python load thread - needed its runtime's lock
 * back to report, behind the engine's busy loop). The job and its worker share it:
 * whoever of kvt_rows_job_free and the run's end comes last frees it. A queued job holds
 * the store's call gate (kvt__store_enter) until it has run, so the store's close waits
 * for it too. */
struct serial_job {
	struct serial_job *next; /* the handle's queue */
	struct kvt_rows *r;
	struct kvt_key *keys;
	uint8_t *linked; /* NULL: every chunk's parent is the one before */
	uint64_t *ids;
	size_t n;
	uint64_t deadline;
	pthread_mutex_t m; /* held while a chunk is converted into its row */
	pthread_cond_t c;  /* CLOCK_MONOTONIC: done */
	bool done, freed;  /* under m */
	struct kvt_rows_result res;
};

struct kvt_rows_job {
	struct batch *b;
	struct serial_job *sj;
	struct kvt_rows_result res;
};

/* ----------------------------------------------------------------- handle */

static int rows_open(struct kvt_store *s, const struct kvt_row_layout *lay, void *rows,
		     uint64_t n_rows, uint32_t staging, struct kvt_rows **out)
{
	if (!s || !rows || !n_rows || !staging || staging > 4096 || !out ||
	    kvt_row_layout_check(lay))
		return -EINVAL;
	const struct kvt_geometry *g = kvt__store_geometry(s);
	uint32_t tokens = lay->block_tokens * lay->blocks_per_chunk;
	if (g->layers != lay->layers || g->kv_heads != lay->kv_heads ||
	    g->head_dim != lay->head_dim || g->chunk_tokens != tokens ||
	    kvt_dtype_bytes(g->dtype) != lay->elem_bytes || g->kind != KVT_KIND_KV)
		return -EINVAL;
	struct kvt_rows *r = kvt__calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->s = s;
	r->lay = *lay;
	r->rows = rows;
	r->n_rows = n_rows;
	r->chunk_bytes = kvt_row_layout_chunk_bytes(lay);
	r->chunk_tokens = tokens;
	pthread_mutex_init(&r->m, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->c, &ca);
	pthread_cond_init(&r->pump_c, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&r->sq_c, NULL);
	r->free_bufs = kvt__calloc(staging, sizeof(void *));
	if (!r->free_bufs) {
		kvt_rows_close(r);
		return -ENOMEM;
	}
	r->sink = !s->client && !s->prot;
	/* Staging buffers are offered to transparent huge pages: a store without DRAM writes
	 * a chunk straight from its buffer (store.zero_copy_puts), and a device request can
	 * hold only so many separate pages (docs/BENCHMARKS.md, "The machine"). */
	for (uint32_t i = 0; i < staging; i++) {
		void *b = NULL;
		if (!r->sink) { /* loads need them: made and touched now, not on a restore */
			b = kvt__huge_alloc(r->chunk_bytes);
			if (!b) {
				kvt_rows_close(r);
				return -ENOMEM;
			}
			memset(b, 0, r->chunk_bytes);
		}
		r->free_bufs[r->n_free++] = b;
		r->n_bufs++;
	}
	*out = r;
	return 0;
}

/* The calls that use the store run inside its call gate (engine.c), like every call on
 * it: a kvt_store_close waits for them, and refuses them (-ECANCELED) once it has begun. */
int kvt_rows_open(struct kvt_store *s, const struct kvt_row_layout *lay, void *rows,
		  uint64_t n_rows, uint32_t staging, struct kvt_rows **out)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	rc = rows_open(s, lay, rows, n_rows, staging, out);
	kvt__store_leave(s);
	return rc;
}

void kvt_rows_close(struct kvt_rows *r)
{
	if (!r)
		return;
	/* client mode: the workers run what is queued (freed jobs, by the rules of
	 * kvt_rows_close: skipped) and end */
	pthread_mutex_lock(&r->m);
	r->closing = true;
	pthread_cond_broadcast(&r->sq_c);
	pthread_cond_broadcast(&r->pump_c);
	pthread_mutex_unlock(&r->m);
	for (uint32_t i = 0; i < r->n_workers; i++)
		pthread_join(r->workers[i], NULL);
	if (r->pump_made)
		pthread_join(r->pump, NULL);
	pthread_mutex_lock(&r->m);
	while (r->n_free < r->n_bufs) /* buffers of reads or writes still in flight */
		pthread_cond_wait(&r->c, &r->m);
	pthread_mutex_unlock(&r->m);
	for (uint32_t i = 0; i < r->n_free; i++)
		if (r->free_bufs[i])
			kvt__huge_free(r->free_bufs[i], r->chunk_bytes);
	pthread_mutex_destroy(&r->m);
	pthread_cond_destroy(&r->c);
	pthread_cond_destroy(&r->sq_c);
	pthread_cond_destroy(&r->pump_c);
	kvt__free(r->free_bufs);
	kvt__free(r->late);
	kvt__free(r);
}

/* ------------------------------------------------------------------ batch */

static struct batch *batch_new(struct kvt_rows *r, size_t n, const uint64_t *row_ids)
{
	struct batch *b = kvt__calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->state = kvt__calloc(n ? n : 1, sizeof(int));
	b->slots = kvt__calloc(n ? n : 1, sizeof(struct slot));
	if (!b->state || !b->slots) {
		kvt__free(b->state);
		kvt__free(b->slots);
		kvt__free(b);
		return NULL;
	}
	b->r = r;
	b->row_ids = row_ids;
	b->refs = 1;
	b->first_fail = (uint32_t)n;
	return b;
}

static void batch_free(struct batch *b)
{
	kvt__free(b->own_keys);
	kvt__free(b->own_linked);
	kvt__free(b->own_rows);
	kvt__free(b->state);
	kvt__free(b->slots);
	kvt__free(b);
}

/* Under r->m: a permit came back to the handle. Every started job with chunks left to
 * submit is to be looked at, not only the one whose permit it was: permits are the
 * handle's, and a job that found none (another job, or a blocking load on another thread,
 * held them all) has nothing in flight that would wake it. */
static void permit_back(struct kvt_rows *r)
{
	bool any = false;
	for (struct batch *b = r->jobs; b; b = b->job_next)
		if (!b->want_pump && !b->abandoned && b->next < b->n && b->next <= b->first_fail) {
			b->want_pump = true;
			any = true;
		}
	if (any)
		pthread_cond_signal(&r->pump_c);
}

/* Under r->m: the operation of slot sl finished with st (ST_DONE or -errno); its buffer
 * goes back. Returns true when the batch is to be freed (its last reference). */
static bool slot_finish(struct slot *sl, int st)
{
	struct batch *b = sl->b;
	struct kvt_rows *r = b->r;
	b->state[sl->idx] = st;
	if (st < 0 && sl->idx < b->first_fail)
		b->first_fail = sl->idx;
	r->free_bufs[r->n_free++] = sl->buf;
	pthread_cond_broadcast(&r->c);
	permit_back(r);
	return --b->refs == 0;
}

/* Sink mode: the verified object, where it lies; converted into the row unless the
 * batch gave up on this chunk. */
static int64_t load_sink(void *arg, const struct kvt_header *h, const void *obj)
{
	struct slot *sl = arg;
	struct batch *b = sl->b;
	struct kvt_rows *r = b->r;
	if (h->n_tokens != r->chunk_tokens)
		return -EPROTO;
	pthread_mutex_lock(&r->m);
	bool convert = !b->abandoned && sl->idx < b->first_fail;
	uint64_t row = convert ? b->row_ids[sl->idx] : 0;
	if (convert)
		b->converting++;
	pthread_mutex_unlock(&r->m);
	if (!convert)
		return -ECANCELED;
	uint64_t t0 = kvt__now_ns();
	uint64_t base = kvt_layer_offset(&h->geometry, h->n_tokens, 0);
	uint64_t stride = r->lay.layers > 1
				  ? kvt_layer_offset(&h->geometry, h->n_tokens, 1) - base
				  : 0;
	kvt__row_from_canonical(&r->lay, (const char *)obj + base, stride,
				r->rows + row * r->lay.row_bytes);
	atomic_fetch_add(&b->convert_ns, kvt__now_ns() - t0);
	pthread_mutex_lock(&r->m);
	b->converting--;
	pthread_mutex_unlock(&r->m);
	return (int64_t)r->chunk_bytes;
}

static void load_cb(void *arg, const struct kvt_result *res)
{
	struct slot *sl = arg;
	struct batch *b = sl->b;
	struct kvt_rows *r = b->r;
	int st = res->status < 0 ? res->status : 0;
	if (st == -ENOENT && res->cause < 0) /* a miss because a copy was bad or late: say so */
		st = res->cause;
	if (st == 0 && res->n_tokens != r->chunk_tokens)
		st = -EPROTO;
	bool convert = false; /* sink mode: load_sink converted it (st 0) or said why not */
	uint64_t row = 0;
	pthread_mutex_lock(&r->m);
	if (!r->sink) {
		convert = st == 0 && !b->abandoned && sl->idx < b->first_fail;
		row = convert ? b->row_ids[sl->idx] : 0;
		if (convert)
			b->converting++;
	}
	pthread_mutex_unlock(&r->m);
	if (convert) {
		uint64_t t0 = kvt__now_ns();
		kvt__row_from_canonical(&r->lay, sl->buf, 0, r->rows + row * r->lay.row_bytes);
		atomic_fetch_add(&b->convert_ns, kvt__now_ns() - t0);
	}
	pthread_mutex_lock(&r->m);
	if (convert)
		b->converting--;
	bool last = slot_finish(sl, st < 0 ? st : (r->sink || convert) ? ST_DONE : -ECANCELED);
	pthread_mutex_unlock(&r->m);
	if (last)
		batch_free(b);
}

/* Under r->m: a store chunk's put succeeded after its call stopped counting (the call
 * returned at its deadline or at an earlier chunk's failure): the chunk is stored all the
 * same, and its caller learns it from kvt_rows_store_late. */
static void late_push(struct kvt_rows *r, const struct kvt_key *key)
{
	if (!r->late && !(r->late = kvt__malloc(LATE_MAX * sizeof(*r->late))))
		return; /* no memory: this one goes unreported */
	if (r->late_n == LATE_MAX) { /* full: the oldest goes */
		r->late_head = (r->late_head + 1) % LATE_MAX;
		r->late_n--;
	}
	r->late[(r->late_head + r->late_n++) % LATE_MAX] = *key;
}

/* Under r->m: a client-mode put of key was cut at its deadline (struct kvt_rows, unsure). */
static void unsure_push(struct kvt_rows *r, const struct kvt_key *key, uint64_t since_ns)
{
	for (uint32_t i = 0; i < r->unsure_n; i++)
		if (kvt__key_eq(&r->unsure[i].key, key))
			return; /* cut again (a retried store): watched once, reported once */
	if (r->unsure_n == UNSURE_MAX) { /* full: the oldest goes */
		memmove(r->unsure, r->unsure + 1, (UNSURE_MAX - 1) * sizeof(r->unsure[0]));
		r->unsure_n--;
	}
	r->unsure[r->unsure_n++] = (struct unsure){*key, since_ns};
}

/* Client mode, after a store call that went through (the daemon answers): look up the oldest
 * cut puts, within what is left of that call's deadline (UNSURE_LOOKUP_NS at most); one
 * found was stored after all, and is reported by kvt_rows_store_late. One not found stays
 * watched until UNSURE_MAX_NS. The lookups run on the store call's thread, never on the
 * caller of kvt_rows_store_late (an engine's scheduler). */
static void unsure_resolve(struct kvt_rows *r, uint64_t deadline)
{
	struct unsure u[UNSURE_PER_CALL];
	pthread_mutex_lock(&r->m);
	uint32_t n = KVT_MIN(r->unsure_n, UNSURE_PER_CALL);
	memcpy(u, r->unsure, n * sizeof(u[0]));
	memmove(r->unsure, r->unsure + n, (r->unsure_n - n) * sizeof(u[0]));
	r->unsure_n -= n;
	pthread_mutex_unlock(&r->m);
	if (!n)
		return;
	uint64_t now = kvt__now_ns(), by = now + UNSURE_LOOKUP_NS;
	if (deadline && deadline < by)
		by = deadline;
	if (by < now + UNSURE_MIN_LEFT_NS) { /* no time for them: all put back as they were */
		pthread_mutex_lock(&r->m);
		for (uint32_t i = 0; i < n; i++)
			unsure_push(r, &u[i].key, u[i].since_ns);
		pthread_mutex_unlock(&r->m);
		return;
	}
	int found[UNSURE_PER_CALL];
	for (uint32_t i = 0; i < n; i++) {
		int8_t tier;
		/* 1: present; 0: not (yet), or the lookup failed; < 0: not asked (the budget
		 * is spent) or refused: watched on until UNSURE_MAX_NS either way */
		found[i] = kvt__now_ns() < by
				   ? kvt__client_lookup_sync(r->s->client, &u[i].key, 1, &tier, by, NULL)
				   : -ETIME;
	}
	now = kvt__now_ns();
	pthread_mutex_lock(&r->m);
	for (uint32_t i = 0; i < n; i++) {
		if (found[i] == 1)
			late_push(r, &u[i].key);
		else if (now - u[i].since_ns < UNSURE_MAX_NS)
			unsure_push(r, &u[i].key, u[i].since_ns);
	}
	pthread_mutex_unlock(&r->m);
}

static void store_cb(void *arg, const struct kvt_result *res)
{
	struct slot *sl = arg;
	struct kvt_rows *r = sl->b->r;
	pthread_mutex_lock(&r->m);
	/* the batch was finished: its result did not count this chunk */
	if (sl->b->finished && res->status >= 0)
		late_push(r, &sl->key);
	bool last = slot_finish(sl, res->status < 0 ? res->status : ST_DONE);
	pthread_mutex_unlock(&r->m);
	if (last)
		batch_free(sl->b);
}

static int failure_of(int st)
{
	switch (st) {
	case 0:
		return KVT_ROWS_OK;
	case -ENOENT:
		return KVT_ROWS_MISS;
	case -EBADMSG:
		return KVT_ROWS_CORRUPT;
	case -ETIMEDOUT:
		return KVT_ROWS_TIMEOUT;
	case -ETIME:
		return KVT_ROWS_DEADLINE;
	case -EPROTO:
		return KVT_ROWS_SHORT;
	default:
		return KVT_ROWS_ERROR;
	}
}

/* Under r->m: wait for a change until the deadline (0: none) or at most max_ns (0: no
 * limit). false once the deadline has passed. */
static bool wait_change(struct kvt_rows *r, uint64_t deadline, uint64_t max_ns)
{
	uint64_t now = kvt__now_ns();
	if (deadline && now >= deadline)
		return false;
	uint64_t until = deadline;
	if (max_ns && (!until || now + max_ns < until))
		until = now + max_ns;
	if (!until) {
		pthread_cond_wait(&r->c, &r->m);
		return true;
	}
	struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
			      .tv_nsec = (long)(until % 1000000000ull)};
	pthread_cond_timedwait(&r->c, &r->m, &ts);
	return true;
}

/* Submits chunk i of a batch (load: a get, into a staging buffer or a sink; store: a put
 * of the buffer the caller converted). Returns the submit status (< 0: no callback). */

static int submit_get(struct kvt_rows *r, struct slot *sl, const void *ctx)
{
	const struct load_ctx *lc = ctx;
	struct kvt_key sk, sp;
	const struct kvt_key *k = kvt__e_skey(r->s, &lc->keys[sl->idx], &sk);
	/* A load names a chain in order (its result counts leading chunks): the chunk before
	 * is the parent a promotion links this one to in DRAM, as a put's is, so that DRAM
	 * evicts a restored chain from its end (docs/COST_MODEL.md, difference 3). */
	const struct kvt_key *pk = load_parent(lc->keys, lc->linked, sl->idx);
	const struct kvt_key *p = pk ? kvt__e_skey(r->s, pk, &sp) : NULL;
	if (r->sink)
		return kvt__e_do_get_sink(r->s, k, p, load_sink, sl, load_cb, sl, true);
	return kvt__e_do_get(r->s, k, p, 0, 0, sl->buf, r->chunk_bytes, load_cb, sl, true);
}

struct store_ctx {
	const struct kvt_key *keys, *parents;
	const uint8_t *has_parent;
	const uint64_t *row_ids;
};

static int submit_put(struct kvt_rows *r, struct slot *sl, const void *ctx)
{
	const struct store_ctx *sc = ctx;
	uint32_t i = sl->idx;
	struct kvt_key sk, sp;
	const struct kvt_key *par = NULL;
	sl->key = sc->keys[i];
	if (sc->parents && (!sc->has_parent || sc->has_parent[i]))
		par = kvt__e_skey(r->s, &sc->parents[i], &sp);
	return kvt__e_do_put(r->s, kvt__e_skey(r->s, &sc->keys[i], &sk), par, r->chunk_tokens,
			     sl->buf, r->chunk_bytes, store_cb, sl, true);
}

/* Set on the pump thread (pump_main): a queued job is submitted there only, so that its
 * caller's polls (the engine's scheduler thread) never convert a DRAM hit inline. */
static _Thread_local bool in_pump_thread;

/* Under r->m: submit what the permits allow (chunks in order, none past a known failure),
 * then move `done` over the chunks finished. true once the batch is over (b->fail says
 * why: 0, a chunk's -errno, or -ETIME at the deadline). */
static bool batch_pump(struct batch *b)
{
	struct kvt_rows *r = b->r;
	/* One submit loop at a time (each lets r->m go around its submits, and a second one
	 * would take the same next chunk): the other caller only looks at where it stands. */
	bool submit = !b->pumping && (!b->queued || in_pump_thread);
	if (submit)
		b->pumping = true;
	for (;;) {
		b->backoff = false;
		while (submit && !b->abandoned && b->next < b->n && b->next <= b->first_fail &&
		       r->n_free) {
			/* Nothing is submitted past the deadline: a DRAM hit completes (and is
			 * converted) inside its submit, so without this check a batch of hits ran
			 * to the end however late it was, and said "ok". */
			if (b->deadline && kvt__now_ns() >= b->deadline)
				break;
			size_t i = b->next;
			struct slot *sl = &b->slots[i];
			sl->b = b;
			sl->idx = (uint32_t)i;
			sl->buf = r->free_bufs[--r->n_free];
			b->refs++;
			pthread_mutex_unlock(&r->m);
			int rc = 0;
			if (!sl->buf && (!b->load || !r->sink)) { /* the first use of this buffer */
				sl->buf = kvt__huge_alloc(r->chunk_bytes);
				rc = sl->buf ? 0 : -ENOMEM;
			}
			if (!b->load && !rc) {
				uint64_t t0 = kvt__now_ns();
				kvt__row_to_canonical(&r->lay, r->rows + b->row_ids[i] * r->lay.row_bytes,
						      sl->buf);
				b->conv_here += kvt__now_ns() - t0;
			}
			if (!rc) {
				uint64_t ts = kvt__now_ns();
				rc = b->submit(r, sl, b->ctx);
				b->t_submit += kvt__now_ns() - ts;
			}
			pthread_mutex_lock(&r->m);
			if (rc < 0) {
				/* No callback will give the buffer back: do it here, and wake the calls
				 * waiting for one (nothing else would; without a deadline they slept
				 * for good). */
				r->free_bufs[r->n_free++] = sl->buf;
				b->refs--;
				pthread_cond_broadcast(&r->c);
				permit_back(r);
			}
			if (rc == -EAGAIN) { /* back-pressure: try again once something finished */
				b->backoff = true;
				break;
			}
			if (rc < 0) {
				b->state[i] = rc;
				if (i < b->first_fail)
					b->first_fail = (uint32_t)i;
			}
			b->next++;
		}
		bool over = true;
		while (b->done < b->n && b->state[b->done] == ST_DONE)
			b->done++;
		if (b->done == b->n)
			b->fail = 0;
		else if (b->state[b->done] < 0)
			b->fail = b->state[b->done];
		else if (b->deadline && kvt__now_ns() >= b->deadline)
			b->fail = -ETIME;
		else
			over = false;
		/* more to submit and permits back already (a DRAM hit completes inline) */
		if (over || !submit ||
		    !(b->next < b->n && b->next <= b->first_fail && r->n_free && !b->backoff)) {
			if (submit) {
				b->pumping = false;
				pthread_cond_broadcast(&r->c); /* batch_finish may wait for it */
			}
			return over;
		}
	}
}

/* Under r->m: give up the rest (no conversion starts from now on), wait for those
 * running, fill res, drop the caller's reference (r->m is released on return). */
static void batch_finish(struct batch *b, struct kvt_rows_result *res)
{
	struct kvt_rows *r = b->r;
	struct kvt_rows_result out = {0};
	b->abandoned = true;
	while (b->converting || b->pumping) /* the pump thread's loop: it lets r->m go */
		pthread_cond_wait(&r->c, &r->m);
	b->finished = true;
	/* a store's chunks put after the first one not done (done out of order) are stored
	 * though the result does not count them: reported late, as those still in flight will
	 * be when they land (store_cb) */
	for (size_t i = b->done; !b->load && i < b->n; i++)
		if (b->state[i] == ST_DONE)
			late_push(r, &b->slots[i].key);
	if (b->queued) {
		struct batch **pp = &r->jobs, *prev = NULL;
		while (*pp != b) {
			prev = *pp;
			pp = &(*pp)->job_next;
		}
		*pp = b->job_next;
		if (r->jobs_tail == b)
			r->jobs_tail = prev;
		b->queued = false;
	}
	bool last = --b->refs == 0;
	out.convert_ns = atomic_load(&b->convert_ns) + b->conv_here;
	out.done = (uint32_t)b->done;
	out.status = b->fail;
	out.failure = failure_of(b->fail);
	out.wait_ns = b->t_wait;
	out.submit_ns = b->t_submit;
	pthread_mutex_unlock(&r->m);
	if (last)
		batch_free(b);
	*res = out;
}

/* Under r->m: pump until over or timeout_ms passed (-1: no limit, 0: no wait). */
static bool batch_drive(struct batch *b, int timeout_ms)
{
	struct kvt_rows *r = b->r;
	uint64_t until = timeout_ms < 0 ? 0 : kvt__now_ns() + (uint64_t)timeout_ms * 1000000ull;
	for (;;) {
		if (batch_pump(b))
			return true;
		uint64_t now = kvt__now_ns();
		if (timeout_ms >= 0 && now >= until)
			return false;
		uint64_t lim = b->deadline;
		if (timeout_ms >= 0 && (!lim || until < lim))
			lim = until;
		uint64_t t0 = now;
		wait_change(r, lim, b->backoff ? 1000000 : 0);
		b->t_wait += kvt__now_ns() - t0;
	}
}

static struct batch *batch_start(struct kvt_rows *r, size_t n, const uint64_t *row_ids,
				 bool load, submit_fn submit, const void *ctx, uint64_t deadline)
{
	struct batch *b = batch_new(r, n, row_ids);
	if (!b)
		return NULL;
	b->n = n;
	b->load = load;
	b->submit = submit;
	b->ctx = ctx;
	b->deadline = deadline;
	return b;
}

/* The blocking form: start, drive to the end, finish. */
static int run_batch(struct kvt_rows *r, size_t n, const uint64_t *row_ids, bool load,
		     submit_fn submit, const void *ctx, uint64_t deadline,
		     struct kvt_rows_result *res)
{
	struct batch *b = batch_start(r, n, row_ids, load, submit, ctx, deadline);
	if (!b)
		return -ENOMEM;
	struct kvt_rows_result out;
	pthread_mutex_lock(&r->m);
	batch_drive(b, -1);
	batch_finish(b, &out);
	if (res)
		*res = out;
	return (int)out.done;
}

static bool serial_freed(struct serial_job *sj)
{
	pthread_mutex_lock(&sj->m);
	bool f = sj->freed;
	pthread_mutex_unlock(&sj->m);
	return f;
}

/* Client mode (store.daemon): one blocking call per chunk, converted here, each bounded by
 * the batch's deadline (not only by store.daemon_timeout_ms: a hung daemon held a 0.3 s
 * load 5 s per chunk). sj: the started job this runs for (NULL: a blocking call), whose
 * rows are no longer written once it is freed. */
static int run_serial(struct kvt_rows *r, const struct kvt_key *keys,
		      const struct kvt_key *parents, const uint8_t *has_parent,
		      const uint64_t *row_ids, size_t n, bool load, uint64_t deadline,
		      struct kvt_rows_result *res, struct serial_job *sj)
{
	struct kvt_rows_result out = {0};
	size_t i = 0;
	int fail = 0;
	if (!n || (sj && serial_freed(sj))) { /* nothing to do (no buffer needed), or given up */
		out.status = n ? -ECANCELED : 0;
		out.failure = failure_of(out.status);
		if (res)
			*res = out;
		return 0;
	}
	/* Another call may hold every buffer for all its chunks: wait for one only until the
	 * deadline (this waited without bound, past it, until that call was over). */
	pthread_mutex_lock(&r->m);
	while (!r->n_free && wait_change(r, deadline, 0))
		;
	bool have = r->n_free;
	void *buf = have ? r->free_bufs[--r->n_free] : NULL;
	pthread_mutex_unlock(&r->m);
	if (!have) {
		out.status = -ETIME;
		out.failure = failure_of(-ETIME);
		if (res)
			*res = out;
		return 0;
	}
	if (!buf && !(buf = kvt__huge_alloc(r->chunk_bytes))) {
		fail = -ENOMEM;
		n = 0;
	}
	for (; i < n; i++) {
		if (deadline && kvt__now_ns() >= deadline) {
			fail = -ETIME;
			break;
		}
		if (sj && serial_freed(sj)) { /* given up: no more calls for it */
			fail = -ECANCELED;
			break;
		}
		char *row = r->rows + row_ids[i] * r->lay.row_bytes;
		uint64_t t0 = kvt__now_ns(), t1;
		if (load) {
			struct kvt_result kr = {0};
			/* its parent, as submit_get names it */
			int rc = kvt__client_get_sync(r->s->client, &keys[i],
						      load_parent(keys, has_parent, i), 0, 0, buf,
						      r->chunk_bytes, deadline, &kr);
			if (rc == -ENOENT && kr.cause < 0) /* as load_cb: a bad copy, a late tier, */
				rc = kr.cause;             /* the daemon unreachable: say so */
			if (rc == 0 && kr.n_tokens != r->chunk_tokens)
				rc = -EPROTO;
			t1 = kvt__now_ns();
			out.wait_ns += t1 - t0;
			if (rc < 0) {
				fail = rc;
				break;
			}
			if (sj) {
				pthread_mutex_lock(&sj->m);
				if (sj->freed) {
					pthread_mutex_unlock(&sj->m);
					fail = -ECANCELED;
					break;
				}
			}
			kvt__row_from_canonical(&r->lay, buf, 0, row);
			if (sj)
				pthread_mutex_unlock(&sj->m);
			out.convert_ns += kvt__now_ns() - t1;
		} else {
			kvt__row_to_canonical(&r->lay, row, buf);
			t1 = kvt__now_ns();
			out.convert_ns += t1 - t0;
			bool hp = parents && (!has_parent || has_parent[i]);
			int rc = kvt__client_put_sync(r->s->client, &keys[i],
						      hp ? &parents[i] : NULL, r->chunk_tokens,
						      buf, r->chunk_bytes, deadline);
			out.wait_ns += kvt__now_ns() - t1;
			if (rc == -ETIME) { /* cut: the daemon may store it yet */
				pthread_mutex_lock(&r->m);
				unsure_push(r, &keys[i], kvt__now_ns());
				pthread_mutex_unlock(&r->m);
			}
			if (rc < 0) {
				fail = rc;
				break;
			}
		}
	}
	pthread_mutex_lock(&r->m);
	r->free_bufs[r->n_free++] = buf;
	pthread_cond_broadcast(&r->c);
	permit_back(r);
	pthread_mutex_unlock(&r->m);
	out.done = (uint32_t)i;
	out.status = fail;
	out.failure = failure_of(fail);
	if (res)
		*res = out;
	return (int)i;
}

static int check_rows(struct kvt_rows *r, const uint64_t *row_ids, size_t n)
{
	if (n > UINT32_MAX / 2)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (row_ids[i] >= r->n_rows)
			return -EINVAL;
	return 0;
}

static int rows_load(struct kvt_rows *r, const struct kvt_key *keys, const uint64_t *row_ids,
		     size_t n, uint64_t deadline_ns, struct kvt_rows_result *res)
{
	if ((n && (!keys || !row_ids)) || check_rows(r, row_ids, n))
		return -EINVAL;
	if (r->s->client)
		return run_serial(r, keys, NULL, NULL, row_ids, n, true, deadline_ns, res, NULL);
	struct load_ctx lc = {.keys = keys};
	return run_batch(r, n, row_ids, true, submit_get, &lc, deadline_ns, res);
}

int kvt_rows_load(struct kvt_rows *r, const struct kvt_key *keys, const uint64_t *row_ids, size_t n,
		  uint64_t deadline_ns, struct kvt_rows_result *res)
{
	int rc = r ? kvt__store_enter(r->s) : -EINVAL;
	if (rc < 0)
		return rc;
	rc = rows_load(r, keys, row_ids, n, deadline_ns, res);
	kvt__store_leave(r->s);
	return rc;
}

static int rows_store(struct kvt_rows *r, const struct kvt_key *keys, const struct kvt_key *parents,
		      const uint8_t *has_parent, const uint64_t *row_ids, size_t n,
		      uint64_t deadline_ns, struct kvt_rows_result *res)
{
	if ((n && (!keys || !row_ids)) || check_rows(r, row_ids, n))
		return -EINVAL;
	if (r->s->client) {
		struct kvt_rows_result own;
		res = res ? res : &own;
		int rc = run_serial(r, keys, parents, has_parent, row_ids, n, false, deadline_ns,
				    res, NULL);
		if (res->status == 0)
			unsure_resolve(r, deadline_ns);
		return rc;
	}
	struct store_ctx sc = {
		.keys = keys, .parents = parents, .has_parent = has_parent, .row_ids = row_ids};
	return run_batch(r, n, row_ids, false, submit_put, &sc, deadline_ns, res);
}

int kvt_rows_store(struct kvt_rows *r, const struct kvt_key *keys, const struct kvt_key *parents,
		   const uint8_t *has_parent, const uint64_t *row_ids, size_t n,
		   uint64_t deadline_ns, struct kvt_rows_result *res)
{
	int rc = r ? kvt__store_enter(r->s) : -EINVAL;
	if (rc < 0)
		return rc;
	rc = rows_store(r, keys, parents, has_parent, row_ids, n, deadline_ns, res);
	kvt__store_leave(r->s);
	return rc;
}

size_t kvt_rows_store_late(struct kvt_rows *r, struct kvt_key *keys, size_t max)
{
	if (!r || !keys)
		return 0;
	pthread_mutex_lock(&r->m);
	size_t n = KVT_MIN((size_t)r->late_n, max);
	for (size_t i = 0; i < n; i++)
		keys[i] = r->late[(r->late_head + i) % LATE_MAX];
	r->late_head = n ? (uint32_t)((r->late_head + n) % LATE_MAX) : r->late_head;
	r->late_n -= (uint32_t)n;
	pthread_mutex_unlock(&r->m);
	return n;
}

static void serial_job_destroy(struct serial_job *sj)
{
	pthread_mutex_destroy(&sj->m);
	pthread_cond_destroy(&sj->c);
	kvt__free(sj->keys);
	kvt__free(sj->linked);
	kvt__free(sj->ids);
	kvt__free(sj);
}

/* Run one started job on a worker, then hand it back (or free it: it was given up). */
static void serial_run(struct serial_job *sj)
{
	struct kvt_rows *r = sj->r;
	struct kvt_rows_result res = {0};
	/* (a job given up while queued makes no call: run_serial looks first) */
	run_serial(r, sj->keys, NULL, sj->linked, sj->ids, sj->n, true, sj->deadline, &res, sj);
	kvt__store_leave(r->s); /* the gate serial_start took for it */
	pthread_mutex_lock(&sj->m);
	sj->res = res;
	sj->done = true;
	bool freed = sj->freed;
	pthread_cond_broadcast(&sj->c);
	pthread_mutex_unlock(&sj->m);
	if (freed)
		serial_job_destroy(sj);
}

static void *serial_worker(void *arg)
{
	struct kvt_rows *r = arg;
	pthread_mutex_lock(&r->m);
	for (;;) {
		while (!r->sq_head && !r->closing)
			pthread_cond_wait(&r->sq_c, &r->m);
		struct serial_job *sj = r->sq_head;
		if (!sj)
			break; /* closing, and nothing left */
		r->sq_head = sj->next;
		if (!r->sq_head)
			r->sq_tail = NULL;
		pthread_mutex_unlock(&r->m);
		serial_run(sj);
		pthread_mutex_lock(&r->m);
	}
	pthread_mutex_unlock(&r->m);
	return NULL;
}

/* A started load of a client-mode store: queued for the handle's workers. Called inside
 * the caller's store gate, so the job's own kvt__store_enter is taken while the store is
 * open. */
static int serial_start(struct kvt_rows *r, const struct kvt_key *keys, const uint8_t *linked,
			const uint64_t *row_ids, size_t n, uint64_t deadline_ns,
			struct kvt_rows_job **out)
{
	struct kvt_rows_job *j = kvt__calloc(1, sizeof(*j));
	struct serial_job *sj = kvt__calloc(1, sizeof(*sj));
	if (sj) {
		sj->keys = kvt__malloc((n ? n : 1) * sizeof(*sj->keys));
		sj->ids = kvt__malloc((n ? n : 1) * sizeof(*sj->ids));
		if (linked)
			sj->linked = kvt__malloc(n ? n : 1);
	}
	if (!j || !sj || !sj->keys || !sj->ids || (linked && !sj->linked)) {
		if (sj) {
			kvt__free(sj->keys);
			kvt__free(sj->linked);
			kvt__free(sj->ids);
		}
		kvt__free(sj);
		kvt__free(j);
		return -ENOMEM;
	}
	if (n) {
		memcpy(sj->keys, keys, n * sizeof(*keys));
		memcpy(sj->ids, row_ids, n * sizeof(*row_ids));
		if (linked)
			memcpy(sj->linked, linked, n);
	}
	sj->r = r;
	sj->n = n;
	sj->deadline = deadline_ns;
	pthread_mutex_init(&sj->m, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&sj->c, &ca);
	pthread_condattr_destroy(&ca);
	int rc = kvt__store_enter(r->s);
	pthread_mutex_lock(&r->m);
	/* the workers, made at the first job (one that cannot be made is tried again at the
	 * next: one is enough to run the queue, in order) */
	while (rc == 0 && r->n_workers < SERIAL_WORKERS &&
	       pthread_create(&r->workers[r->n_workers], NULL, serial_worker, r) == 0)
		r->n_workers++;
	if (rc == 0 && !r->n_workers) {
		rc = -EAGAIN;
		kvt__store_leave(r->s);
	}
	if (rc == 0) {
		if (r->sq_tail)
			r->sq_tail->next = sj;
		else
			r->sq_head = sj;
		r->sq_tail = sj;
		pthread_cond_signal(&r->sq_c);
	}
	pthread_mutex_unlock(&r->m);
	if (rc < 0) {
		serial_job_destroy(sj);
		kvt__free(j);
		return rc;
	}
	j->sj = sj;
	*out = j;
	return 0;
}

/* The pump thread: submits started loads' chunks as their permits come back, so a job
 * goes on between its caller's polls. An engine polls once a step: until 2026-12-05 a
 * job submitted only from its start and its polls, so a restore from a deeper tier moved a
 * few chunks per engine step and long prompts missed their load deadline on a busy
 * engine; and its start converted every leading DRAM hit on the caller's (the engine
 * scheduler's) thread. Here, on a thread of the handle's own - never on a tier's
 * completion thread, which a submit could wait on. Each pump holds the store's gate. */
static void *pump_main(void *arg)
{
	struct kvt_rows *r = arg;
	in_pump_thread = true;
	bool nap = false; /* a job met back-pressure (-EAGAIN): look again in 1 ms */
	pthread_mutex_lock(&r->m);
	while (!r->closing) {
		if (nap) {
			uint64_t until = kvt__now_ns() + 1000000; /* pump_c: CLOCK_MONOTONIC */
			struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
					      .tv_nsec = (long)(until % 1000000000ull)};
			pthread_cond_timedwait(&r->pump_c, &r->m, &ts);
			nap = false;
			continue;
		}
		struct batch *b = r->jobs;
		while (b && !b->want_pump)
			b = b->job_next;
		if (!b) {
			pthread_cond_wait(&r->pump_c, &r->m);
			continue;
		}
		b->want_pump = false;
		if (b->abandoned || b->pumping || kvt__store_enter(r->s) < 0)
			continue;
		b->refs++; /* ours while the pump lets r->m go around its submits */
		batch_pump(b);
		if (b->backoff && !b->abandoned) {
			b->want_pump = true;
			nap = true;
		}
		pthread_cond_broadcast(&r->c); /* the poller: chunks may be done */
		pthread_mutex_unlock(&r->m);
		kvt__store_leave(r->s);
		pthread_mutex_lock(&r->m);
		if (--b->refs == 0) { /* the job was freed meanwhile: its last reference */
			pthread_mutex_unlock(&r->m);
			batch_free(b);
			pthread_mutex_lock(&r->m);
		}
	}
	pthread_mutex_unlock(&r->m);
	return NULL;
}

static int rows_load_start(struct kvt_rows *r, const struct kvt_key *keys, const uint8_t *linked,
			   const uint64_t *row_ids, size_t n, uint64_t deadline_ns,
			   struct kvt_rows_job **out)
{
	if (!out || (n && (!keys || !row_ids)) || check_rows(r, row_ids, n))
		return -EINVAL;
	if (r->s->client)
		return serial_start(r, keys, linked, row_ids, n, deadline_ns, out);
	struct kvt_rows_job *j = kvt__calloc(1, sizeof(*j));
	struct kvt_key *k = kvt__malloc((n ? n : 1) * sizeof(*k));
	uint64_t *ids = kvt__malloc((n ? n : 1) * sizeof(*ids));
	uint8_t *lk = linked ? kvt__malloc(n ? n : 1) : NULL;
	struct batch *b = j && k && ids && (!linked || lk)
				  ? batch_start(r, n, ids, true, submit_get, NULL, deadline_ns)
				  : NULL;
	if (!b) {
		kvt__free(j);
		kvt__free(k);
		kvt__free(ids);
		kvt__free(lk);
		return -ENOMEM;
	}
	if (n) {
		memcpy(k, keys, n * sizeof(*k));
		memcpy(ids, row_ids, n * sizeof(*ids));
		if (lk)
			memcpy(lk, linked, n);
	}
	b->own_keys = k;
	b->own_linked = lk;
	b->own_rows = ids;
	b->lc.keys = k;
	b->lc.linked = lk;
	b->ctx = &b->lc;
	pthread_mutex_lock(&r->m);
	if (!r->pump_made && !r->closing)
		r->pump_made = pthread_create(&r->pump, NULL, pump_main, r) == 0;
	if (!r->pump_made) { /* no thread: its polls submit it, as before */
		if (batch_pump(b)) {
			batch_finish(b, &j->res); /* releases r->m; b may be gone after */
			*out = j;
			return 0;
		}
	} else {
		b->queued = true;
		b->want_pump = true;
		if (r->jobs_tail)
			r->jobs_tail->job_next = b;
		else
			r->jobs = b;
		r->jobs_tail = b;
		pthread_cond_signal(&r->pump_c);
	}
	j->b = b;
	pthread_mutex_unlock(&r->m);
	*out = j;
	return 0;
}

int kvt_rows_load_start(struct kvt_rows *r, const struct kvt_key *keys, const uint64_t *row_ids,
			size_t n, uint64_t deadline_ns, struct kvt_rows_job **out)
{
	return kvt_rows_load_start_linked(r, keys, NULL, row_ids, n, deadline_ns, out);
}

int kvt_rows_load_start_linked(struct kvt_rows *r, const struct kvt_key *keys,
			       const uint8_t *linked, const uint64_t *row_ids, size_t n,
			       uint64_t deadline_ns, struct kvt_rows_job **out)
{
	int rc = r ? kvt__store_enter(r->s) : -EINVAL;
	if (rc < 0)
		return rc;
	rc = rows_load_start(r, keys, linked, row_ids, n, deadline_ns, out);
	kvt__store_leave(r->s);
	return rc;
}

/* Wait up to timeout_ms (-1: no limit) for a client-mode job's thread; true once done. */
static bool serial_wait(struct serial_job *sj, int timeout_ms, struct kvt_rows_result *out)
{
	pthread_mutex_lock(&sj->m);
	if (!sj->done && timeout_ms != 0) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t until = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec +
				 (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000u;
		ts.tv_sec = (time_t)(until / 1000000000u);
		ts.tv_nsec = (long)(until % 1000000000u);
		while (!sj->done) {
			if (timeout_ms < 0)
				pthread_cond_wait(&sj->c, &sj->m);
			else if (pthread_cond_timedwait(&sj->c, &sj->m, &ts) == ETIMEDOUT)
				break;
		}
	}
	bool done = sj->done;
	if (done)
		*out = sj->res;
	pthread_mutex_unlock(&sj->m);
	return done;
}

int kvt_rows_job_poll(struct kvt_rows_job *j, int timeout_ms, struct kvt_rows_result *res)
{
	if (!j)
		return -EINVAL;
	if (j->sj) {
		if (!serial_wait(j->sj, timeout_ms, &j->res))
			return 0;
		serial_job_destroy(j->sj); /* its thread is past its last use of it */
		j->sj = NULL;
	}
	if (j->b) {
		struct batch *b = j->b;
		struct kvt_rows *r = b->r;
		struct kvt_store *s = r->s; /* the poll submits a job no pump thread has */
		int rc = kvt__store_enter(s);
		if (rc < 0)
			return rc;
		pthread_mutex_lock(&r->m);
		if (!batch_drive(b, timeout_ms)) {
			pthread_mutex_unlock(&r->m);
			kvt__store_leave(s);
			return 0;
		}
		j->b = NULL;
		batch_finish(b, &j->res); /* releases r->m; b may be gone after */
		kvt__store_leave(s);
	}
	if (res)
		*res = j->res;
	return 1;
}

void kvt_rows_job_free(struct kvt_rows_job *j)
{
	if (!j)
		return;
	if (j->sj) { /* give it up: no row is written once this returns (see run_serial) */
		struct serial_job *sj = j->sj;
		pthread_mutex_lock(&sj->m);
		bool done = sj->done;
		sj->freed = true;
		pthread_mutex_unlock(&sj->m);
		if (done)
			serial_job_destroy(sj);
		/* else the thread frees it when it ends, by its deadline */
	}
	if (j->b) { /* not finished: give it up (rows are not written after this returns) */
		struct batch *b = j->b;
		pthread_mutex_lock(&b->r->m);
		if (!b->fail)
			b->fail = -ECANCELED;
		batch_finish(b, &j->res);
	}
	kvt__free(j);
}
