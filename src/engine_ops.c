/*
 * engine_ops.c - the calls that are not reads: kvt_put (one pass from the caller's buffer
 * into a DRAM slot, copy and CRC together, then write-behind per the write policy), the
 * device layer's reserve/commit of a slot it fills itself, kvt_lookup (DRAM first, then
 * one batched exists per deeper tier, only for keys no faster tier has), and kvt_remove
 * (ordered after any write-behind of the key still out).
 */
#include "engine_internal.h"

/* ------------------------------------------------------------ put */

struct put_ctx {
	kvt_cb cb;
	void *arg;
	bool direct;
};

/* Zero-copy put: without a DRAM tier the copy into a staging buffer is the put's main
 * cost, and on a machine whose disk is a host process it slows the disk itself
 * (docs/BENCHMARKS.md, "The guest's own copying slows this disk"). It applies when the
 * object's payload follows its header verbatim, objects are not protected (a MAC or
 * encryption rewrites the bytes), every deeper tier writes split objects (s->zero_copy,
 * set at open), and the caller's buffer is aligned enough:
 *  - an object under 512 KiB: on a KVT_ALIGN (4 KiB) boundary, as O_DIRECT needs. Its
 *    payload spans at most 128 pages, well under the 254 segments a device request
 *    holds, so it reaches the device as one request whichever pages hold it. Until
 *    2026-12-07 these were copied ("a small one costs little to copy"): at 64 KiB the copy
 *    was 45 % of the submitting thread, which it saturated (docs/BENCHMARKS.md, "64 KiB
 *    puts without the copy").
 *  - a larger one: on a 2 MiB boundary, as huge-page allocations are (kvt__huge_alloc,
 *    aligned_alloc(2 MiB, ...)): from 4 KiB pages a request holds at most 254 separate
 *    pages, so the disk gets small requests (on the build VM ~0.5 MiB, 2.5 GiB/s against
 *    4.2 with the copy into the staging buffer, which is on huge pages). */
#define ZERO_COPY_SMALL_BYTES (512u << 10)
#define ZERO_COPY_BUF_ALIGN (2u << 20)

static bool zero_copy(const struct kvt_store *s, uint32_t n_tokens, const void *buf,
		      uint64_t obj_bytes)
{
	if (!s->zero_copy || !kvt__object_contiguous(&s->geo, n_tokens))
		return false;
	uintptr_t align = obj_bytes < ZERO_COPY_SMALL_BYTES ? KVT_ALIGN : ZERO_COPY_BUF_ALIGN;
	return (uintptr_t)buf % align == 0;
}

uint64_t kvt__store_zero_copy_puts(const struct kvt_store *s)
{
	return atomic_load(&s->zero_copy_puts);
}

/* A put the caller will not retry: counted, and a sighting of the chunk for admission. */
static void count_put(struct kvt_store *s, const struct kvt_key *key)
{
	atomic_fetch_add(&s->puts, 1);
	kvt__e_admission_record(s, key);
}

/* A put of a chunk DRAM holds: counted, and a sighting - a chunk admission declined is
 * offered again, as on a hit (the replay offers a block it sees in DRAM whether it was a
 * hit or not). kvt_put's path and the reservations' (kvtierd's PUT_RESERVE, a device
 * store: until 2026-12-05 those counted neither). */
static void put_resident(struct kvt_store *s, const struct kvt_key *key)
{
	count_put(s, key);
	struct kvt_slot_ref held;
	if (s->n_links > s->dram_pos + 1 && kvt__dram_pin_reoffer(s->dram, key, &held) == 0) {
		kvt__e_wb_reoffer(s, key, &held);
		kvt__dram_unpin(s->dram, held.id);
	}
}

