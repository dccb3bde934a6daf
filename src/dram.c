/*
 * dram.c - the DRAM tier: a slot pool mapped once at create, a chained hash index from key
 * to slot, and an eviction policy over slot ids (src/evict.h). Rules are in src/dram.h.
 *
 * Why it is built this way:
 *   - One mmap for the whole pool, so slots are KVT_ALIGN-aligned for O_DIRECT, huge pages
 *     can back it (MAP_HUGETLB first, then transparent huge page advice), and nothing on
 *     the hot path allocates: slot metadata, index buckets and the policy's lists are all
 *     sized at create.
 *   - The index chains through the slot array itself (one int32 per slot), with one bucket
 *     per slot rounded up to a power of two: a lookup is a hash, a bucket load and usually
 *     one key compare, and a slot can be unlinked without any search outside its chain.
 *   - Whether a slot may be evicted (published, unpinned, clean, no resident children) is
 *     cached per slot and counted, so the headroom is O(1) and an allocation in a pool
 *     where nothing can go fails at once instead of walking the policy's lists. The policy
 *     is told too (kvt__evict_mark) and keeps the evictable slots in its own order, so a
 *     victim is found without walking past the slots that may not go: in a pool full of
 *     long prefix chains that is nearly all of them, and a walk cost O(slots) per put.
 *   - Suffix-before-prefix: a chunk records its parent's slot and that slot's generation
 *     (bumped whenever a slot is freed), and the parent counts resident children. A child
 *     that outlives its parent's slot finds a different generation and leaves the new
 *     occupant's count alone, so no child list is needed. The parent is linked before a
 *     victim is chosen, so an allocation never evicts its own prefix. Suffix-first is a
 *     preference: when only prefixes are evictable, the policy's choice among them goes
 *     (the deeper tiers still hold it), so a chain longer than the pool streams through.
 *   - A filling slot is in the index (a second alloc of the key gets -EEXIST) but not in
 *     the policy and not visible to get/contains/remove; it joins the policy at publish.
 *   - A slot removed while pinned leaves the index and the policy at once and is freed by
 *     its last unpin; until then its bytes stay valid for the readers that hold it.
 *   - A partial chunk (dram.partial_first: fewer tokens than a full one) is a prompt's end,
 *     whose id the next turn replaces by a longer chunk's: until it is hit it is the first
 *     to go, whatever the policy (a FIFO of such slots beside it, cold_victim), as the
 *     replay's DRAM model does (src/sim.c).
 * One mutex guards everything; it is held only for metadata work, never across a copy.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cold_fifo.h"
#include "dram.h"
#include "evict.h"

#define HUGE_2M (2ull << 20)

enum { S_FREE = 0, S_FILLING, S_PUBLISHED, S_REMOVED };

struct slot {
	struct kvt_key key;
	uint64_t khash;
	uint64_t object_bytes;
	uint32_t n_tokens;
	uint32_t pins;
	uint32_t children; /* resident chunks naming this one as parent */
	uint32_t gen;	   /* bumped when the slot is freed */
	int32_t parent;	   /* slot of the parent chunk, -1 none */
	uint32_t depth;	   /* chunks before it in its chain, as far as DRAM knew at alloc */
	uint32_t parent_gen;
	bool has_parent_key; /* the put named a parent (resident or not): for deeper tiers */
	struct kvt_key parent_key;
	int32_t next; /* index chain while indexed, free list while free */
	uint8_t state;
	/* filled by its reserver (kvt__dram_reserve: a device store, a daemon client's write),
	 * not by a promotion: a remove before the publish takes it out of the index */
	bool reserved;
	bool dirty;
	/* dirty because its write-behind reached no deeper tier (one failed or missed its
	 * deadline): flush and close write it again, but it may be evicted meanwhile - a dead
	 * tier must not fill the pool with slots that can never go - counted in
	 * evicted_unsaved, which flush reports */
	bool unsaved;
	bool evictable; /* cached evictable(); counted in n_evictable */
	bool cold;	/* a partial chunk not hit since its publish: on the cold FIFO */
	uint32_t hits;	/* gets served from this copy (the selective write policy's count) */
	uint32_t flush_pass; /* the flush pass that last took it (kvt__dram_dirty_victims) */
	uint32_t jobs;	     /* write-behind jobs of it not complete (kvt__dram_job) */
	uint8_t reoffer;     /* kvt__dram_add_reoffer: offered deeper again on a hit */
};

