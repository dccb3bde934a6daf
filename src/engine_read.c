/*
 * engine_read.c - the read path. A get served from DRAM copies out at once; a miss reads
 * the whole object from the fastest deeper tier that has it into a fresh DRAM slot (a fill,
 * shared by concurrent misses on the key), verifies it on the verify pool, publishes it and
 * copies out; without a DRAM slot a reused aligned bounce buffer stands in. A tier that
 * misses, fails, misses its deadline or serves damaged bytes is passed over for the next;
 * only damaged bytes are dropped - a sound object of another namespace or geometry, or one
 * larger than store.max_object_bytes, is a miss and stays. A fill whose tier misses its
 * deadline gives its slot up at once (the late tier's guard keeps it pinned); one that a
 * remove of the key overtook answers its waiters but is never published, and a get sent
 * while a remove of its key is still out in a deeper tier (no put since) misses there
 * rather than bring the key back. Prefetch stages a looked-up prefix into DRAM through the
 * same fills.
 */
#include "engine_internal.h"

/* ------------------------------------------------------------ bounce buffers */

/* An object of under 2 MiB gets a bounce buffer carved from a region offered to
 * transparent huge pages, several to a region, so that its bytes are physically
 * contiguous as a huge-page I/O buffer's are: a buffer of its own (4 KiB pages) is as many
 * scattered pages as it has, and each is a segment of the device request that reads or
 * writes it (docs/BENCHMARKS.md, "64 KiB objects: bounce buffers on huge pages"). Under
 * 1 MiB a region is one huge page; from 1 to 2 MiB it is four, and an object that
 * straddles two of them is two runs, still one request (before, such objects had buffers
 * of their own on 4 KiB pages). Carved buffers are never freed one by one: they go back
 * to a free list, the regions at close. Objects of 2 MiB or more get their own huge pages
 * (kvt__huge_alloc). */
#define HUGE_PAGE (2u << 20)

static size_t carve_stride(const struct kvt_store *s)
{
	size_t stride = KVT_ALIGN_UP(s->obj_max, KVT_ALIGN);
	return stride < HUGE_PAGE ? stride : 0;
}

/* The bytes of one region: room for two objects at least. */
static size_t carve_region(size_t stride)
{
	return 2 * stride <= HUGE_PAGE ? HUGE_PAGE : 4 * HUGE_PAGE;
}

static void *carve(struct kvt_store *s, size_t stride) /* under bounce_lock */
{
	void *b = s->bounce_carved;
	if (b) {
		s->bounce_carved = *(void **)b;
		return b;
	}
	if (s->n_regions == s->cap_regions) {
		uint32_t cap = s->cap_regions ? 2 * s->cap_regions : 8;
		void **r = kvt__realloc(s->bounce_regions, cap * sizeof(*r));
		if (!r)
			return NULL;
		s->bounce_regions = r;
		s->cap_regions = cap;
	}
	size_t bytes = carve_region(stride);
	uint8_t *region = kvt__huge_alloc(bytes);
	if (!region)
		return NULL;
	s->bounce_regions[s->n_regions++] = region;
	for (size_t off = bytes / stride * stride; (off -= stride) > 0;) {
		*(void **)(region + off) = s->bounce_carved;
		s->bounce_carved = region + off;
	}
	return region;
}

void kvt__e_bounce_free_all(struct kvt_store *s)
{
	while (s->n_bounce)
		kvt__huge_free(s->bounce[--s->n_bounce], s->obj_max);
	size_t stride = carve_stride(s);
	for (uint32_t i = 0; i < s->n_regions; i++)
		kvt__huge_free(s->bounce_regions[i], carve_region(stride));
	kvt__free(s->bounce_regions);
	s->bounce_regions = NULL;
	s->n_regions = s->cap_regions = 0;
	s->bounce_carved = NULL;
}

void *kvt__e_bounce_get(struct kvt_store *s)
{
	void *b = NULL;
	size_t stride = carve_stride(s);
	if (stride) {
		pthread_mutex_lock(&s->bounce_lock);
		b = carve(s, stride);
		pthread_mutex_unlock(&s->bounce_lock);
		return b;
	}
	pthread_mutex_lock(&s->bounce_lock);
	if (s->n_bounce)
		b = s->bounce[--s->n_bounce];
	pthread_mutex_unlock(&s->bounce_lock);
	return b ? b : kvt__huge_alloc(s->obj_max);
}

void kvt__e_bounce_put(struct kvt_store *s, void *b)
{
	if (!b)
		return;
	if (carve_stride(s)) {
		pthread_mutex_lock(&s->bounce_lock);
		*(void **)b = s->bounce_carved;
		s->bounce_carved = b;
		pthread_mutex_unlock(&s->bounce_lock);
		return;
	}
	pthread_mutex_lock(&s->bounce_lock);
	if (s->n_bounce < BOUNCE_CACHE) {
		s->bounce[s->n_bounce++] = b;
		b = NULL;
	}
	pthread_mutex_unlock(&s->bounce_lock);
	kvt__huge_free(b, s->obj_max);
}

/* ------------------------------------------------------------ chain reads */

/* Read a whole object from the fastest deeper tier that has it, into buf (a DRAM slot or a
 * bounce buffer), and verify header and every layer CRC there. A tier that misses, fails or
 * serves a corrupt object (dropped from that tier, counted) is passed over for the next.
 * done() runs once, on a tier thread or in the submitting call: rc 0 with the decoded
 * header and the chain position that served it, or -ENOENT when no tier could. */