int kvt__e_do_put(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		  uint32_t n_tokens, const void *buf, size_t len, kvt_cb cb, void *arg,
		  bool direct)
{
	if (!s || !key || !buf || !cb)
		return -EINVAL;
	if (n_tokens == 0 || n_tokens > s->geo.chunk_tokens ||
	    len != kvt_payload_bytes(&s->geo, n_tokens))
		return -EINVAL;
	int arc = kvt__e_admit_inflight(s);
	if (arc < 0)
		return arc;
	uint64_t obj_bytes = kvt_object_bytes(&s->geo, n_tokens);
	bool deeper = s->n_links > s->dram_pos + 1;
	/* A put told to retry (-EAGAIN) is not counted (puts, admission's sightings): its retry
	 * is the same put, not a second request for the chunk. */
	if (s->dram && kvt__store_backlogged(s, obj_bytes)) {
		kvt__e_unadmit(s);
		return -EAGAIN; /* a deeper tier has as much to write as its deadline allows */
	}
	struct kvt_result res = {.status = 0, .tier = KVT_TIER_NONE, .n_tokens = n_tokens,
				 .bytes = len};

	if (!s->dram) {
		count_put(s, key);
		struct kvt_slot_ref ref = {.id = -1, .object_bytes = obj_bytes, .n_tokens = n_tokens,
					   .has_parent = parent != NULL};
		if (parent)
			ref.parent = *parent;
		ref.buf = kvt__e_bounce_get(s);
		if (!ref.buf) {
			kvt__e_unadmit(s);
			return -ENOMEM;
		}
		uint32_t crc;
		if (zero_copy(s, n_tokens, buf, obj_bytes) &&
		    kvt__object_header(ref.buf, &s->geo, s->ns_id, key, n_tokens, buf, len) == 0 &&
		    kvt__object_crc(ref.buf, &crc) == 0) {
			/* Only the header is built (neither call fails on what zero_copy() lets
			 * through; if one did, the encode below builds the whole object instead),
			 * with the whole object's CRC from it, for the tiers that record one; they
			 * write the payload from buf, which the caller keeps unchanged until the
			 * callback (kvt_put's contract). */
			struct wb *w = kvt__e_wb_register(s, key, &ref, buf, len, cb, arg, direct);
			if (w) {
				w->obj_crc = crc;
				atomic_fetch_add(&s->zero_copy_puts, 1);
				kvt__e_wb_start(w, s->n_links);
			}
			return 0;
		}
		int erc = kvt__object_encode(ref.buf, obj_bytes, &s->geo, s->ns_id, key, n_tokens,
					     buf, len);
		if (erc == 0)
			erc = kvt__object_protect(ref.buf, obj_bytes, s->prot); /* MAC, encryption */
		if (erc < 0) { /* never written: it would carry the flag of what failed */
			kvt__e_bounce_put(s, ref.buf);
			kvt__e_unadmit(s);
			return erc;
		}
		kvt__e_wb_submit(s, key, &ref, s->n_links, cb, arg, direct);
		return 0;
	}

	struct kvt_slot_ref ref;
	/* Loaded before the alloc: a job lets go of its slot before it stops counting in
	 * wb_holds (wb_unref), so one counted here that ends after the alloc failed has freed
	 * a slot, and the caller's retry finds it. Loaded only after a failed alloc, the last
	 * job could end in between: -ENOSPC with a slot free (store_engine under TSan,
	 * write-through with 7 slots, once in CI). */
	uint64_t holds = atomic_load(&s->wb_holds);
	int rc = kvt__dram_alloc(s->dram, key, parent, &ref);
	if (rc == -EEXIST) { /* same content already stored: a put is idempotent */
		put_resident(s, key);
		kvt__e_complete(s, cb, arg, direct, &res);
		return 0;
	}
	if (rc == -EBUSY) {
		/* A get is filling the key's slot from a deeper tier: nothing is stored yet,
		 * and the fill may yet find nothing. Told to retry, not "already stored" (that
		 * acknowledged a put that was then nowhere). */
		kvt__e_unadmit(s);
		return -EAGAIN;
	}
	if (rc < 0) {
		kvt__e_unadmit(s);
		if (rc != -ENOSPC) {
			count_put(s, key);
			return rc;
		}
		/* Every slot is pinned or dirty. If write-behind is under way, slots come free
		 * soon: tell the caller to retry. A job that has completed still pins its slot
		 * until the tiers let go of the bytes, so the count that matters is wb_holds,
		 * not wb_pending (a put in that window once got -ENOSPC: store_engine under
		 * ASan, write-back with 7 slots). */
		if (s->write_policy == WP_BACK)
			kvt__e_writeback_clean(s);
		if (holds > 0 || atomic_load(&s->wb_holds) > 0)
			return -EAGAIN;
		count_put(s, key);
		return -ENOSPC;
	}
	count_put(s, key);
	rc = kvt__object_encode(ref.buf, obj_bytes, &s->geo, s->ns_id, key, n_tokens, buf, len);
	if (rc == 0)
		rc = kvt__object_protect(ref.buf, obj_bytes, s->prot); /* MAC, encryption */
	if (rc < 0) {
		kvt__dram_abort(s->dram, ref.id);
		kvt__e_unadmit(s);
		return rc;
	}
	bool write_now = deeper && s->write_policy == WP_THROUGH;
	bool dirty = deeper && (s->write_policy == WP_THROUGH || s->write_policy == WP_BACK);
	kvt__dram_publish_put(s->dram, ref.id, obj_bytes, n_tokens, dirty);
	ref.object_bytes = obj_bytes;
	ref.n_tokens = n_tokens;
	/* The job joins the write-behind list before the put is acknowledged: a remove the
	 * caller sends from its callback must find it (and cancel or undo its write), not
	 * run first and have the job write the key back afterwards. */
	struct wb *w = write_now ? kvt__e_wb_register(s, key, &ref, NULL, 0, NULL, NULL, false) : NULL;
	kvt__e_complete(s, cb, arg, direct, &res);
	if (w)
		kvt__e_wb_start(w, s->n_links);
	else if (!write_now)
		kvt__dram_unpin(s->dram, ref.id);
	if (deeper && s->write_policy == WP_BACK)
		kvt__e_writeback_clean(s);
	return 0;
}