struct kvt_dram {
	pthread_mutex_t mu;
	uint8_t *pool;
	size_t map_len;
	int pool_fd; /* dram.shared: the memfd behind the pool, else -1 */
	uint64_t slot_bytes;
	uint32_t nslots;
	struct slot *slots;
	int32_t *buckets;
	uint32_t bmask;
	int32_t free_head;
	uint32_t n_free;
	uint32_t n_evictable;
	struct kvt_evict *ev;
	uint32_t *scratch; /* nslots ids for dirty_victims */
	/* dram.partial_first: chunks of fewer tokens go first (cold_victim); the FIFO holds
	 * slot << 32 | gen - an entry whose slot was hit or reused since is stale */
	uint32_t partial_below;
	struct kvt_cold_fifo cold;
	struct kvt_log log;
	uint64_t objects, bytes, evictions, hits, misses, removes;
	uint64_t evicted_unsaved; /* evictions of unsaved slots: no deeper tier held them */
	uint32_t flush_passes;    /* kvt__dram_flush_pass's last number */
	/* where each recent flush pass goes on (a pass walks the slots in index order: a flush
	 * writes them all, in no particular order, once each); passes run concurrently (a
	 * daemon's clients flush at once), so one per pass, the oldest reused */
	struct {
		uint32_t pass, cursor;
	} flush_at[8];
	kvt_dram_change_fn on_change;
	void *on_change_arg;
};

/* Report a change of a published slot (mutex held). */
static void changed(struct kvt_dram *d, int change, const struct slot *s)
{
	if (d->on_change)
		d->on_change(d->on_change_arg, change, &s->key,
			     s->has_parent_key ? &s->parent_key : NULL, s->n_tokens,
			     s->object_bytes);
}

static bool slot_evictable(const struct slot *s)
{
	return s->state == S_PUBLISHED && s->pins == 0 && (!s->dirty || s->unsaved) &&
	       s->children == 0;
}

/* Every change of what slot_evictable() says comes through here: the count, and the
 * policy's mark (kvt__evict_victim_marked picks among marked slots, in policy order,
 * without walking past the prefixes of a pool full of long chains). */
static void refresh(struct kvt_dram *d, struct slot *s)
{
	bool e = slot_evictable(s);
	if (e != s->evictable) {
		s->evictable = e;
		if (e)
			d->n_evictable++;
		else
			d->n_evictable--;
		kvt__evict_mark(d->ev, (uint32_t)(s - d->slots), e);
	}
}

/* Second choice when no leaf can go: any published, unpinned, clean slot except the
 * prefix of the chunk being allocated. */
struct any_ctx {
	const struct kvt_dram *d;
	int32_t exclude;
};

static bool ok_any_cb(void *arg, uint32_t id)
{
	const struct any_ctx *c = arg;
	const struct slot *s = &c->d->slots[id];
	return id < c->d->nslots && (int32_t)id != c->exclude && s->state == S_PUBLISHED &&
	       s->pins == 0 && (!s->dirty || s->unsaved);
}

static int32_t index_find(const struct kvt_dram *d, const struct kvt_key *key, uint64_t h)
{
	for (int32_t i = d->buckets[h & d->bmask]; i >= 0; i = d->slots[i].next) {
		const struct slot *s = &d->slots[i];
		if (s->khash == h && kvt__key_eq(&s->key, key))
			return i;
	}
	return -1;
}

static void index_link(struct kvt_dram *d, int32_t id)
{
	struct slot *s = &d->slots[id];
	int32_t *b = &d->buckets[s->khash & d->bmask];
	s->next = *b;
	*b = id;
}

static void index_unlink(struct kvt_dram *d, int32_t id)
{
	struct slot *s = &d->slots[id];
	int32_t *pp = &d->buckets[s->khash & d->bmask];
	while (*pp != id)
		pp = &d->slots[*pp].next;
	*pp = s->next;
	s->next = -1;
}

static void parent_release(struct kvt_dram *d, struct slot *s)
{
	if (s->parent < 0)
		return;
	struct slot *p = &d->slots[s->parent];
	if (p->gen == s->parent_gen && p->children > 0) {
		p->children--;
		refresh(d, p);
	}
	s->parent = -1;
}

/* A published slot leaves the resident set (eviction or remove). */
static void unpublish(struct kvt_dram *d, int32_t id)
{
	struct slot *s = &d->slots[id];
	index_unlink(d, id);
	parent_release(d, s);
	d->objects--;
	d->bytes -= s->object_bytes;
}

/* Reset a slot that is out of the index and the policy, without putting it on the free
 * list (an alloc reuses it directly). */
static void slot_reset(struct kvt_dram *d, struct slot *s)
{
	s->state = S_FREE;
	s->reserved = false;
	s->pins = 0;
	s->dirty = false;
	s->unsaved = false;
	s->flush_pass = 0;
	s->jobs = 0;
	s->children = 0;
	s->parent = -1;
	s->depth = 0;
	s->has_parent_key = false;
	s->object_bytes = 0;
	s->n_tokens = 0;
	s->cold = false;
	s->reoffer = 0;
	s->hits = 0;
	s->gen++;
	refresh(d, s);
}

/* A cold FIFO entry (slot << 32 | gen), as src/cold_fifo.h asks: stale once its slot was
 * hit or reused; a partial chunk pinned or dirty (its write-behind still running) waits. */
static enum kvt_cold_state cold_state(void *arg, uint64_t e)
{
	const struct kvt_dram *d = arg;
	const struct slot *s = &d->slots[e >> 32];
	if (s->gen != (uint32_t)e || !s->cold)
		return KVT_COLD_STALE;
	return slot_evictable(s) ? KVT_COLD_GO : KVT_COLD_WAIT;
}