static void chain_read_next(struct chain_read *cr);
static void chain_read_expire(struct guard *g);

static bool same_geometry(const struct kvt_geometry *a, const struct kvt_geometry *b)
{
	return a->layers == b->layers && a->kv_heads == b->kv_heads &&
	       a->head_dim == b->head_dim && a->chunk_tokens == b->chunk_tokens &&
	       a->dtype == b->dtype && a->kind == b->kind;
}

/* A failure found before chain_read_start returned is reported from the service thread:
 * done() never runs inside the submitting call. */
struct deferred_done {
	struct chain_read *cr;
	int rc;
};

static void deferred_done_run(void *arg)
{
	struct deferred_done *d = arg;
	struct chain_read *cr = d->cr;
	int rc = d->rc;
	kvt__free(d);
	cr->done(cr, rc, NULL);
}

static void chain_read_fail(struct chain_read *cr, int rc)
{
	if (!cr->in_submit) {
		cr->done(cr, rc, NULL);
		return;
	}
	cr->in_submit = false;
	/* Short of memory to defer it, wait for some: never run done() here, never lose it. */
	for (;;) {
		struct deferred_done *d = kvt__malloc(sizeof(*d));
		if (d) {
			d->cr = cr;
			d->rc = rc;
			if (kvt__e_defer(cr->s, deferred_done_run, d) == 0)
				return;
			kvt__free(d);
		}
		usleep(1000);
	}
}

/* Remember why a tier did not serve the key, when it was not a plain absence: the first
 * such cause is what a miss reports (kvt_result.cause). */
static void chain_read_note(struct chain_read *cr, int rc)
{
	if (rc < 0 && rc != -ENOENT && !cr->cause)
		cr->cause = rc;
}

/* Is the object in buf sound but not ours to serve - another namespace or geometry under
 * the same (opaque) key, or larger than store.max_object_bytes? Then it is a miss and
 * stays for whoever it belongs to: only damaged bytes are ever dropped. */
static bool chain_read_foreign(struct kvt_store *s, const void *buf, uint64_t len,
			       const char **why)
{
	struct kvt_header h;
	struct kvt_expect any = {.max_object_bytes = 0}; /* the format's own bound */
	if (len < KVT_HEADER_BYTES || kvt__header_decode(buf, &h, &any) < 0)
		return false; /* (past len the buffer holds what an earlier read left) */
	if (!same_geometry(&h.geometry, &s->geo) || memcmp(h.ns_id, s->ns_id, KVT_NS_ID_BYTES)) {
		*why = "another namespace or geometry";
		return true;
	}
	if (h.object_bytes > s->max_object_bytes) {
		*why = "an object larger than store.max_object_bytes";
		return true;
	}
	return false;
}

static void chain_read_verify(struct chain_read *cr, int64_t rc);

struct verify_job {
	struct chain_read *cr;
	int64_t rc;
};

static void verify_job_run(void *arg)
{
	struct verify_job *j = arg;
	struct chain_read *cr = j->cr;
	int64_t rc = j->rc;
	kvt__free(j);
	chain_read_verify(cr, rc);
}

/* The tier answered in time (on its I/O thread): the object's checks and whatever
 * follows (publish, copy-out) go to the verify pool, so the tier's thread goes back to
 * its I/O at once. */
static void chain_read_done(void *arg, int64_t rc)
{
	struct chain_read *cr = arg;
	struct kvt_store *s = cr->s;
	kvt__e_link_result(s, &s->links[cr->pos], rc < 0 ? (int)rc : 0);
	chain_read_note(cr, rc < 0 ? (int)rc : 0);
	if (rc > 0 && s->n_pool) {
		struct verify_job *j = kvt__malloc(sizeof(*j));
		if (j) {
			j->cr = cr;
			j->rc = rc;
			if (kvt__e_pool_defer(s, verify_job_run, j) == 0)
				return;
			kvt__free(j);
		}
	}
	chain_read_verify(cr, rc); /* no pool or no memory: here */
}

/* A read's bytes checked: served, passed over (not ours to read, or another store's), or
 * counted corrupt and dropped. A read of 0 bytes is an object present but empty - an
 * object always has its header - so it is damage too: until 2026-12-05 it was a plain
 * miss, and an empty object left under a key by a broken gateway or another writer stayed
 * for good while lookups kept finding it. */
static void chain_read_verify(struct chain_read *cr, int64_t rc)
{
	struct kvt_store *s = cr->s;
	struct link *l = &s->links[cr->pos];
	if (rc >= 0) {
		struct kvt_header h;
		struct kvt_expect exp = {.geometry = &s->geo, .ns_id = s->ns_id, .key = &cr->key,
					 .max_object_bytes = s->max_object_bytes};
		int v = kvt__object_verify(cr->buf, (uint64_t)rc, &exp, &h);
		int a = v ? v : kvt__object_authenticate(cr->buf, (uint64_t)rc, &h, s->prot);
		if (a < 0 && a != -EBADMSG) { /* sound, not ours to read (src/protect.h): kept */
			atomic_fetch_add(&l->misses, 1);
			KVT_DEBUG(&s->log, "tier %s: object not readable here: %s", l->name,
				  kvt_strerror(a));
			cr->pos++;
			chain_read_next(cr);
			return;
		}
		v = a; /* a MAC that does not verify is damage (or forgery): dropped below */
		if (v == 0) {
			atomic_fetch_add(&l->hits, 1);
			cr->done(cr, 0, &h);
			return;
		}
		const char *why;
		if (chain_read_foreign(s, cr->buf, (uint64_t)rc, &why)) {
			atomic_fetch_add(&l->misses, 1);
			KVT_DEBUG(&s->log, "tier %s holds %s under this key: a miss, left in place",
				  l->name, why);
			cr->pos++;
			chain_read_next(cr);
			return;
		}
		atomic_fetch_add(&l->checksum_failures, 1);
		chain_read_note(cr, -EBADMSG);
		KVT_WARN(&s->log, "tier %s served a corrupt object (dropped): %s", l->name,
			 kvt_strerror(v));
		if (l->t->ops->drop_corrupt) {
			l->t->ops->drop_corrupt(l->t, &cr->key);
			kvt__e_event(s, KVT_EVENT_REMOVED, KVT_REASON_CORRUPT, cr->pos, &cr->key, 0);
		}
	} else {
		atomic_fetch_add(&l->misses, 1);
	}
	cr->pos++;
	chain_read_next(cr);
}

