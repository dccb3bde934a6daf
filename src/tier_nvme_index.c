/*
 * tier_nvme_index.c - the NVMe tier's in-memory index: key -> directory, bytes, LRU
 * position, and the chain links that make eviction take a session's last chunk first.
 *
 * Writes name their parent chunk (write_chained); an object with stored children - or a
 * child's write in flight, counted from its start since writes complete out of order - is
 * not a leaf, so a chain is evicted from its end and a prefix outlives its suffixes. A write
 * whose only possible victims are its own ancestors is refused instead (-ENOSPC): a session
 * larger than the capacity keeps its first chunks, which a resume can use. Parent links are
 * saved at close (tier_nvme_recover.c); after a crash every object is a leaf (plain LRU by
 * mtime) until its chain is written again. Mutations run on the ring thread; the hash table
 * is also under ilock because scan() reads it from other threads.
 */
#include "tier_nvme_internal.h"

/* Where key hash h's chain is: the old table's bucket while a growth has not moved it yet
 * (see index_step), else the table's. */
static struct nv_ent **chain_of(struct nv *s, uint64_t h)
{
	if (s->old_buckets) {
		uint64_t i = h & (s->old_nbuckets - 1);
		if (i >= s->old_moved)
			return &s->old_buckets[i];
	}
	return &s->buckets[h & (s->nbuckets - 1)];
}

struct nv_ent *nv_ent_find(struct nv *s, const struct kvt_key *k)
{
	struct nv_ent *e = *chain_of(s, kvt__key_hash(k));
	while (e && !kvt__key_eq(&e->key, k))
		e = e->hnext;
	return e;
}

void nv_lru_unlink(struct nv *s, struct nv_ent *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		s->lru_head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		s->lru_tail = e->prev;
	e->prev = e->next = NULL;
}

void nv_lru_push_head(struct nv *s, struct nv_ent *e)
{
	e->used_at = ++s->lru_clock;
	e->prev = NULL;
	e->next = s->lru_head;
	if (s->lru_head)
		s->lru_head->prev = e;
	else
		s->lru_tail = e;
	s->lru_head = e;
}

void nv_leaf_unlink(struct nv *s, struct nv_ent *e)
{
	if (!e->in_leaf)
		return;
	if (e->lprev)
		e->lprev->lnext = e->lnext;
	else
		s->leaf_head = e->lnext;
	if (e->lnext)
		e->lnext->lprev = e->lprev;
	else
		s->leaf_tail = e->lprev;
	e->lprev = e->lnext = NULL;
	e->in_leaf = false;
}

void nv_leaf_push(struct nv *s, struct nv_ent *e, bool head)
{
	nv_leaf_unlink(s, e);
	e->in_leaf = true;
	if (head) {
		e->lprev = NULL;
		e->lnext = s->leaf_head;
		if (s->leaf_head)
			s->leaf_head->lprev = e;
		else
			s->leaf_tail = e;
		s->leaf_head = e;
	} else {
		e->lnext = NULL;
		e->lprev = s->leaf_tail;
		if (s->leaf_tail)
			s->leaf_tail->lnext = e;
		else
			s->leaf_head = e;
		s->leaf_tail = e;
	}
}

void nv_lru_touch(struct nv *s, struct nv_ent *e)
{
	if (e->in_leaf && s->leaf_head != e)
		nv_leaf_push(s, e, true);
	if (s->lru_head == e)
		return;
	nv_lru_unlink(s, e);
	nv_lru_push_head(s, e);
}

/* Count (delta +1) a child of the chunk p on p's entry, or on p's write in flight (writes
 * complete out of order: the entry it publishes takes the count over), or uncount (-1) it
 * from the one with that uid. An entry with children is not a leaf, so not a victim; when
 * its last child goes it becomes the next leaf to nv_evict (its chain's end was just evicted).
 * Returns the uid counted on, 0 when p is neither stored nor being written. */