/* The oldest partial chunk not hit since its publish that may go now; -1: none. */
static int cold_victim(struct kvt_dram *d)
{
	uint64_t e;
	if (!kvt__cold_take(&d->cold, cold_state, d, &e))
		return -1;
	d->slots[e >> 32].cold = false;
	return (int)(e >> 32);
}

static void cold_push(struct kvt_dram *d, int32_t id)
{
	kvt__cold_put(&d->cold, (uint64_t)id << 32 | d->slots[id].gen, cold_state, d);
	d->slots[id].cold = true;
}

static void slot_free(struct kvt_dram *d, int32_t id)
{
	struct slot *s = &d->slots[id];
	slot_reset(d, s);
	s->next = d->free_head;
	d->free_head = id;
	d->n_free++;
}

static void fill_ref(const struct kvt_dram *d, int32_t id, struct kvt_slot_ref *ref)
{
	const struct slot *s = &d->slots[id];
	ref->id = id;
	ref->buf = d->pool + (uint64_t)id * d->slot_bytes;
	ref->object_bytes = s->object_bytes;
	ref->n_tokens = s->n_tokens;
	ref->dirty = s->dirty;
	ref->depth = s->depth;
	ref->has_parent = s->has_parent_key;
	if (s->has_parent_key)
		ref->parent = s->parent_key;
	ref->discarded = false;
	ref->reoffer = s->reoffer;
}

/* dram.prefault: fault every page of the pool in now, at open, so that the first restores
 * through a slot do not pay a page fault per 4 KiB (or per 2 MiB huge page) inside a
 * request. MADV_POPULATE_WRITE (Linux 5.14) does it in one call; older kernels get a write
 * per page. mlock already populates. A pool the machine cannot back is logged, not fatal:
 * it stays lazily faulted, as without the option. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static void prefault_pool(struct kvt_dram *d, const struct kvt_dram_options *o)
{
	if (!o->prefault || o->mlock)
		return;
	uint64_t t0 = kvt__now_ns();
	if (madvise(d->pool, d->map_len, MADV_POPULATE_WRITE) != 0) {
		if (errno != EINVAL) {
			KVT_WARN(&d->log, "dram: prefault of %zu bytes failed (%s); pool stays lazily faulted",
				 d->map_len, strerror(errno));
			return;
		}
		long pg = sysconf(_SC_PAGESIZE);
		for (size_t off = 0; off < d->map_len; off += (size_t)pg)
			((volatile uint8_t *)d->pool)[off] = 0;
	}
	KVT_INFO(&d->log, "dram: %zu bytes prefaulted in %.0f ms", d->map_len,
		 (double)(kvt__now_ns() - t0) / 1e6);
}

/* A pool other processes can map (kvtierd's clients): a memfd, on hugetlbfs pages when the
 * kernel has them reserved, else ordinary shared memory with huge pages advised. Sealed at
 * its size before anyone else sees it: a client holding the descriptor read-write could
 * otherwise ftruncate it, and every mapping of it - the daemon's first - would fault. Not
 * sealed against further seals: whoever hands it out decides whether the others may write
 * it (kvtierd adds F_SEAL_FUTURE_WRITE, then F_SEAL_SEAL). */
static int map_shared_pool(struct kvt_dram *d, const struct kvt_dram_options *o, size_t len)
{
	int fd = -1;
	size_t mlen = len;
	if (o->hugepages) {
		mlen = (size_t)KVT_ALIGN_UP(len, HUGE_2M);
		fd = memfd_create("kvtier-dram", MFD_CLOEXEC | MFD_HUGETLB | MFD_ALLOW_SEALING);
		if (fd >= 0 && ftruncate(fd, (off_t)mlen) < 0) {
			close(fd);
			fd = -1;
		}
	}
	void *p = MAP_FAILED;
	if (fd >= 0) {
		p = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			close(fd);
			fd = -1;
		} else {
			KVT_INFO(&d->log, "dram: %zu shared bytes on hugetlbfs pages", mlen);
		}
	}
	if (fd < 0) {
		mlen = len;
		fd = memfd_create("kvtier-dram", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd < 0 || ftruncate(fd, (off_t)mlen) < 0 ||
		    (p = mmap(NULL, mlen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
			int err = errno;
			if (fd >= 0)
				close(fd);
			KVT_ERR(&d->log, "dram: shared pool of %zu bytes failed: %s", mlen,
				strerror(err));
			return -err;
		}
		if (o->hugepages)
			madvise(p, mlen, MADV_HUGEPAGE); /* shmem THP: advice only */
	}
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
		int err = errno;
		munmap(p, mlen);
		close(fd);
		KVT_ERR(&d->log, "dram: cannot seal the shared pool at its size: %s", strerror(err));
		return -err;
	}
	d->pool = p;
	d->map_len = mlen;
	d->pool_fd = fd;
	prefault_pool(d, o);
	if (o->mlock && mlock(p, d->map_len) != 0)
		KVT_WARN(&d->log, "dram: mlock of %zu bytes failed (%s); pool stays pageable",
			 d->map_len, strerror(errno));
	return 0;
}