int kvt_put(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
	    uint32_t n_tokens, const void *buf, size_t len, kvt_cb cb, void *arg)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	struct kvt_key sk, sp;
	rc = s->client ? kvt__client_put(s->client, key, parent, n_tokens, buf, len, cb, arg)
		       : kvt__e_do_put(s, kvt__e_skey(s, key, &sk), kvt__e_skey(s, parent, &sp),
				       n_tokens, buf, len, cb, arg, false);
	kvt__store_leave(s);
	return rc;
}

static int reserve(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		   uint32_t n_tokens, struct kvt_slot_ref *ref, bool count_resident);

int kvt__store_reserve(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		       uint32_t n_tokens, struct kvt_slot_ref *ref)
{
	return reserve(s, key, parent, n_tokens, ref, true);
}

int kvt__store_reserve_part(struct kvt_store *s, const struct kvt_key *key,
			    const struct kvt_key *parent, uint32_t n_tokens,
			    struct kvt_slot_ref *ref)
{
	return reserve(s, key, parent, n_tokens, ref, false);
}

void kvt__store_put_resident(struct kvt_store *s, const struct kvt_key *key)
{
	put_resident(s, key);
}

static int reserve(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		   uint32_t n_tokens, struct kvt_slot_ref *ref, bool count_resident)
{
	if (s->client) return -ENOTSUP;
	if (!s->dram)
		return -ENOTSUP;
	if (n_tokens == 0 || n_tokens > s->geo.chunk_tokens)
		return -EINVAL;
	/* reserved, not allocated: a remove of the key before the commit holds (it takes the
	 * slot out of the index, and the commit drops it) */
	int rc = kvt__dram_reserve(s->dram, key, parent, ref);
	if (rc == -EEXIST && count_resident)
		put_resident(s, key);
	if (rc < 0)
		return rc == -EBUSY ? -EAGAIN : rc; /* being filled: not stored yet, retry */
	ref->n_tokens = n_tokens;
	ref->object_bytes = kvt_object_bytes(&s->geo, n_tokens);
	return 0;
}

bool kvt__store_reserve_removed(struct kvt_store *s, const struct kvt_slot_ref *ref)
{
	return kvt__dram_reserve_removed(s->dram, ref->id);
}

bool kvt__store_backlogged(struct kvt_store *s, uint64_t bytes)
{
	return !s->client && s->write_policy == WP_THROUGH && kvt__e_wb_backlogged(s, bytes);
}

int kvt__store_commit(struct kvt_store *s, struct kvt_slot_ref *ref)
{
	struct kvt_key key;
	kvt__dram_key(s->dram, ref->id, &key);
	int rc = kvt__object_seal(ref->buf, ref->object_bytes, &s->geo, s->ns_id, &key,
				  ref->n_tokens);
	if (rc == 0)
		rc = kvt__object_protect(ref->buf, ref->object_bytes, s->prot);
	if (rc < 0) {
		kvt__dram_abort(s->dram, ref->id);
		return rc;
	}
	return kvt__store_commit_sealed(s, ref);
}