uint64_t nv_parent_count(struct nv *s, const struct kvt_key *p, int delta, uint64_t uid)
{
	struct nv_ent *e = nv_ent_find(s, p);
	if (e && (delta > 0 || e->uid == uid)) {
		if (delta > 0) {
			if (e->children++ == 0)
				nv_leaf_unlink(s, e);
		} else if (e->children && --e->children == 0) {
			nv_leaf_push(s, e, false);
		}
		return e->uid;
	}
	struct nv_op *w = *nv_leader_slot(s, p);
	if (w && (delta > 0 || w->uid == uid)) {
		if (delta > 0)
			w->children++;
		else if (w->children)
			w->children--;
		return w->uid;
	}
	return 0;
}

/* Children by parent. Every entry that names a parent is filed under the parent's key, in
 * one of two tables (the same links: an entry is in at most one):
 *  - orphans: counted on nothing (parent_uid 0), because its parent was neither stored nor
 *    being written when it was (a chunk written before its parent: write-back cleans the
 *    coldest dirty chunks first, and admission can decline a parent at its put and take it
 *    at a later hit). The parent's entry adopts them when it is indexed (since 2026-12-05;
 *    before, such a parent never learnt of its child: it stayed a leaf and went before its
 *    suffix, which could then no longer be resumed from this tier);
 *  - kids: counted on the parent copy or write whose uid is parent_uid. When that copy is
 *    removed, or that write fails, with children still counted, they go back to the orphans
 *    (nv_kids_orphan), so the parent's next copy counts them (before, they stayed counted on
 *    the uid that was gone, and the new copy was a leaf).
 * A child write in flight counted on a write that has failed is checked when it publishes
 * (nv_chain_take). The orphan table is walked at every index (few entries: chains written
 * out of order); the kids table only when a parent with children goes, so it is wider. */
static struct nv_ent ***table_of(struct nv *s, bool kids)
{
	return kids ? &s->kids : &s->orphans;
}

static uint32_t table_buckets(bool kids)
{
	return kids ? NV_KIDS_BUCKETS : NV_ORPHAN_BUCKETS;
}

static struct nv_ent **bucket_of(struct nv *s, bool kids, const struct kvt_key *parent)
{
	return &(*table_of(s, kids))[kvt__key_hash(parent) % table_buckets(kids)];
}

static void unfile(struct nv *s, struct nv_ent *e)
{
	if (e->filed == NV_UNFILED)
		return;
	if (e->oprev)
		e->oprev->onext = e->onext;
	else
		*bucket_of(s, e->filed == NV_KID, &e->parent) = e->onext;
	if (e->onext)
		e->onext->oprev = e->oprev;
	e->oprev = e->onext = NULL;
	e->filed = NV_UNFILED;
}

/* File e by its parent link and parent_uid (after any change to either). */
static void file(struct nv *s, struct nv_ent *e)
{
	unfile(s, e);
	if (!e->has_parent || kvt__key_eq(&e->key, &e->parent))
		return;
	bool kids = e->parent_uid != 0;
	struct nv_ent ***t = table_of(s, kids);
	if (!*t && !(*t = kvt__calloc(table_buckets(kids), sizeof(**t))))
		return; /* no memory: unfiled, as before children were filed */
	struct nv_ent **b = bucket_of(s, kids, &e->parent);
	e->oprev = NULL;
	e->onext = *b;
	if (*b)
		(*b)->oprev = e;
	*b = e;
	e->filed = kids ? NV_KID : NV_ORPHAN;
}

static void set_parent_uid(struct nv *s, struct nv_ent *e, uint64_t uid)
{
	e->parent_uid = uid;
	file(s, e);
}

/* p was just indexed: its orphans are its children now, and p is no leaf. */
void nv_orphans_adopt(struct nv *s, struct nv_ent *p)
{
	if (!s->orphans)
		return;
	struct nv_ent *e = *bucket_of(s, false, &p->key), *next;
	for (; e; e = next) {
		next = e->onext;
		if (e == p || !kvt__key_eq(&e->parent, &p->key))
			continue;
		set_parent_uid(s, e, p->uid);
		if (p->children++ == 0)
			nv_leaf_unlink(s, p);
	}
}

/* The parent copy or write uid of the chunk parent is gone with children counted on it:
 * they are orphans again, for its next copy to adopt. */