static int map_pool(struct kvt_dram *d, const struct kvt_dram_options *o, size_t len)
{
	if (o->shared)
		return map_shared_pool(d, o, len);
	void *p = MAP_FAILED;
	if (o->hugepages) {
		size_t hlen = (size_t)KVT_ALIGN_UP(len, HUGE_2M);
		p = mmap(NULL, hlen, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
		if (p != MAP_FAILED) {
			d->map_len = hlen;
			KVT_INFO(&d->log, "dram: %zu bytes on hugetlbfs pages", hlen);
		}
	}
	if (p == MAP_FAILED) {
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			int err = errno;
			KVT_ERR(&d->log, "dram: mmap of %zu bytes failed: %s", len, strerror(err));
			return -err;
		}
		d->map_len = len;
		/* Transparent huge pages: advice only, the kernel may say no. */
		if (o->hugepages && madvise(p, len, MADV_HUGEPAGE) == 0)
			KVT_INFO(&d->log, "dram: %zu bytes, transparent huge pages advised", len);
		else if (o->hugepages)
			KVT_INFO(&d->log, "dram: %zu bytes, huge pages refused: %s", len,
				 strerror(errno));
	}
	d->pool = p;
	prefault_pool(d, o);
	if (o->mlock && mlock(p, d->map_len) != 0)
		KVT_WARN(&d->log, "dram: mlock of %zu bytes failed (%s); pool stays pageable",
			 d->map_len, strerror(errno));
	return 0;
}

void kvt__dram_destroy(struct kvt_dram *d)
{
	if (!d)
		return;
	kvt__evict_destroy(d->ev);
	if (d->pool)
		munmap(d->pool, d->map_len);
	if (d->pool_fd >= 0)
		close(d->pool_fd);
	kvt__free(d->scratch);
	kvt__cold_free(&d->cold);
	kvt__free(d->buckets);
	kvt__free(d->slots);
	pthread_mutex_destroy(&d->mu);
	kvt__free(d);
}

int kvt__dram_create(const struct kvt_dram_options *o, struct kvt_dram **out)
{
	if (!o || !out || o->slot_bytes == 0 || o->slot_bytes > UINT64_MAX / 2)
		return -EINVAL;
	uint64_t slot_bytes = KVT_ALIGN_UP(o->slot_bytes, KVT_ALIGN);
	uint64_t n = o->bytes / slot_bytes;
	if (n == 0)
		n = 1;
	if (n > (uint64_t)INT32_MAX || n > SIZE_MAX / slot_bytes)
		return -EINVAL;
	const char *policy = o->policy ? o->policy : "hda";

	struct kvt_dram *d = kvt__calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	int rc = pthread_mutex_init(&d->mu, NULL);
	if (rc) {
		kvt__free(d);
		return -rc;
	}
	if (o->log)
		d->log = *o->log;
	d->pool_fd = -1;
	d->on_change = o->on_change;
	d->on_change_arg = o->on_change_arg;
	d->slot_bytes = slot_bytes;
	d->nslots = (uint32_t)n;
	uint64_t nb = 1;
	while (nb < n)
		nb <<= 1;
	d->bmask = (uint32_t)(nb - 1);

	rc = kvt__evict_create(policy, d->nslots, &d->ev);
	if (rc < 0)
		goto fail;
	rc = -ENOMEM;
	d->slots = kvt__calloc(n, sizeof(*d->slots));
	d->buckets = kvt__malloc(nb * sizeof(*d->buckets));
	d->scratch = kvt__malloc(n * sizeof(*d->scratch));
	if (!d->slots || !d->buckets || !d->scratch)
		goto fail;
	if ((d->partial_below = o->partial_below) && kvt__cold_init(&d->cold, (uint32_t)n) < 0)
		goto fail;
	for (uint64_t i = 0; i < nb; i++)
		d->buckets[i] = -1;
	d->free_head = -1;
	for (int64_t i = (int64_t)n - 1; i >= 0; i--) {
		d->slots[i].parent = -1;
		d->slots[i].next = d->free_head;
		d->free_head = (int32_t)i;
	}
	d->n_free = (uint32_t)n;
	rc = map_pool(d, o, (size_t)(n * slot_bytes));
	if (rc < 0)
		goto fail;
	KVT_INFO(&d->log, "dram: %u slots of %llu bytes, policy %s", d->nslots,
		 (unsigned long long)slot_bytes, policy);
	*out = d;
	return 0;
fail:
	kvt__dram_destroy(d);
	return rc;
}

int kvt__dram_pool(const struct kvt_dram *d, void **base, size_t *len)
{
	*base = d->pool;
	*len = d->map_len;
	return d->pool_fd;
}

uint32_t kvt__dram_slots(const struct kvt_dram *d)
{
	return d->nslots;
}

uint64_t kvt__dram_slot_bytes(const struct kvt_dram *d)
{
	return d->slot_bytes;
}