int kvt__store_commit_sealed(struct kvt_store *s, struct kvt_slot_ref *ref)
{
	struct kvt_key key;
	kvt__dram_key(s->dram, ref->id, &key);
	bool deeper = s->n_links > s->dram_pos + 1;
	bool dirty = deeper && (s->write_policy == WP_THROUGH || s->write_policy == WP_BACK);
	if (!kvt__dram_publish_put(s->dram, ref->id, ref->object_bytes, ref->n_tokens, dirty)) {
		/* A kvt_remove of the key came after the reserve (a device store's copy was
		 * still running): the remove holds, so nothing is published or written behind.
		 * The put did complete, before the remove; nothing was stored, so it is not
		 * counted as a put: KVT__COMMIT_DROPPED. */
		kvt__dram_unpin(s->dram, ref->id);
		return KVT__COMMIT_DROPPED;
	}
	atomic_fetch_add(&s->puts, 1);
	kvt__e_admission_record(s, &key); /* a put for admission's frequency, as kvt_put */
	if (deeper && s->write_policy == WP_THROUGH)
		kvt__e_wb_submit(s, &key, ref, s->n_links, NULL, NULL, false);
	else
		kvt__dram_unpin(s->dram, ref->id);
	if (deeper && s->write_policy == WP_BACK)
		kvt__e_writeback_clean(s);
	return 0;
}

void kvt__store_cancel(struct kvt_store *s, struct kvt_slot_ref *ref)
{
	kvt__dram_abort(s->dram, ref->id);
}

void kvt__store_cancel_keep(struct kvt_store *s, struct kvt_slot_ref *ref)
{
	/* One more pin, then the abort: the key leaves the index (a put of it may reserve
	 * again), the slot stays pinned as removed and is freed by kvt__store_release. */
	kvt__dram_pin(s->dram, ref->id);
	kvt__dram_abort(s->dram, ref->id);
}

/* ------------------------------------------------------------ lookup */

struct lookup_op {
	struct kvt_store *s;
	size_t n;
	struct kvt_key *keys; /* copy */
	int8_t *tiers;        /* internal result */
	int8_t *out;          /* caller's array, may be NULL */
	/* the batch asked of the current tier */
	struct kvt_key *ask;
	uint32_t *ask_idx;
	uint8_t *present;
	uint32_t n_ask;
	int pos;
	int cause; /* the first tier that failed, was late or was skipped (kvt_result.cause) */
	kvt_cb cb;
	void *arg;
	bool direct;
	bool inner; /* a prefetch's own: not admitted, cb called as it ends (do_lookup) */
};

static size_t lookup_prefix(const struct lookup_op *o)
{
	size_t p = 0;
	while (p < o->n && o->tiers[p] != KVT_TIER_NONE)
		p++;
	return p;
}

static void lookup_finish(struct lookup_op *o)
{
	struct kvt_store *s = o->s;
	size_t p = lookup_prefix(o);
	if (o->out)
		for (size_t i = 0; i < o->n; i++)
			o->out[i] = i < p ? o->tiers[i] : KVT_TIER_NONE;
	atomic_fetch_add(&s->lookup_chunks, o->n);
	atomic_fetch_add(&s->lookup_hit_chunks, p);
	/* a tier that could not answer may hold key p: the miss there is not known absent */
	struct kvt_result res = {.status = (int)p, .tier = KVT_TIER_NONE,
				 .cause = p < o->n ? o->cause : 0};
	kvt_cb cb = o->cb;
	void *arg = o->arg;
	bool direct = o->direct, inner = o->inner;
	kvt__free(o->keys);
	kvt__free(o->tiers);
	kvt__free(o->ask);
	kvt__free(o->ask_idx);
	kvt__free(o->present);
	kvt__free(o);
	if (inner)
		cb(arg, &res);
	else
		kvt__e_complete(s, cb, arg, direct, &res);
}

static void lookup_next(struct lookup_op *o);
static void lookup_expire(struct guard *g);

/* A tier that could not say (failed, late, skipped): the first such is the cause. */
static void lookup_note(struct lookup_op *o, int rc)
{
	if (rc < 0 && rc != -ENOENT && !o->cause)
		o->cause = rc;
}

/* What the tier answered (rc < 0: it holds none of them, as far as this lookup knows). A
 * key whose remove is still out in a deeper tier is not there: a get would miss it. Asked
 * again here (a key whose remove was out when the tier was asked was not asked): a remove
 * that came since the tier was asked may have reached it after it answered. */
static void lookup_answer(struct lookup_op *o, int rc)
{
	lookup_note(o, rc);
	if (rc >= 0)
		for (uint32_t i = 0; i < o->n_ask; i++)
			if (o->present[i] && !kvt__e_remove_pending(o->s, &o->ask[i]))
				o->tiers[o->ask_idx[i]] = (int8_t)o->pos;
	o->pos++;
	lookup_next(o);
}