static void chain_read_next(struct chain_read *cr)
{
	struct kvt_store *s = cr->s;
	for (; cr->pos < s->n_links; cr->pos++) {
		struct link *l = &s->links[cr->pos];
		if (!l->t)
			continue;
		/* its circuit is open, or it holds what it may in late calls: skipped, and that
		 * is a cause */
		if (kvt__e_link_late_full(s, l) || !kvt__e_link_usable(l)) {
			chain_read_note(cr, -EAGAIN);
			continue;
		}
		struct guard *g =
			kvt__e_guard_new(s, l, "read", s->obj_max, cr, chain_read_done, chain_read_expire);
		if (!g) {
			kvt__e_link_unused(l);
			continue;
		}
		struct kvt_seg seg = {.off = 0, .len = s->obj_max, .buf = cr->buf};
		/* Once the tier has the call, cr belongs to its answer: leave submit mode first. */
		bool submitting = cr->in_submit;
		cr->in_submit = false;
		int rc = l->t->ops->read(l->t, &cr->key, &seg, 1, kvt__e_guard_cb, g);
		if (rc == 0) {
			kvt__e_guard_arm(g);
			return;
		}
		cr->in_submit = submitting;
		kvt__e_guard_cancel(g);
		kvt__e_link_result(s, l, rc);
		chain_read_note(cr, rc);
	}
	chain_read_fail(cr, -ENOENT);
}

/* The tier missed its deadline: a miss there. It may still write into the buffer, so the
 * buffer goes to the guard (a fill's slot: a pin on it). A bounce read goes on to the next
 * tier with a fresh buffer; a fill fails (the get that started it goes on with a bounce
 * read). Runs on the service thread. */
static void chain_read_expire(struct guard *g)
{
	struct chain_read *cr = g->op;
	struct kvt_store *s = cr->s;
	struct link *l = &s->links[cr->pos];
	atomic_fetch_add(&l->misses, 1);
	chain_read_note(cr, -ETIMEDOUT);
	if (cr->in_slot) {
		/* The slot leaves the index now (pin, then abort, as kvt__store_cancel_keep):
		 * left filling until the tier answered, it refused every put of the key (-EAGAIN),
		 * for ever on a hung tier. The guard keeps the pin, so the slot is not reused
		 * while the late tier may still write into it. */
		struct fill *f = (struct fill *)cr;
		kvt__dram_pin(s->dram, f->ref.id);
		kvt__dram_abort(s->dram, f->ref.id);
		g->orphan_pin = f->ref.id;
		cr->lost = true;
		cr->done(cr, -ETIMEDOUT, NULL);
		return;
	}
	g->orphan_buf = cr->buf;
	cr->buf = kvt__e_bounce_get(s);
	if (!cr->buf) {
		cr->done(cr, -ENOMEM, NULL);
		return;
	}
	cr->pos++;
	chain_read_next(cr);
}

/* Start the read; done() runs later, on another thread. */
static void chain_read_start(struct chain_read *cr, struct kvt_store *s, const struct kvt_key *key,
			     void *buf, bool in_slot, int from,
			     void (*done)(struct chain_read *, int, const struct kvt_header *))
{
	cr->s = s;
	cr->key = *key;
	cr->buf = buf;
	cr->in_slot = in_slot;
	cr->lost = false;
	cr->pos = from;
	cr->cause = 0;
	cr->done = done;
	cr->in_submit = true;
	chain_read_next(cr); /* cr may be gone when this returns */
}

/* ------------------------------------------------------------ fills (promotion) */

static struct fill **fill_bucket(struct kvt_store *s, const struct kvt_key *key)
{
	return &s->fills[kvt__key_hash(key) % FILL_BUCKETS];
}

/* Hand the result to every waiter: each gets its own pin on success. A fill that served a
 * use (a get or a device restore among its waiters) is one sighting for admission; one
 * only a prefetch waited for is none - the get that reads the staged chunk from DRAM is
 * (until 2026-12-05 every fill counted one, so a prefetched chunk counted twice). */