bool kvt__dram_contains(struct kvt_dram *d, const struct kvt_key *key, bool touch)
{
	uint64_t h = kvt__key_hash(key);
	pthread_mutex_lock(&d->mu);
	int32_t id = index_find(d, key, h);
	bool yes = id >= 0 && d->slots[id].state == S_PUBLISHED;
	if (yes && touch) { /* a lookup: the get that follows is the use */
		d->slots[id].cold = false;
		kvt__evict_refresh(d->ev, (uint32_t)id);
	}
	pthread_mutex_unlock(&d->mu);
	return yes;
}

int32_t kvt__dram_pin_resident(struct kvt_dram *d, const struct kvt_key *key)
{
	uint64_t h = kvt__key_hash(key);
	pthread_mutex_lock(&d->mu);
	int32_t id = index_find(d, key, h);
	if (id >= 0 && d->slots[id].state == S_PUBLISHED) {
		d->slots[id].pins++;
		refresh(d, &d->slots[id]);
	} else {
		id = -1;
	}
	pthread_mutex_unlock(&d->mu);
	return id;
}

int32_t kvt__dram_indexed(struct kvt_dram *d, const struct kvt_key *key)
{
	uint64_t h = kvt__key_hash(key);
	pthread_mutex_lock(&d->mu);
	int32_t id = index_find(d, key, h);
	if (id >= 0 && d->slots[id].state != S_PUBLISHED)
		id = -1;
	pthread_mutex_unlock(&d->mu);
	return id;
}

int kvt__dram_get(struct kvt_dram *d, const struct kvt_key *key, struct kvt_slot_ref *ref)
{
	uint64_t h = kvt__key_hash(key);
	pthread_mutex_lock(&d->mu);
	int32_t id = index_find(d, key, h);
	if (id < 0 || d->slots[id].state != S_PUBLISHED) {
		d->misses++;
		pthread_mutex_unlock(&d->mu);
		return -ENOENT;
	}
	struct slot *s = &d->slots[id];
	s->pins++;
	refresh(d, s);
	s->cold = false;
	kvt__evict_touch(d->ev, (uint32_t)id);
	d->hits++;
	fill_ref(d, id, ref);
	pthread_mutex_unlock(&d->mu);
	return 0;
}

static int alloc(struct kvt_dram *d, const struct kvt_key *key, const struct kvt_key *parent,
		 struct kvt_slot_ref *ref, bool reserved)
{
	uint64_t h = kvt__key_hash(key);
	uint64_t ph = parent ? kvt__key_hash(parent) : 0;
	pthread_mutex_lock(&d->mu);
	int32_t found = index_find(d, key, h);
	if (found >= 0) {
		/* A slot being filled (a get's promotion) holds no object yet: not "stored". */
		bool filling = d->slots[found].state == S_FILLING;
		pthread_mutex_unlock(&d->mu);
		return filling ? -EBUSY : -EEXIST;
	}
	/* Count the child on its parent first: the parent must not be this alloc's victim. */
	int32_t pid = parent ? index_find(d, parent, ph) : -1;
	if (pid >= 0) {
		d->slots[pid].children++;
		refresh(d, &d->slots[pid]);
	}
	int32_t id;
	if (d->free_head >= 0) {
		id = d->free_head;
		d->free_head = d->slots[id].next;
		d->n_free--;
	} else {
		int v = d->cold.n && d->n_evictable ? cold_victim(d) : -1;
		if (v >= 0)
			kvt__evict_expire(d->ev, (uint32_t)v);
		else
			v = d->n_evictable ? kvt__evict_victim_marked(d->ev) : -ENOENT;
		if (v < 0) {
			/* Only prefixes are left: a chain longer than the pool must still stream
			 * through, so the policy's choice among them goes (deeper tiers keep it). */
			struct any_ctx c = {d, pid};
			v = kvt__evict_victim(d->ev, ok_any_cb, &c);
		}
		if (v < 0) {
			if (pid >= 0) {
				d->slots[pid].children--;
				refresh(d, &d->slots[pid]);
			}
			pthread_mutex_unlock(&d->mu);
			return -ENOSPC;
		}
		id = v;
		if (d->slots[id].unsaved)
			d->evicted_unsaved++;
		changed(d, KVT_DRAM_EVICTED, &d->slots[id]);
		unpublish(d, id);
		slot_reset(d, &d->slots[id]);
		d->evictions++;
	}
	struct slot *s = &d->slots[id];
	s->key = *key;
	s->khash = h;
	s->state = S_FILLING;
	s->reserved = reserved;
	s->pins = 1;
	if (pid >= 0) {
		s->parent = pid;
		s->parent_gen = d->slots[pid].gen;
		s->depth = d->slots[pid].depth + 1;
	}
	if (parent) {
		s->has_parent_key = true;
		s->parent_key = *parent;
	}
	index_link(d, id);
	fill_ref(d, id, ref);
	pthread_mutex_unlock(&d->mu);
	return 0;
}

int kvt__dram_alloc(struct kvt_dram *d, const struct kvt_key *key, const struct kvt_key *parent,
		    struct kvt_slot_ref *ref)
{
	return alloc(d, key, parent, ref, false);
}