static void lookup_done(void *arg, int64_t rc)
{
	struct lookup_op *o = arg;
	kvt__e_link_result(o->s, &o->s->links[o->pos], rc < 0 ? (int)rc : 0);
	lookup_answer(o, rc < 0 ? (int)rc : 0);
}

static void lookup_next(struct lookup_op *o)
{
	struct kvt_store *s = o->s;
	for (; o->pos < s->n_links; o->pos++) {
		struct link *l = &s->links[o->pos];
		/* Ask about unresolved keys from the first unresolved one on; not about one whose
		 * remove is still out in a deeper tier, as a get issued now would not read it: the
		 * tier may answer what it held before the remove reached it, and only after the
		 * remove is done, when the answer can no longer tell (kvt__e_remove_pending). */
		size_t first = lookup_prefix(o);
		if (first == o->n)
			break;
		if (!l->t)
			continue;
		o->n_ask = 0;
		for (size_t i = first; i < o->n; i++)
			if (o->tiers[i] == KVT_TIER_NONE && !kvt__e_remove_pending(s, &o->keys[i])) {
				o->ask[o->n_ask] = o->keys[i];
				o->ask_idx[o->n_ask++] = (uint32_t)i;
			}
		if (!o->n_ask)
			continue;
		/* After the list: usable() may hand out the half-open circuit's one probe, which
		 * only a call's answer (or link_unused) gives back. Taken for an empty list and
		 * never given back (until 2026-12-05), it kept the tier skipped until restart. */
		if (!kvt__e_link_usable(l)) { /* its circuit is open: skipped, and that is a cause */
			lookup_note(o, -EAGAIN);
			continue;
		}
		struct guard *g = kvt__e_guard_new(s, l, "lookup", (uint64_t)o->n_ask * KVT_KEY_BYTES, o,
					    lookup_done, lookup_expire);
		if (!g) {
			kvt__e_link_unused(l);
			lookup_note(o, -ENOMEM);
			continue;
		}
		int rc = l->t->ops->exists(l->t, o->ask, o->n_ask, o->present, kvt__e_guard_cb, g);
		if (rc == 0) {
			kvt__e_guard_arm(g);
			return;
		}
		kvt__e_guard_cancel(g);
		kvt__e_link_result(s, l, rc);
		lookup_note(o, rc);
	}
	lookup_finish(o);
}

/* The tier is too slow: it counts as holding none of the keys. It may still read ask[]
 * and write present[], so those go to the guard and the lookup goes on with new ones. */
static void lookup_expire(struct guard *g)
{
	struct lookup_op *o = g->op;
	size_t m = o->n ? o->n : 1;
	g->orphan_mem[0] = o->ask;
	g->orphan_mem[1] = o->present;
	o->ask = kvt__malloc(m * sizeof(*o->ask));
	o->present = kvt__calloc(m, 1);
	if (!o->ask || !o->present) {
		lookup_note(o, -ETIMEDOUT); /* this tier did not say */
		lookup_finish(o);           /* what faster tiers found */
		return;
	}
	lookup_answer(o, -ETIMEDOUT);
}

/* inner: the lookup of a prefetch, which holds the in-flight place for both (until
 * 2026-12-06 the lookup took a second one: at store.max_inflight=1 every prefetch was
 * -EAGAIN, and near the bound prefetches were refused after taking the last place). */
static int do_lookup(struct kvt_store *s, const struct kvt_key *keys, size_t n, int8_t *tiers,
		     kvt_cb cb, void *arg, bool direct, bool inner)
{
	if (!s || (!keys && n) || !cb || n > (1u << 24))
		return -EINVAL;
	int arc = inner ? 0 : kvt__e_admit_inflight(s);
	if (arc < 0)
		return arc;
	atomic_fetch_add(&s->lookups, 1);
	struct lookup_op *o = kvt__calloc(1, sizeof(*o));
	size_t m = n ? n : 1;
	if (!o || !(o->keys = kvt__malloc(m * sizeof(*keys))) || !(o->tiers = kvt__malloc(m)) ||
	    !(o->ask = kvt__malloc(m * sizeof(*keys))) ||
	    !(o->ask_idx = kvt__malloc(m * sizeof(uint32_t))) || !(o->present = kvt__calloc(m, 1))) {
		if (o) {
			kvt__free(o->keys);
			kvt__free(o->tiers);
			kvt__free(o->ask);
			kvt__free(o->ask_idx);
			kvt__free(o);
		}
		if (!inner)
			kvt__e_unadmit(s);
		return -ENOMEM;
	}
	o->s = s;
	o->n = n;
	o->inner = inner;
	if (n)
		memcpy(o->keys, keys, n * sizeof(*keys));
	memset(o->tiers, KVT_TIER_NONE, m);
	o->out = tiers;
	o->cb = cb;
	o->arg = arg;
	o->direct = direct;
	size_t i = 0;
	if (s->dram)
		for (; i < n && kvt__dram_contains(s->dram, &keys[i], true); i++)
			o->tiers[i] = (int8_t)s->dram_pos;
	/* Keys past the DRAM prefix may still be in DRAM; mark them so deeper tiers are
	 * asked only about what DRAM lacks. */
	if (s->dram)
		for (size_t j = i; j < n; j++)
			if (kvt__dram_contains(s->dram, &keys[j], false))
				o->tiers[j] = (int8_t)s->dram_pos;
	o->pos = s->dram_pos + 1;
	lookup_next(o);
	return 0;
}