static void fill_finish(struct fill *f, int rc, int tier)
{
	struct kvt_store *s = f->s;
	pthread_mutex_lock(&s->fill_lock);
	struct fill **pp = fill_bucket(s, &f->key);
	while (*pp != f)
		pp = &(*pp)->next;
	*pp = f->next;
	struct fill_waiter *w = f->waiters;
	bool used = false;
	for (struct fill_waiter *x = w; x; x = x->next)
		used |= x->use;
	pthread_mutex_unlock(&s->fill_lock);
	if (rc == 0 && used)
		kvt__e_admission_record(s, &f->key);
	if (rc == 0) {
		/* Read whole either way; only a published one is a promotion, the other (a
		 * remove overtook it: fill_read_done) is counted apart, so the stats say what
		 * happened to every fill that read. Until 2026-12-03 it was not counted at
		 * all; and f->removed is no test here: a remove that comes after the publish
		 * marks it too, and removes the published slot as any resident one. */
		atomic_fetch_add(f->ref.discarded ? &s->promotions_discarded : &s->promotions, 1);
		for (struct fill_waiter *x = w->next; x; x = x->next)
			kvt__dram_pin(s->dram, f->ref.id);
	}
	while (w) {
		struct fill_waiter *next = w->next;
		if (rc < 0 && w->cause)
			*w->cause = f->cr.cause;
		w->cb(w->arg, rc, rc == 0 ? &f->ref : NULL, tier);
		kvt__free(w);
		w = next;
	}
	kvt__free(f);
}

static void fill_read_done(struct chain_read *cr, int rc, const struct kvt_header *h)
{
	struct fill *f = (struct fill *)cr; /* cr is the fill's first member */
	struct kvt_store *s = f->s;
	if (rc < 0) {
		if (!cr->lost) /* else aborted at the deadline; the late tier's guard unpins it */
			kvt__dram_abort(s->dram, f->ref.id);
		/* tier: where a deadline was missed, so a get can go on after it */
		fill_finish(f, rc, rc == -ETIMEDOUT ? cr->pos : KVT_TIER_NONE);
		return;
	}
	f->ref.object_bytes = h->object_bytes;
	f->ref.n_tokens = h->n_tokens;
	/* A hit from a shared tier is also kept on the local tiers above it, so the next miss
	 * in DRAM does not cross the network again. */
	bool local = s->promote_local && cr->pos > s->dram_pos + 1;
	/* A remove that came while this fill read marked it (kvt__e_fill_removed): publishing
	 * now would serve a key the remove reported gone. Checked and published under
	 * fill_lock, so a remove either marks the fill first or finds the slot published and
	 * removes it. The waiters joined before the remove and still get the bytes; the slot
	 * leaves the index and is freed at their last unpin. */
	pthread_mutex_lock(&s->fill_lock);
	bool removed = f->removed;
	/* Published clean even when it is to be written to local tiers (local): a promotion
	 * owes no flush (the tier it came from holds it), and its pins keep it until that job
	 * is done. Published dirty (until 2026-12-06), a flush could take it for a put's
	 * chunk in the moment before its job registered, write it as owed, and a failure of
	 * that write marked it unsaved: -EIO, and its eviction counted as lost (a review). */
	if (!removed)
		kvt__dram_publish(s->dram, f->ref.id, h->object_bytes, h->n_tokens, false);
	pthread_mutex_unlock(&s->fill_lock);
	if (removed) {
		kvt__dram_pin(s->dram, f->ref.id); /* the first waiter's: abort drops the fill's */
		kvt__dram_abort(s->dram, f->ref.id);
		f->ref.discarded = true; /* a prefetch waiting on it: not resident */
		fill_finish(f, 0, cr->pos);
		return;
	}
	if (local) {
		kvt__dram_pin(s->dram, f->ref.id);
		kvt__e_wb_submit(s, &f->key, &f->ref, cr->pos, NULL, NULL, false);
	}
	fill_finish(f, 0, cr->pos);
}

void kvt__e_fill_removed(struct kvt_store *s, const struct kvt_key *key)
{
	pthread_mutex_lock(&s->fill_lock);
	for (struct fill *f = *fill_bucket(s, key); f; f = f->next)
		if (kvt__key_eq(&f->key, key))
			f->removed = true;
	pthread_mutex_unlock(&s->fill_lock);
}

struct deferred_hit {
	kvt_acquire_cb cb;
	void *arg;
	struct kvt_slot_ref ref;
	int tier;
	int rc; /* 0 a hit in DRAM, -ENOENT a miss */
};

static void deferred_hit_run(void *arg)
{
	struct deferred_hit *d = arg;
	d->cb(d->arg, d->rc, d->rc == 0 ? &d->ref : NULL, d->tier);
	kvt__free(d);
}

/* A miss found before any tier was asked answers through cb, as a fill's miss does. */
static int deferred_miss(struct kvt_store *s, kvt_acquire_cb cb, void *arg)
{
	struct deferred_hit *d = kvt__calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	*d = (struct deferred_hit){.cb = cb, .arg = arg, .tier = KVT_TIER_NONE, .rc = -ENOENT};
	int rc = kvt__e_defer(s, deferred_hit_run, d);
	if (rc < 0)
		kvt__free(d);
	return rc;
}

/* Start (or join) the promotion of key. parent: the chunk before it in its chain, where
 * the caller knows it (a prefetch of a prefix), else NULL; DRAM then counts the promoted
 * chunk as its parent's child, as a put's, so the parent is not evicted before it
 * (docs/COST_MODEL.md, "Where the simulated replay and the store differ", 3). Returns 0
 * (cb later) or -errno: -EBUSY the key is being filled by a put right now, -ENOSPC no slot,
 * -ENOENT a remove of the key is still out in a deeper tier (kvt__e_remove_pending). */