int kvt__dram_reserve(struct kvt_dram *d, const struct kvt_key *key, const struct kvt_key *parent,
		      struct kvt_slot_ref *ref)
{
	return alloc(d, key, parent, ref, true);
}

static bool valid_id(const struct kvt_dram *d, int32_t id)
{
	return id >= 0 && (uint32_t)id < d->nslots;
}

static bool publish(struct kvt_dram *d, int32_t id, uint64_t object_bytes, uint32_t n_tokens,
		    bool dirty, bool put);

bool kvt__dram_publish(struct kvt_dram *d, int32_t id, uint64_t object_bytes, uint32_t n_tokens,
		       bool dirty)
{
	return publish(d, id, object_bytes, n_tokens, dirty, false);
}

bool kvt__dram_publish_put(struct kvt_dram *d, int32_t id, uint64_t object_bytes,
			   uint32_t n_tokens, bool dirty)
{
	return publish(d, id, object_bytes, n_tokens, dirty, true);
}

static bool publish(struct kvt_dram *d, int32_t id, uint64_t object_bytes, uint32_t n_tokens,
		    bool dirty, bool put)
{
	if (!valid_id(d, id))
		return false;
	pthread_mutex_lock(&d->mu);
	struct slot *s = &d->slots[id];
	bool published = s->state == S_FILLING;
	if (published) {
		s->state = S_PUBLISHED;
		s->reserved = false;
		s->object_bytes = KVT_MIN(object_bytes, d->slot_bytes);
		s->n_tokens = n_tokens;
		s->dirty = dirty;
		d->objects++;
		d->bytes += s->object_bytes;
		kvt__evict_insert(d->ev, (uint32_t)id, s->khash);
		refresh(d, s);
		if (put && n_tokens < d->partial_below)
			cold_push(d, id);
		changed(d, KVT_DRAM_STORED, s);
	}
	pthread_mutex_unlock(&d->mu);
	return published;
}

void kvt__dram_abort(struct kvt_dram *d, int32_t id)
{
	if (!valid_id(d, id))
		return;
	pthread_mutex_lock(&d->mu);
	struct slot *s = &d->slots[id];
	if (s->state == S_FILLING) {
		index_unlink(d, id);
		parent_release(d, s);
		if (s->pins > 0)
			s->pins--;
		if (s->pins == 0)
			slot_free(d, id);
		else
			s->state = S_REMOVED;
	} else if (s->state == S_REMOVED && s->reserved && s->pins > 0) {
		/* a reservation a remove took out of the index: the reserver's pin */
		if (--s->pins == 0)
			slot_free(d, id);
	}
	pthread_mutex_unlock(&d->mu);
}

bool kvt__dram_reserve_removed(struct kvt_dram *d, int32_t id)
{
	if (!valid_id(d, id))
		return false;
	pthread_mutex_lock(&d->mu);
	bool removed = d->slots[id].state == S_REMOVED && d->slots[id].reserved;
	pthread_mutex_unlock(&d->mu);
	return removed;
}

void kvt__dram_pin(struct kvt_dram *d, int32_t id)
{
	if (!valid_id(d, id))
		return;
	pthread_mutex_lock(&d->mu);
	struct slot *s = &d->slots[id];
	if (s->state != S_FREE) {
		s->pins++;
		refresh(d, s);
	}
	pthread_mutex_unlock(&d->mu);
}

void kvt__dram_unpin(struct kvt_dram *d, int32_t id)
{
	if (!valid_id(d, id))
		return;
	pthread_mutex_lock(&d->mu);
	struct slot *s = &d->slots[id];
	if (s->pins > 0) {
		s->pins--;
		if (s->pins == 0 && s->state == S_REMOVED)
			slot_free(d, id);
		else
			refresh(d, s);
	}
	pthread_mutex_unlock(&d->mu);
}

int kvt__dram_get_dirty(struct kvt_dram *d, const struct kvt_key *key, struct kvt_slot_ref *ref)
{
	uint64_t h = kvt__key_hash(key);
	pthread_mutex_lock(&d->mu);
	int32_t id = index_find(d, key, h);
	if (id < 0 || d->slots[id].state != S_PUBLISHED || !d->slots[id].dirty) {
		pthread_mutex_unlock(&d->mu);
		return -ENOENT;
	}
	struct slot *s = &d->slots[id];
	s->pins++;
	refresh(d, s);
	fill_ref(d, id, ref);
	pthread_mutex_unlock(&d->mu);
	return 0;
}

/* A published (or removed, still pinned) slot's dirty and unsaved marks; with only_unsaved,
 * only if it is marked unsaved now. */
static void mark(struct kvt_dram *d, int32_t id, bool dirty, bool unsaved, bool only_unsaved)
{
	if (!valid_id(d, id))
		return;
	pthread_mutex_lock(&d->mu);
	struct slot *s = &d->slots[id];
	if ((s->state == S_PUBLISHED || s->state == S_REMOVED) && (!only_unsaved || s->unsaved)) {
		s->dirty = dirty;
		s->unsaved = unsaved;
		refresh(d, s);
	}
	pthread_mutex_unlock(&d->mu);
}