int kvt__e_do_lookup(struct kvt_store *s, const struct kvt_key *keys, size_t n, int8_t *tiers,
		     kvt_cb cb, void *arg, bool direct)
{
	return do_lookup(s, keys, n, tiers, cb, arg, direct, false);
}

int kvt__e_do_lookup_inner(struct kvt_store *s, const struct kvt_key *keys, size_t n,
			   kvt_cb cb, void *arg)
{
	return do_lookup(s, keys, n, NULL, cb, arg, true, true);
}

int kvt_lookup(struct kvt_store *s, const struct kvt_key *keys, size_t n, int8_t *tiers,
	       kvt_cb cb, void *arg)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	if (s->client) {
		rc = kvt__client_lookup(s->client, keys, n, tiers, cb, arg);
	} else {
		struct kvt_storage_keys b;
		rc = kvt__e_skeys(s, &b, keys, n);
		rc = rc ? rc : kvt__e_do_lookup(s, b.keys, n, tiers, cb, arg, false);
		kvt__storage_keys_free(&b);
	}
	kvt__store_leave(s);
	return rc;
}

/* ------------------------------------------------------------ remove */

/* A remove runs after every write-behind of its key that was out when it came: otherwise
 * the write could land after it and the key reappear in a deeper tier. A write that
 * missed its deadline and lands later still is removed again when it answers
 * (wb_leg_orphan, engine_keyorder.c). A remove that waited, and that a put of the key
 * followed meanwhile, leaves the deeper tiers alone: that put's copy is there to stay.
 *
 * DRAM lets the key go before kvt_remove returns; the deeper tiers answer later. Until
 * each has (a late answer included), the key's record counts the remove (removing), and a
 * get, promotion or lookup of the key that no put followed takes a deeper tier's copy for
 * a miss (kvt__e_remove_pending): else a read sent after kvt_remove returned could find
 * the key on a tier the remove has not reached yet and promote it back into DRAM, where
 * it outlived the remove. A miss, not a wait: no read waits on a remove's deadline. */

struct remove_leg {
	struct remove_op *o;
	struct link *l;
};

/* One count of the key's remove is over (the remove, or a late call of it, answered). */
static void remove_unmark(struct kvt_store *s, struct keyrec *rec)
{
	pthread_mutex_lock(&s->wb_lock);
	rec->removing--;
	kvt__e_keyrec_put(s, rec);
	pthread_mutex_unlock(&s->wb_lock);
	atomic_fetch_sub(&s->removes_out, 1);
}

bool kvt__e_remove_pending(struct kvt_store *s, const struct kvt_key *key)
{
	if (!atomic_load(&s->removes_out) && !atomic_load(&s->late_writes))
		return false;
	pthread_mutex_lock(&s->wb_lock);
	bool pending = kvt__e_keyrec_removing(kvt__e_keyrec_find(s, key));
	pthread_mutex_unlock(&s->wb_lock);
	return pending;
}

static void remove_release(struct remove_op *o)
{
	if (atomic_fetch_sub(&o->remaining, 1) != 1)
		return;
	struct kvt_result res = {.status = atomic_load(&o->removed), .tier = KVT_TIER_NONE};
	struct kvt_store *s = o->s;
	kvt_cb cb = o->cb;
	void *arg = o->arg;
	bool direct = o->direct;
	remove_unmark(s, o->rec);
	kvt__free(o);
	kvt__e_complete(s, cb, arg, direct, &res);
}