static int fill_start(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		      kvt_acquire_cb cb, void *arg, int *cause, bool use)
{
	struct fill_waiter *w = kvt__malloc(sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->cb = cb;
	w->arg = arg;
	w->cause = cause;
	w->use = use;
	w->next = NULL;
	pthread_mutex_lock(&s->fill_lock);
	struct fill **b = fill_bucket(s, key);
	for (struct fill *f = *b; f; f = f->next)
		/* not one a remove overtook: this get may come after the remove */
		if (kvt__key_eq(&f->key, key) && !f->removed) {
			w->next = f->waiters->next; /* the first waiter keeps the fill's pin */
			f->waiters->next = w;
			pthread_mutex_unlock(&s->fill_lock);
			return 0;
		}
	/* A remove of the key still out in a deeper tier: what the tiers hold of it is on its
	 * way out, and promoting it would outlive the remove. Asked under fill_lock: a remove
	 * marks the key before it marks the fills, so a fill it did not mark is refused here. */
	if (kvt__e_remove_pending(s, key)) {
		pthread_mutex_unlock(&s->fill_lock);
		kvt__free(w);
		return -ENOENT;
	}
	struct fill *f = kvt__calloc(1, sizeof(*f));
	if (!f) {
		pthread_mutex_unlock(&s->fill_lock);
		kvt__free(w);
		return -ENOMEM;
	}
	int rc = kvt__dram_alloc(s->dram, key, parent, &f->ref);
	if (rc < 0) {
		pthread_mutex_unlock(&s->fill_lock);
		kvt__free(f);
		kvt__free(w);
		return rc == -EEXIST || rc == -EBUSY ? -EBUSY : rc;
	}
	f->key = *key;
	f->s = s;
	f->waiters = w;
	f->next = *b;
	*b = f;
	pthread_mutex_unlock(&s->fill_lock);
	chain_read_start(&f->cr, s, key, f->ref.buf, true, s->dram_pos + 1, fill_read_done);
	return 0;
}

/* use: the caller reads the chunk now (a device restore, a kvtierd client's GET_PIN), so a
 * DRAM hit is a sighting for admission, as kvt_get's is, and offers a declined chunk again;
 * a prefetch stages it for a get that will count it. */
static int acquire(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		   kvt_acquire_cb cb, void *arg, int *cause, bool use)
{
	if (s->client) return -ENOTSUP;
	if (!s->dram)
		return -ENOTSUP;
	struct kvt_slot_ref ref;
	if (kvt__dram_get(s->dram, key, &ref) == 0) {
		struct deferred_hit *d = kvt__malloc(sizeof(*d));
		if (!d) {
			kvt__dram_unpin(s->dram, ref.id);
			return -ENOMEM;
		}
		d->cb = cb;
		d->arg = arg;
		d->ref = ref;
		d->tier = s->dram_pos;
		d->rc = 0;
		/* Counted once the hit is sure to be answered: an acquire that fails here is
		 * asked again (kvtierd's GET_PIN falls back to a GET, which counts its own hit
		 * and sighting; until 2026-12-05 this one was counted too). The pin held for
		 * that: d's goes to the caller, who may let go of it at once. */
		kvt__dram_pin(s->dram, ref.id);
		int rc = kvt__e_defer(s, deferred_hit_run, d);
		if (rc < 0) {
			kvt__dram_unpin(s->dram, ref.id);
			kvt__dram_unpin(s->dram, ref.id);
			kvt__free(d);
			return rc;
		}
		if (use) { /* a prefetch's get counts its own (as for a miss, below) */
			atomic_fetch_add(&s->links[s->dram_pos].hits, 1);
			kvt__e_admission_record(s, key);
			if (ref.reoffer)
				kvt__e_wb_reoffer(s, key, &ref);
		}
		kvt__dram_unpin(s->dram, ref.id);
		return 0;
	}
	/* A miss is counted where it is answered, as kvt_get counts its own (until 2026-12-06
	 * none was: a device restore's and kvtierd GET_PIN's DRAM hit ratio read 100 %, a
	 * review); a prefetch (!use) counts none, its get will. One that fails to start is
	 * asked again elsewhere (GET_PIN falls back to a GET), which counts it. */
	int rc = fill_start(s, key, parent, cb, arg, cause, use);
	if (rc == -ENOENT) /* a remove of the key is still out */
		rc = deferred_miss(s, cb, arg);
	if (rc == 0 && use)
		atomic_fetch_add(&s->links[s->dram_pos].misses, 1);
	if (rc == -EBUSY) {
		/* A put of this key is being published right now; it is a hit once it lands. */
		if (kvt__dram_get(s->dram, key, &ref) == 0) {
			kvt__dram_unpin(s->dram, ref.id);
			return acquire(s, key, parent, cb, arg, cause, use);
		}
	}
	return rc;
}

int kvt__store_acquire(struct kvt_store *s, const struct kvt_key *key, kvt_acquire_cb cb,
		       void *arg)
{
	return acquire(s, key, NULL, cb, arg, NULL, true);
}

int kvt__store_acquire_cause(struct kvt_store *s, const struct kvt_key *key,
			     const struct kvt_key *parent, kvt_acquire_cb cb, void *arg, int *cause)
{
	return acquire(s, key, parent, cb, arg, cause, true);
}

void kvt__store_release(struct kvt_store *s, const struct kvt_slot_ref *ref)
{
	kvt__dram_unpin(s->dram, ref->id);
}

/* ------------------------------------------------------------ get */

struct get_op {
	struct chain_read cr; /* first: the bounce path is a chain read */
	struct kvt_store *s;
	struct kvt_key key;
	uint32_t l0, l1;
	void *buf;
	size_t len;
	kvt_cb cb;
	void *arg;
	bool direct;
	void *bounce; /* no DRAM slot: the object is read here */
	kvt__get_sink sink; /* instead of copying into buf (kvt__e_do_get_sink) */
	void *sink_arg;
	int cause; /* why the promotion (fill) found nothing, if it failed */
};

/* Hand a verified object's layers to the caller: copied into its buffer, or to its sink
 * (which reads them where they lie: a pinned DRAM slot or the bounce buffer). */
static int64_t get_copy_out(struct get_op *g, const struct kvt_header *h, const void *obj)
{
	if (g->sink)
		return g->sink(g->sink_arg, h, obj);
	return kvt__object_read_layers(h, obj, g->l0, g->l1, g->buf, g->len, g->s->prot);
}

static void get_finish(struct get_op *g, int status, int tier, uint32_t n_tokens, uint64_t bytes)
{
	struct kvt_result res = {.status = status, .tier = tier, .n_tokens = n_tokens,
				 .bytes = bytes};
	if (status == -ENOENT) /* the fill's cause first: a bounce read came after it */
		res.cause = g->cause ? g->cause : g->cr.cause;
	struct kvt_store *s = g->s;
	if (g->bounce && g->cr.buf) /* the chain read may have swapped buffers */
		kvt__e_bounce_put(s, g->cr.buf);
	kvt__e_complete(s, g->cb, g->arg, g->direct, &res);
	kvt__free(g);
}

/* Copy the requested layers out of an object in a DRAM slot. Objects enter DRAM verified
 * (encoded from the caller's bytes, or checked in full on promotion), so only the header
 * is decoded here, not the layer CRCs again. */
static int64_t get_extract(struct get_op *g, const void *obj, struct kvt_header *h)
{
	struct kvt_store *s = g->s;
	struct kvt_expect exp = {.geometry = &s->geo, .ns_id = s->ns_id, .key = &g->key,
				 .max_object_bytes = s->max_object_bytes};
	int rc = kvt__header_decode(obj, h, &exp);
	if (rc < 0)
		return rc;
	return get_copy_out(g, h, obj);
}

/* Selective write policy: a chunk goes deeper once its DRAM copy has been hit
 * selective_hits times (counted in its slot, from 0 for each new copy). Until 2026-12-06
 * the count was a table of 65,536 saturating counters by key hash, never reset: each
 * bucket fired once for the first key to reach the count and never again, so a key
 * sharing it, or the same key put again after a remove or an eviction, was never written
 * deeper, and after enough hits the policy wrote nothing (integ.store_engine). ref is
 * pinned by the caller. */
static void get_selective(struct kvt_store *s, const struct kvt_key *key,
			  const struct kvt_slot_ref *ref)
{
	if (s->write_policy != WP_SELECTIVE || s->n_links <= s->dram_pos + 1 ||
	    kvt__dram_count_hit(s->dram, ref->id) != s->selective_hits)
		return;
	kvt__dram_pin(s->dram, ref->id); /* the write-behind job's own pin */
	kvt__dram_set_dirty(s->dram, ref->id, true);
	kvt__e_wb_submit(s, key, ref, s->n_links, NULL, NULL, false);
}

static int get_bounce_start(struct get_op *g, int from);

static void get_acquired(void *arg, int rc, const struct kvt_slot_ref *ref, int tier)
{
	struct get_op *g = arg;
	struct kvt_store *s = g->s;
	if (rc == -ETIMEDOUT && tier >= 0 && tier + 1 < s->n_links) {
		/* The promotion's tier missed its deadline: read on from the next tier through
		 * a bounce buffer (the fill's slot is the late tier's until it answers). */
		if (get_bounce_start(g, tier + 1) == 0)
			return;
		rc = -ENOMEM;
	}
	if (rc < 0) {
		get_finish(g, rc == -ETIMEDOUT ? -ENOENT : rc, KVT_TIER_NONE, 0, 0);
		return;
	}
	struct kvt_header h;
	int64_t n = get_extract(g, ref->buf, &h);
	kvt__dram_unpin(s->dram, ref->id);
	if (n < 0) {
		get_finish(g, (int)n, KVT_TIER_NONE, 0, 0);
		return;
	}
	get_finish(g, 0, tier, h.n_tokens, (uint64_t)n);
}

static void get_bounce_done(struct chain_read *cr, int rc, const struct kvt_header *h)
{
	struct get_op *g = (struct get_op *)cr; /* cr is the op's first member */
	if (rc < 0) {
		get_finish(g, rc, KVT_TIER_NONE, 0, 0);
		return;
	}
	kvt__e_admission_record(g->s, &g->key); /* a use, as a DRAM hit or a promotion is */
	/* Verified in full by the chain read: copy without checking again. */
	int64_t n = get_copy_out(g, h, cr->buf);
	if (n < 0)
		get_finish(g, (int)n, KVT_TIER_NONE, 0, 0);
	else
		get_finish(g, 0, cr->pos, h->n_tokens, (uint64_t)n);
}

static int get_bounce_start(struct get_op *g, int from)
{
	g->bounce = kvt__e_bounce_get(g->s);
	if (!g->bounce)
		return -ENOMEM;
	chain_read_start(&g->cr, g->s, &g->key, g->bounce, false, from, get_bounce_done);
	return 0;
}

static int do_get(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		  uint32_t l0, uint32_t l1, void *buf, size_t len, kvt__get_sink sink,
		  void *sink_arg, kvt_cb cb, void *arg, bool direct);

int kvt__e_do_get(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		  uint32_t l0, uint32_t l1, void *buf, size_t len, kvt_cb cb, void *arg,
		  bool direct)
{
	if (!s || !key || !buf || !cb)
		return -EINVAL;
	if (l1 == 0)
		l1 = s->geo.layers;
	if (l0 >= l1 || l1 > s->geo.layers)
		return -EINVAL;
	if (len < (uint64_t)(l1 - l0) * kvt_layer_bytes(&s->geo, 1))
		return -EINVAL;
	return do_get(s, key, parent, l0, l1, buf, len, NULL, NULL, cb, arg, direct);
}

int kvt__e_do_get_sink(struct kvt_store *s, const struct kvt_key *key,
		       const struct kvt_key *parent, kvt__get_sink sink, void *sink_arg, kvt_cb cb,
		       void *arg, bool direct)
{
	if (!s || !key || !sink || !cb || s->prot)
		return -EINVAL;
	return do_get(s, key, parent, 0, s->geo.layers, NULL, 0, sink, sink_arg, cb, arg, direct);
}

/* parent (a storage key, or NULL): the chunk before key in its chain, where the caller knows
 * it (a rows load names a chain); a promotion links key to it in DRAM, as a put does. */
static int do_get(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		  uint32_t l0, uint32_t l1, void *buf, size_t len, kvt__get_sink sink,
		  void *sink_arg, kvt_cb cb, void *arg, bool direct)
{
	int arc = kvt__e_admit_inflight(s);
	if (arc < 0)
		return arc;
	atomic_fetch_add(&s->gets, 1);
	struct get_op *g = kvt__calloc(1, sizeof(*g));
	if (!g) {
		kvt__e_unadmit(s);
		return -ENOMEM;
	}
	g->s = s;
	g->key = *key;
	g->l0 = l0;
	g->l1 = l1;
	g->buf = buf;
	g->len = len;
	g->cb = cb;
	g->arg = arg;
	g->direct = direct;
	g->sink = sink;
	g->sink_arg = sink_arg;

	if (s->dram) {
		struct kvt_slot_ref ref;
		if (kvt__dram_get(s->dram, key, &ref) == 0) {
			/* Objects enter DRAM verified (encoded from the caller's bytes, or checked
			 * on promotion), so a DRAM hit checks the header only. */
			struct kvt_header h;
			int64_t n = get_extract(g, ref.buf, &h);
			atomic_fetch_add(&s->links[s->dram_pos].hits, 1);
			kvt__e_admission_record(s, key);
			if (ref.reoffer)
				kvt__e_wb_reoffer(s, key, &ref);
			get_selective(s, key, &ref);
			kvt__dram_unpin(s->dram, ref.id);
			if (n < 0)
				get_finish(g, (int)n, KVT_TIER_NONE, 0, 0);
			else
				get_finish(g, 0, s->dram_pos, h.n_tokens, (uint64_t)n);
			return 0;
		}
		atomic_fetch_add(&s->links[s->dram_pos].misses, 1);
		if (s->n_links == s->dram_pos + 1) {
			get_finish(g, -ENOENT, KVT_TIER_NONE, 0, 0);
			return 0;
		}
		if (s->promote) {
			int rc = fill_start(s, key, parent, get_acquired, g, &g->cause, true);
			if (rc == 0)
				return 0;
			/* No slot to promote into (or a put of the key is landing, or a promotion
			 * a remove overtook is still reading): read through a bounce buffer. */
		}
	}
	/* A remove of the key still out in a deeper tier (not answered yet, in time or late)
	 * and no put since: what the tiers hold of it is on its way out, a miss. */
	if (kvt__e_remove_pending(s, key)) {
		get_finish(g, -ENOENT, KVT_TIER_NONE, 0, 0);
		return 0;
	}
	int rc = get_bounce_start(g, s->dram_pos + 1);
	if (rc < 0) {
		kvt__free(g);
		kvt__e_unadmit(s);
	}
	return rc;
}

int kvt_get_linked(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		   uint32_t layer_begin, uint32_t layer_end, void *buf, size_t len, kvt_cb cb,
		   void *arg)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	struct kvt_key sk, sp;
	rc = s->client ? kvt__client_get(s->client, key, parent, layer_begin, layer_end, buf, len,
					 cb, arg)
		       : kvt__e_do_get(s, kvt__e_skey(s, key, &sk),
				       parent ? kvt__e_skey(s, parent, &sp) : NULL, layer_begin,
				       layer_end, buf, len, cb, arg, false);
	kvt__store_leave(s);
	return rc;
}