void kvt__dram_set_dirty(struct kvt_dram *d, int32_t id, bool dirty)
{
	mark(d, id, dirty, false, false);
}

void kvt__dram_set_unsaved(struct kvt_dram *d, int32_t id)
{
	mark(d, id, true, true, false);
}

void kvt__dram_clear_unsaved(struct kvt_dram *d, int32_t id)
{
	mark(d, id, false, false, true);
}

uint32_t kvt__dram_count_hit(struct kvt_dram *d, int32_t id)
{
	if (!valid_id(d, id))
		return 0;
	pthread_mutex_lock(&d->mu);
	uint32_t n = d->slots[id].hits < UINT32_MAX ? ++d->slots[id].hits : UINT32_MAX;
	pthread_mutex_unlock(&d->mu);
	return n;
}

uint32_t kvt__dram_test_hits(struct kvt_dram *d, const struct kvt_key *key, int64_t set)
{
	pthread_mutex_lock(&d->mu);
	int32_t id = index_find(d, key, kvt__key_hash(key));
	uint32_t n = id >= 0 ? d->slots[id].hits : 0;
	if (id >= 0 && set >= 0)
		d->slots[id].hits = (uint32_t)set;
	pthread_mutex_unlock(&d->mu);
	return n;
}

void kvt__dram_add_reoffer(struct kvt_dram *d, int32_t id, uint8_t links)
{
	if (!valid_id(d, id))
		return;
	pthread_mutex_lock(&d->mu);
	if (d->slots[id].state == S_PUBLISHED)
		d->slots[id].reoffer |= links;
	pthread_mutex_unlock(&d->mu);
}

int kvt__dram_pin_reoffer(struct kvt_dram *d, const struct kvt_key *key, struct kvt_slot_ref *ref)
{
	uint64_t h = kvt__key_hash(key);
	pthread_mutex_lock(&d->mu);
	int32_t id = index_find(d, key, h);
	if (id < 0 || d->slots[id].state != S_PUBLISHED || !d->slots[id].reoffer ||
	    d->slots[id].dirty) {
		pthread_mutex_unlock(&d->mu);
		return -ENOENT;
	}
	d->slots[id].pins++;
	refresh(d, &d->slots[id]);
	fill_ref(d, id, ref);
	pthread_mutex_unlock(&d->mu);
	return 0;
}

void kvt__dram_clear_reoffer(struct kvt_dram *d, int32_t id, uint8_t links)
{
	if (!valid_id(d, id))
		return;
	pthread_mutex_lock(&d->mu);
	d->slots[id].reoffer &= (uint8_t)~links;
	pthread_mutex_unlock(&d->mu);
}

uint8_t kvt__dram_take_reoffer(struct kvt_dram *d, int32_t id)
{
	if (!valid_id(d, id))
		return 0;
	pthread_mutex_lock(&d->mu);
	struct slot *s = &d->slots[id];
	uint8_t links = s->state == S_PUBLISHED ? s->reoffer : 0;
	s->reoffer = 0;
	pthread_mutex_unlock(&d->mu);
	return links;
}

uint64_t kvt__dram_evicted_unsaved(struct kvt_dram *d)
{
	pthread_mutex_lock(&d->mu);
	uint64_t n = d->evicted_unsaved;
	pthread_mutex_unlock(&d->mu);
	return n;
}

int kvt__dram_remove(struct kvt_dram *d, const struct kvt_key *key)
{
	uint64_t h = kvt__key_hash(key);
	int rc = 0;
	pthread_mutex_lock(&d->mu);
	int32_t id = index_find(d, key, h);
	if (id >= 0 && d->slots[id].state == S_FILLING && d->slots[id].reserved) {
		/* Filled by its reserver, not published yet: it leaves the index now, so the
		 * publish finds it removed and drops it (kvt__dram_publish), and the reserver's
		 * pin frees it. A put of the key after the remove reserves a new slot. */
		struct slot *s = &d->slots[id];
		index_unlink(d, id);
		parent_release(d, s);
		s->state = S_REMOVED;
		d->removes++;
		rc = -EBUSY;
		goto out;
	}
	if (id < 0 || d->slots[id].state != S_PUBLISHED) {
		rc = -ENOENT;
		goto out;
	}
	struct slot *s = &d->slots[id];
	kvt__evict_remove(d->ev, (uint32_t)id);
	changed(d, KVT_DRAM_REMOVED, s);
	unpublish(d, id);
	d->removes++;
	if (s->pins == 0) {
		slot_free(d, id);
	} else {
		s->state = S_REMOVED;
		refresh(d, s);
		rc = -EBUSY;
	}
out:
	pthread_mutex_unlock(&d->mu);
	return rc;
}

void kvt__dram_job(struct kvt_dram *d, int32_t id, bool start)
{
	if (!valid_id(d, id))
		return;
	pthread_mutex_lock(&d->mu);
	struct slot *s = &d->slots[id];
	if (start)
		s->jobs++;
	else if (s->jobs)
		s->jobs--;
	pthread_mutex_unlock(&d->mu);
}