static void remove_leg_done(void *arg, int64_t rc)
{
	struct remove_leg *leg = arg;
	struct remove_op *o = leg->o;
	kvt__e_link_result(o->s, leg->l, rc < 0 ? (int)rc : 0);
	if (rc == 0) {
		atomic_fetch_add(&o->removed, 1);
		kvt__e_event(o->s, KVT_EVENT_REMOVED, KVT_REASON_REMOVED, (int)(leg->l - o->s->links),
			     &o->key, 0);
	}
	kvt__e_keyrec_rm_over(o->s, o->rec, (int)(leg->l - o->s->links), false);
	kvt__free(leg);
	remove_release(o);
}

/* The late answer to a remove call that missed its deadline (the guard's last reference):
 * the tier's removal is announced if it took place (until 2026-12-06 it never was, and
 * event subscribers kept the key listed on a tier that had deleted it: store_late_writes
 * 15), new writes of the key reach the tier again, and a slot of the key a write skipped
 * the tier for is written again. */
static void remove_leg_late(struct guard *g)
{
	struct kvt_store *s = g->s;
	struct keyrec *rec = g->orphan_arg;
	int i = (int)(g->l - s->links);
	pthread_mutex_lock(&s->wb_lock);
	rec->rm_late[i]--;
	bool rewrite = kvt__e_wb_rewrite_claim(s, rec, i);
	struct kvt_key key = rec->key;
	pthread_mutex_unlock(&s->wb_lock);
	if (g->late_rc == 0)
		kvt__e_event(s, KVT_EVENT_REMOVED, KVT_REASON_REMOVED, i, &key, 0);
	remove_unmark(s, rec);
	if (rewrite)
		kvt__e_wb_rewrite(s, &key);
}

/* The tier missed its deadline: the key may still be there; it is not counted. Until the
 * tier answers, the key stays marked (its record counts the late call): the remove may
 * still land, and until it does the tier's copy is not served. */
static void remove_leg_expire(struct guard *g)
{
	struct remove_leg *leg = g->op;
	struct remove_op *o = leg->o;
	struct kvt_store *s = o->s;
	pthread_mutex_lock(&s->wb_lock);
	o->rec->removing++;
	o->rec->refs++;
	pthread_mutex_unlock(&s->wb_lock);
	atomic_fetch_add(&s->removes_out, 1);
	g->orphan_fn = remove_leg_late;
	g->orphan_arg = o->rec;
	/* its parked writes go on, skipping this tier until the late answer (rm_late) */
	kvt__e_keyrec_rm_over(s, o->rec, (int)(leg->l - s->links), true);
	kvt__free(leg);
	remove_release(o);
}

/* Wait for write-behind of the key still out, else remove it from every deeper tier. Called
 * once when the remove comes (o->seq 0) and again each time a job it waited for is done. */