int kvt_get(struct kvt_store *s, const struct kvt_key *key, uint32_t layer_begin,
	    uint32_t layer_end, void *buf, size_t len, kvt_cb cb, void *arg)
{
	return kvt_get_linked(s, key, NULL, layer_begin, layer_end, buf, len, cb, arg);
}

/* ------------------------------------------------------------ prefetch */

/* A prefetch keeps every chunk of the prefix it finds or stages in DRAM pinned until it
 * answers, so that its status counts chunks resident when it answers and its own fills
 * cannot evict them: until 2026-12-06 it counted the chunks found resident without holding
 * them, and the fills of the chain's tail evicted its head to make room (a pool of 7 slots
 * holding a 12-chunk chain's first 5: status 12, the 7 resident the tail's; a review).
 * It holds at most three quarters of the pool (prefetch_looked_up): a chain longer than
 * that stages its head. */
struct prefetch_op {
	struct kvt_store *s;
	struct kvt_key *keys;
	size_t n;
	uint64_t deadline;
	_Atomic size_t remaining;
	_Atomic size_t resident; /* pinned[0..resident) */
	int32_t *pinned;
	kvt_cb cb;
	void *arg;
	bool direct;
};

static void prefetch_free(struct prefetch_op *p)
{
	kvt__free(p->pinned);
	kvt__free(p->keys);
	kvt__free(p);
}