void nv_kids_orphan(struct nv *s, const struct kvt_key *parent, uint64_t uid)
{
	if (!s->kids)
		return;
	struct nv_ent *e = *bucket_of(s, true, parent), *next;
	for (; e; e = next) {
		next = e->onext;
		if (e->parent_uid == uid && kvt__key_eq(&e->parent, parent))
			set_parent_uid(s, e, 0);
	}
}

/* The children counted on uid from are counted on uid to now (the same parent's entry). */
void nv_kids_relabel(struct nv *s, const struct kvt_key *parent, uint64_t from, uint64_t to)
{
	if (!s->kids || from == to)
		return;
	for (struct nv_ent *e = *bucket_of(s, true, parent); e; e = e->onext)
		if (e->parent_uid == from && kvt__key_eq(&e->parent, parent))
			e->parent_uid = to;
}

/* Is uid the parent's stored copy or its write in flight? */
static bool uid_live(struct nv *s, const struct kvt_key *parent, uint64_t uid)
{
	struct nv_ent *p = nv_ent_find(s, parent);
	if (p && p->uid == uid)
		return true;
	struct nv_op *w = *nv_leader_slot(s, parent);
	return w && w->uid == uid;
}

/* e was just indexed from write op, which counted on op->parent_uid from its start: e takes
 * that count over if it is still held (the parent's write it counted on may have failed
 * meanwhile: then nothing holds it, and e is counted afresh below), and op no longer owes
 * its release. Then e counts on whatever holds its parent now, or is an orphan. */
void nv_chain_take(struct nv *s, struct nv_ent *e, struct nv_op *op)
{
	if (op->parent_uid && !e->parent_uid && kvt__key_eq(&e->parent, &op->parent)) {
		if (uid_live(s, &op->parent, op->parent_uid))
			set_parent_uid(s, e, op->parent_uid);
		op->parent_uid = 0;
	}
	nv_chain_count(s, e);
}

/* e names a parent: counted on it (or its write in flight) now, or kept as an orphan until
 * it is written. */
void nv_chain_count(struct nv *s, struct nv_ent *e)
{
	if (!e->has_parent || e->parent_uid || kvt__key_eq(&e->key, &e->parent))
		return;
	set_parent_uid(s, e, nv_parent_count(s, &e->parent, +1, 0));
}

/* A stored entry learns its parent (a later write of its key, or .kvtier.chains). */
void nv_chain_link(struct nv *s, struct nv_ent *e, const struct kvt_key *parent)
{
	if (e->parent_uid || kvt__key_eq(&e->key, parent))
		return;
	unfile(s, e); /* (filed under its old parent's key) */
	e->parent = *parent;
	e->has_parent = true;
	nv_chain_count(s, e);
}

/* e is going away: it is no longer a leaf, and no longer a child of its parent; the
 * children counted on it are orphans again. */
static void chain_unlink(struct nv *s, struct nv_ent *e)
{
	unfile(s, e);
	nv_leaf_unlink(s, e);
	if (e->parent_uid)
		nv_parent_count(s, &e->parent, -1, e->parent_uid);
	e->parent_uid = 0;
	if (e->children)
		nv_kids_orphan(s, &e->key, e->uid);
	e->children = 0;
}

/* A chunk refused for lack of room cuts its chain here: the chunks after it could never be
 * resumed from this tier, so they must not evict anything either (else a session larger
 * than the capacity would evict its own prefix one step removed). */
void nv_refused_add(struct nv *s, const struct kvt_key *k)
{
	s->refused[s->refused_next++ % NV_REFUSED] = kvt__key_hash(k) | 1;
}

bool nv_refused_has(const struct nv *s, const struct kvt_key *k)
{
	uint64_t h = kvt__key_hash(k) | 1;
	for (uint32_t i = 0; i < NV_REFUSED; i++)
		if (s->refused[i] == h)
			return true;
	return false;
}