uint32_t kvt__dram_flush_pass(struct kvt_dram *d)
{
	pthread_mutex_lock(&d->mu);
	if (++d->flush_passes == 0) /* 0 is write-back's; a wrap only repeats a look */
		d->flush_passes = 1;
	uint32_t pass = d->flush_passes;
	pthread_mutex_unlock(&d->mu);
	return pass;
}

uint32_t kvt__dram_dirty_victims(struct kvt_dram *d, struct kvt_slot_ref *refs, uint32_t n,
				 uint32_t pass)
{
	uint32_t found = 0;
	if (n == 0)
		return 0;
	pthread_mutex_lock(&d->mu);
	if (pass) {
		/* A flush pass: from where the pass's last call stopped, so the pass walks the
		 * pool once. Until 2026-12-05 it widened the look from the coldest end as
		 * write-back does, re-walking every slot it had taken: ~N^2/8 steps for N dirty
		 * slots, all under the pool's mutex (a 16 GiB write-back pool of 64 KiB chunks:
		 * billions, in kvt_flush and twice in close). Each pass has its cursor: two
		 * concurrent flushes no longer send each other back to slot 0. */
		uint32_t *cur = NULL, oldest = 0;
		for (uint32_t i = 0; i < KVT_ARRAY_SIZE(d->flush_at) && !cur; i++)
			if (d->flush_at[i].pass == pass)
				cur = &d->flush_at[i].cursor;
			else if (d->flush_at[i].pass < d->flush_at[oldest].pass)
				oldest = i;
		if (!cur) { /* a new pass (or one that outlived 8 newer: it starts over) */
			d->flush_at[oldest].pass = pass;
			d->flush_at[oldest].cursor = 0;
			cur = &d->flush_at[oldest].cursor;
		}
		for (; *cur < d->nslots && found < n; (*cur)++) {
			int32_t id = (int32_t)*cur;
			struct slot *s = &d->slots[id];
			if (s->state != S_PUBLISHED || !s->dirty || s->flush_pass == pass || s->jobs)
				continue;
			s->flush_pass = pass;
			s->pins++;
			refresh(d, s);
			fill_ref(d, id, &refs[found++]);
		}
		pthread_mutex_unlock(&d->mu);
		return found;
	}
	/* Write-back: look at the coldest few first and widen only when they hold too few dirty slots.
	 * Slots taken here are skipped when a wider look passes them again: they are pinned
	 * now. */
	uint32_t want = n > d->nslots / 4 ? d->nslots : n * 4;
	for (;;) {
		uint32_t c = kvt__evict_peek(d->ev, d->scratch, want);
		for (uint32_t i = 0; i < c && found < n; i++) {
			int32_t id = (int32_t)d->scratch[i];
			struct slot *s = &d->slots[id];
			if (s->state != S_PUBLISHED || !s->dirty)
				continue;
			if (s->pins || s->unsaved)
				continue;
			s->pins++;
			refresh(d, s);
			fill_ref(d, id, &refs[found++]);
		}
		if (found == n || c < want || want == d->nslots)
			break;
		want = want > d->nslots / 2 ? d->nslots : want * 2;
	}
	pthread_mutex_unlock(&d->mu);
	return found;
}

uint32_t kvt__dram_headroom(struct kvt_dram *d)
{
	pthread_mutex_lock(&d->mu);
	uint32_t r = d->n_free + d->n_evictable;
	pthread_mutex_unlock(&d->mu);
	return r;
}

void kvt__dram_key(struct kvt_dram *d, int32_t id, struct kvt_key *out)
{
	if (!valid_id(d, id)) {
		memset(out, 0, sizeof(*out));
		return;
	}
	pthread_mutex_lock(&d->mu);
	*out = d->slots[id].key;
	pthread_mutex_unlock(&d->mu);
}

void kvt__dram_stats(struct kvt_dram *d, struct kvt_tier_stats *out)
{
	memset(out, 0, sizeof(*out));
	strncpy(out->name, "dram", sizeof(out->name) - 1);
	pthread_mutex_lock(&d->mu);
	out->objects = d->objects;
	out->bytes = d->bytes;
	out->capacity_bytes = (uint64_t)d->nslots * d->slot_bytes;
	out->evictions = d->evictions;
	out->hits = d->hits;
	out->misses = d->misses;
	out->removes = d->removes;
	pthread_mutex_unlock(&d->mu);
}

int kvt__dram_scan(struct kvt_dram *d,
		   int (*fn)(void *arg, const struct kvt_key *key, uint64_t bytes), void *arg)
{
	int rc = 0;
	/* fn runs under the pool's mutex: it must not call back into this pool. */
	pthread_mutex_lock(&d->mu);
	for (uint32_t i = 0; i < d->nslots && rc == 0; i++) {
		const struct slot *s = &d->slots[i];
		if (s->state == S_PUBLISHED)
			rc = fn(arg, &s->key, s->object_bytes);
	}
	pthread_mutex_unlock(&d->mu);
	return rc;
}