static void prefetch_finish(struct prefetch_op *p)
{
	size_t n = atomic_load(&p->resident);
	struct kvt_result res = {.status = (int)n, .tier = KVT_TIER_NONE};
	struct kvt_store *s = p->s;
	for (size_t i = 0; i < n; i++)
		kvt__dram_unpin(s->dram, p->pinned[i]);
	kvt_cb cb = p->cb;
	void *arg = p->arg;
	bool direct = p->direct;
	prefetch_free(p);
	kvt__e_complete(s, cb, arg, direct, &res);
}

static void prefetch_one_done(void *arg, int rc, const struct kvt_slot_ref *ref, int tier)
{
	struct prefetch_op *p = arg;
	if (rc == 0) {
		/* A fill a remove overtook hands its bytes to the gets that joined it before the
		 * remove, but never enters DRAM: not resident (it was counted so until
		 * 2026-12-03; integ.store_fill_races section 4). */
		if (!ref->discarded)
			p->pinned[atomic_fetch_add(&p->resident, 1)] = ref->id; /* its pin kept */
		else
			kvt__dram_unpin(p->s->dram, ref->id);
	}
	if (atomic_fetch_sub(&p->remaining, 1) == 1)
		prefetch_finish(p);
}

static void prefetch_looked_up(void *arg, const struct kvt_result *res)
{
	struct prefetch_op *p = arg;
	struct kvt_store *s = p->s;
	size_t prefix = res->status > 0 ? (size_t)res->status : 0;
	atomic_store(&p->remaining, 1);
	bool late = false;
	/* What it holds is bounded: at most three quarters of the pool (at least one slot), so
	 * that puts and gets meanwhile still find room (a chain longer than that stages its
	 * head, and what was resident of it stays counted). */
	uint32_t slots = kvt__dram_slots(s->dram);
	size_t cap = KVT_MAX(1u, slots - KVT_MAX(1u, slots / 4)), held = 0;
	for (size_t i = 0; i < prefix; i++) {
		int32_t id = kvt__dram_pin_resident(s->dram, &p->keys[i]);
		if (id >= 0) {
			p->pinned[atomic_fetch_add(&p->resident, 1)] = id;
			held++;
			continue;
		}
		/* not started by the deadline: dropped (the rest already resident still counts:
		 * until 2026-12-06 the walk stopped there) */
		if (late || held >= cap || (p->deadline && kvt__now_ns() >= p->deadline)) {
			late = true;
			continue;
		}
		held++;
		atomic_fetch_add(&p->remaining, 1);
		/* keys is a chain: the one before is the parent */
		if (acquire(s, &p->keys[i], i ? &p->keys[i - 1] : NULL, prefetch_one_done, p, NULL,
			    false) < 0)
			atomic_fetch_sub(&p->remaining, 1);
	}
	if (atomic_fetch_sub(&p->remaining, 1) == 1)
		prefetch_finish(p);
}