/* The next object to evict for a write of op (NULL op: no write): the least recently used
 * leaf that is neither op's parent nor the copy of op's own key that its admission sets
 * aside (nv_ent_aside_kept: evicted, or recycled as op's temp file, it was gone for good
 * if op then failed - until 2026-12-06, integ.nvme_reput_refused 3). NULL when those are
 * all that is left - or no leaf at all: every stored object has a child stored or in
 * flight (the leaves to be are still being written), and evicting any would cut a chain.
 * (Only a caller naming parents in a cycle could leave no leaf for good; then writes are
 * refused, nothing is lost.) room_possible counts what this may return. */
struct nv_ent *nv_victim(struct nv *s, const struct nv_op *op)
{
	for (struct nv_ent *e = s->leaf_tail; e; e = e->lprev) {
		if (op && op->has_parent && kvt__key_eq(&e->key, &op->parent))
			continue;
		if (op && nv_ent_aside_kept(e) && kvt__key_eq(&e->key, &op->key))
			continue;
		return e;
	}
	return NULL;
}

void nv_publish_counts(struct nv *s)
{
	ST_SET(s, objects, s->nents);
	ST_SET(s, bytes, s->used);
}

int nv_index_init(struct nv *s)
{
	s->nbuckets = 1024;
	s->buckets = kvt__calloc(s->nbuckets, sizeof(*s->buckets));
	return s->buckets ? 0 : -ENOMEM;
}

void nv_index_free(struct nv *s)
{
	kvt__free(s->old_buckets);
	kvt__free(s->buckets);
	s->old_buckets = s->buckets = NULL;
}

/* Why the table grows a little at a time: rehashed in one step, a doubling walked every
 * entry on the ring thread with ilock held - 140 ms at 2M entries, 550 ms at 8M
 * (bench/nvme_index_bench.c), every read and write of the tier stopped meanwhile. Now a
 * doubling only allocates the new table (its zeroed pages come as they are touched); the
 * old one stays, and each insert and remove moves INDEX_STEP of its buckets over
 * (index_step), in order: a key's chain is in the old table until its bucket has moved
 * (chain_of). The next doubling is due after as many inserts as the old table had
 * buckets, by when every one has moved. Called with ilock held. */
#define INDEX_STEP 4

static void index_step(struct nv *s, uint64_t buckets)
{
	while (s->old_buckets && buckets--) {
		struct nv_ent *e = s->old_buckets[s->old_moved], *nx;
		for (; e; e = nx) {
			nx = e->hnext;
			struct nv_ent **b = &s->buckets[kvt__key_hash(&e->key) & (s->nbuckets - 1)];
			e->hnext = *b;
			*b = e;
		}
		s->old_buckets[s->old_moved] = NULL;
		if (++s->old_moved == s->old_nbuckets) {
			kvt__free(s->old_buckets);
			s->old_buckets = NULL;
			s->old_nbuckets = s->old_moved = 0;
		}
	}
}

static void index_grow(struct nv *s)
{
	if (s->old_buckets) /* (not reached: a doubling ends before the next is due) */
		index_step(s, s->old_nbuckets);
	struct nv_ent **b = kvt__calloc(s->nbuckets * 2, sizeof(*b));
	if (!b)
		return; /* chains just get longer */
	s->old_buckets = s->buckets;
	s->old_nbuckets = s->nbuckets;
	s->old_moved = 0;
	s->buckets = b;
	s->nbuckets *= 2;
}

void nv_index_walk(struct nv *s, kvt_scan_fn fn, void *arg)
{
	pthread_mutex_lock(&s->ilock);
	/* (the buckets of a growing table not moved yet, then the table) */
	for (uint64_t i = s->old_moved; s->old_buckets && i < s->old_nbuckets; i++)
		for (struct nv_ent *e = s->old_buckets[i]; e; e = e->hnext)
			if (fn(arg, &e->key, e->bytes))
				goto out;
	for (uint64_t i = 0; i < s->nbuckets; i++)
		for (struct nv_ent *e = s->buckets[i]; e; e = e->hnext)
			if (fn(arg, &e->key, e->bytes))
				goto out;
out:
	pthread_mutex_unlock(&s->ilock);
}