void kvt__e_remove_start(struct remove_op *o)
{
	struct kvt_store *s = o->s;
	struct keyrec *rec = o->rec;
	pthread_mutex_lock(&s->wb_lock);
	if (!o->seq) {
		/* Its place in the key's order, taken once DRAM has let the key go: a job that
		 * write-back registered for the old slot before is older, and waited for. */
		o->seq = ++s->wb_seq;
		rec->last_remove = o->seq;
		rec->unordered--;
		rec->removing++;
		/* DRAM lets the key go in the same hold of wb_lock as the remove takes its place
		 * (wb_lock before the pool's mutex, as in kvt__e_wb_register). A slot being
		 * written behind is unlinked now and freed when its job lets go; a dirty one not
		 * yet written never will be. A put's slot still filling is not found: its job
		 * registers after this hold, newer than the remove, and its copy stays - in DRAM
		 * and, once the remove's calls are answered, on the deeper tiers. Until
		 * 2026-12-06 DRAM let go in kvt__e_do_remove, before this hold: a put could
		 * publish and register its job in between, older than the remove, whose deeper
		 * removes then followed the job's writes while DRAM kept the put's copy, clean
		 * (integ.store_put_remove_race). */
		if (s->dram) {
			int rc = kvt__dram_remove(s->dram, &o->key);
			if (rc == 0 || rc == -EBUSY)
				atomic_fetch_add(&o->removed, 1);
		}
	} else if (kvt__e_keyrec_put_since(rec, o->seq)) { /* a put came after it */
		pthread_mutex_unlock(&s->wb_lock);
		remove_release(o);
		return;
	}
	/* The newest job of the key older than the remove; jobs complete out of order, so
	 * one older still may be out when it is done: then the remove waits again. */
	struct wb *last = NULL;
	if (rec->pending) {
		struct kvt_list *p;
		kvt_list_for_each(p, &s->wb)
		{
			struct wb *w = kvt_list_entry(p, struct wb, node);
			if (w->seq > o->seq)
				break; /* the list is in seq order */
			if (kvt__key_eq(&w->key, &o->key))
				last = w;
		}
	}
	if (last) {
		o->next_after = last->after;
		last->after = o;
		pthread_mutex_unlock(&s->wb_lock);
		return;
	}
	/* Every call below counts on its link (rm_on) from this hold of the lock, where no put
	 * came since: a newer job's writes wait for the calls (kvt__e_wb_start). One not sent
	 * is let go at once. */
	for (int i = s->dram_pos + 1; i < s->n_links; i++)
		rec->rm_on[i]++;
	pthread_mutex_unlock(&s->wb_lock);
	for (int i = s->dram_pos + 1; i < s->n_links; i++) {
		struct link *l = &s->links[i];
		if (!kvt__e_link_usable(l)) {
			kvt__e_keyrec_rm_over(s, rec, i, false);
			continue;
		}
		struct remove_leg *leg = kvt__malloc(sizeof(*leg));
		struct guard *g = leg ? kvt__e_guard_new(s, l, "remove", 0, leg, remove_leg_done,
						  remove_leg_expire)
				      : NULL;
		if (!g) {
			kvt__free(leg);
			kvt__e_link_unused(l);
			kvt__e_keyrec_rm_over(s, rec, i, false);
			continue;
		}
		leg->o = o;
		leg->l = l;
		atomic_fetch_add(&o->remaining, 1);
		int rc = l->t->ops->remove(l->t, &o->key, kvt__e_guard_cb, g);
		if (rc == 0) {
			kvt__e_guard_arm(g);
			continue;
		}
		kvt__e_guard_cancel(g);
		atomic_fetch_sub(&o->remaining, 1);
		kvt__free(leg);
		kvt__e_link_result(s, l, rc);
		kvt__e_keyrec_rm_over(s, rec, i, false);
	}
	/* The last reference may be ours: the completion goes through the queue (unless
	 * direct, where the caller is a sync wrapper waiting for it). */
	remove_release(o);
}

struct remove_op *kvt__e_remove_mark(struct kvt_store *s, const struct kvt_key *key, kvt_cb cb,
				     void *arg, bool direct, int *rc)
{
	struct remove_op *o = kvt__calloc(1, sizeof(*o));
	if (!o) {
		*rc = -ENOMEM;
		return NULL;
	}
	int arc = kvt__e_admit_inflight(s);
	if (arc < 0) {
		kvt__free(o);
		*rc = arc;
		return NULL;
	}
	/* The key is marked before DRAM lets it go, so a read that misses DRAM from then on
	 * finds the mark (kvt__e_remove_pending); DRAM lets it go when the remove takes its
	 * place in the order (kvt__e_remove_start), until then the mark holds whatever the
	 * key's puts. */
	pthread_mutex_lock(&s->wb_lock);
	o->rec = kvt__e_keyrec_get(s, key);
	if (o->rec) {
		o->rec->unordered++;
		atomic_fetch_add(&s->removes_out, 1);
	}
	pthread_mutex_unlock(&s->wb_lock);
	if (!o->rec) {
		kvt__e_unadmit(s);
		kvt__free(o);
		*rc = -ENOMEM;
		return NULL;
	}
	o->s = s;
	o->key = *key;
	o->cb = cb;
	o->arg = arg;
	o->direct = direct;
	atomic_store(&o->remaining, 1);
	return o;
}

int kvt__e_do_remove(struct kvt_store *s, const struct kvt_key *key, kvt_cb cb, void *arg,
		     bool direct)
{
	if (!s || !key || !cb)
		return -EINVAL;
	int rc = 0;
	struct remove_op *o = kvt__e_remove_mark(s, key, cb, arg, direct, &rc);
	if (!o)
		return rc;
	/* A promotion of the key still reading is marked first, so it does not publish once
	 * the remove is done; DRAM lets the key go in kvt__e_remove_start. */
	if (s->dram)
		kvt__e_fill_removed(s, key);
	kvt__e_remove_start(o);
	return 0;
}

int kvt_remove(struct kvt_store *s, const struct kvt_key *key, kvt_cb cb, void *arg)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	struct kvt_key sk;
	rc = s->client ? kvt__client_remove(s->client, key, cb, arg)
		       : kvt__e_do_remove(s, kvt__e_skey(s, key, &sk), cb, arg, false);
	kvt__store_leave(s);
	return rc;
}