int kvt__e_do_prefetch(struct kvt_store *s, const struct kvt_key *keys, size_t n,
		       uint64_t deadline_ns, kvt_cb cb, void *arg, bool direct)
{
	if (!s || (!keys && n) || !cb)
		return -EINVAL;
	if (!s->dram)
		return -ENOTSUP;
	struct prefetch_op *p = kvt__calloc(1, sizeof(*p));
	if (!p || !(p->keys = kvt__malloc((n ? n : 1) * sizeof(*keys))) ||
	    !(p->pinned = kvt__malloc((n ? n : 1) * sizeof(*p->pinned)))) {
		if (p)
			kvt__free(p->keys);
		kvt__free(p);
		return -ENOMEM;
	}
	if (n)
		memcpy(p->keys, keys, n * sizeof(*keys));
	p->s = s;
	p->n = n;
	p->deadline = deadline_ns;
	p->cb = cb;
	p->arg = arg;
	p->direct = direct;
	int arc = kvt__e_admit_inflight(s);
	if (arc < 0) {
		prefetch_free(p);
		return arc;
	}
	atomic_fetch_add(&s->prefetches, 1);
	/* The lookup's completion continues the prefetch on the completing thread. */
	int rc = kvt__e_do_lookup_inner(s, p->keys, n, prefetch_looked_up, p);
	if (rc < 0) {
		kvt__e_unadmit(s);
		prefetch_free(p);
	}
	return rc;
}

int kvt_prefetch(struct kvt_store *s, const struct kvt_key *keys, size_t n, uint64_t deadline_ns,
		 kvt_cb cb, void *arg)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	if (s->client) {
		rc = kvt__client_prefetch(s->client, keys, n, deadline_ns, cb, arg);
	} else {
		struct kvt_storage_keys b;
		rc = kvt__e_skeys(s, &b, keys, n);
		rc = rc ? rc : kvt__e_do_prefetch(s, b.keys, n, deadline_ns, cb, arg, false);
		kvt__storage_keys_free(&b);
	}
	kvt__store_leave(s);
	return rc;
}