/* New entry at the LRU head (most recent). */
struct nv_ent *nv_ent_insert(struct nv *s, const struct kvt_key *k, uint32_t dir, uint64_t bytes)
{
	struct nv_ent *e = kvt__calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->key = *k;
	e->dir = dir;
	e->bytes = bytes;
	e->gen = ++s->gen;
	e->uid = ++s->uids;
	pthread_mutex_lock(&s->ilock);
	index_step(s, INDEX_STEP);
	if (s->nents >= s->nbuckets)
		index_grow(s);
	struct nv_ent **b = chain_of(s, kvt__key_hash(k));
	e->hnext = *b;
	*b = e;
	s->nents++;
	s->used += bytes;
	pthread_mutex_unlock(&s->ilock);
	nv_lru_push_head(s, e);
	nv_leaf_push(s, e, true);
	nv_publish_counts(s);
	return e;
}

void nv_ent_remove(struct nv *s, struct nv_ent *e)
{
	nv_ent_set_lseg(s, e, 0); /* off its log segment's list */
	nv_fdc_detach(s, e);
	chain_unlink(s, e);
	nv_lru_unlink(s, e);
	pthread_mutex_lock(&s->ilock);
	index_step(s, INDEX_STEP); /* (a store that only shrinks still ends a growth) */
	struct nv_ent **pp = chain_of(s, kvt__key_hash(&e->key));
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	s->nents--;
	s->used -= e->bytes;
	pthread_mutex_unlock(&s->ilock);
	nv_publish_counts(s);
	kvt__free(e);
}

/* drop_corrupt names a key, not the copy its read found, and comes after that read: K may
 * have been removed and written again since, and the new copy read too (good bytes). So
 * every read remembers the gen of the entry it starts on (gens are never reused, and every
 * entry that holds new bytes gets a new one: nv_ent_insert, nv_write_index; a log object
 * re-appended keeps its own, the same bytes), per key until the key's next report. Reads
 * that served different copies mark the key conflicted: the report may be about either, and
 * taking it for the current one would drop a good copy for a corrupt one. So it drops
 * nothing; a corrupt copy left in place is found again by the next read that uses it, whose
 * report then drops it. Why not a bit in the entry ("a read started on this copy", until
 * 2026-12-04), or forget a key's reads when it is written or removed: the report of a read
 * of the old copy can come after the new copy was read, and was then taken for a report
 * about the new one (a good object dropped: integ.nvme_safety). Direct-mapped by key hash,
 * as tier_fs.c's: a key whose record another key's read took over starts afresh (what is
 * lost is the rare window of a read of K, a read of another key of its slot, K rewritten
 * and read, all before the first read's report). Ring thread only (reads start and drops
 * run there): no lock. */
static struct nv_served *served_slot(struct nv *s, const struct kvt_key *k)
{
	return &s->served[kvt__key_hash(k) % NV_SERVED];
}

/* A read starts on e. */
void nv_served_note(struct nv *s, const struct nv_ent *e)
{
	struct nv_served *r = served_slot(s, &e->key);
	if (r->used && kvt__key_eq(&r->key, &e->key)) {
		if (r->gen != e->gen)
			r->conflicted = true;
		r->reads += r->reads < UINT32_MAX;
	} else {
		*r = (struct nv_served){.key = e->key, .gen = e->gen, .reads = 1, .used = true};
	}
}

/* A read of k was found corrupt: true if that read is known to have served e (k's entry
 * now, NULL if none), the one copy of k that reads served since k's last report. A report
 * takes one read: the record is forgotten once none is left, or at once if conflicted.
 * Kept while reads are left, a read of a newer copy before the late report of one of them
 * conflicts it - forgotten at the first report, that late report was taken for the new
 * copy and dropped it (the pattern a review reproduced on RADOS, 2026-12-05). */
bool nv_served_take(struct nv *s, const struct kvt_key *k, const struct nv_ent *e)
{
	struct nv_served *r = served_slot(s, k);
	if (!r->used || !kvt__key_eq(&r->key, k))
		return false;
	bool ok = !r->conflicted && e && r->gen == e->gen;
	r->used = !r->conflicted && --r->reads > 0;
	return ok;
}
