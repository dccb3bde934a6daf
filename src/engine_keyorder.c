/*
 * engine_keyorder.c - the order of puts and removes of one key, kept while a write of it is
 * out. A write that missed its deadline may still land in its tier at any later time (a
 * stalled disk, a slow server); when it does, the engine must decide whether what landed
 * may stay, and newer puts and removes of the same key must not be undone by it:
 *
 *   - a late write whose key was removed after it, with no put since, is removed again;
 *   - a late write that a newer put of the key follows stays: the key is content-addressed,
 *     so it holds the bytes the newer put holds (and removing it would delete them);
 *   - a late zero-copy write wrote from the caller's buffer, which the caller had back at
 *     the deadline: what landed may be scribbled, so it is always removed again, and no
 *     newer write of the key goes to that tier until that is done (else the removal could
 *     delete the newer copy, or the tier could merge the newer write into the old one);
 *   - a remove that waited for a write of its key to finish does nothing in the deeper
 *     tiers if a put of the key came after it (it would delete that put's copy);
 *   - while a remove is out in a deeper tier (its call not answered, in time or late), a
 *     read or lookup of the key that no put followed takes what a deeper tier holds for a
 *     miss: DRAM let the key go when kvt_remove returned, and a promotion from a tier the
 *     remove has not reached yet would bring it back; the same while a write of the key
 *     that missed its deadline before the remove is still out: it may land before its
 *     answer reaches the engine, and a promotion of it would outlive its removal;
 *   - while a remove call of the key is out on a tier within its deadline, a newer write of
 *     the key to that tier waits for its answer (the write-behind job is parked: the tier
 *     may run the two calls in any order, and the older remove would delete the newer
 *     copy); once past its deadline, the tier is skipped for new writes until the late
 *     answer, as for a late write being removed again (undoing); a DRAM slot that skipped
 *     a tier so stays dirty and is written again once the tier is no longer blocked.
 *
 * One record per key with a job, a late write or a remove out: the newest put's and
 * remove's sequence number (from the write-behind counter, so they order against each other
 * and against jobs) and counts that say which tiers a new write of the key must skip. A hash
 * table under wb_lock; every function here is called with wb_lock held.
 */
#include "engine_internal.h"

static struct keyrec **bucket(struct kvt_store *s, const struct kvt_key *key)
{
	return &s->keyrecs[kvt__key_hash(key) & (KEYREC_BUCKETS - 1)];
}

struct keyrec *kvt__e_keyrec_find(struct kvt_store *s, const struct kvt_key *key)
{
	for (struct keyrec *r = *bucket(s, key); r; r = r->next)
		if (kvt__key_eq(&r->key, key))
			return r;
	return NULL;
}

struct keyrec *kvt__e_keyrec_get(struct kvt_store *s, const struct kvt_key *key)
{
	struct keyrec *r = kvt__e_keyrec_find(s, key);
	if (!r) {
		r = kvt__calloc(1, sizeof(*r));
		if (!r)
			return NULL;
		struct keyrec **b = bucket(s, key);
		r->key = *key;
		r->next = *b;
		*b = r;
	}
	r->refs++;
	return r;
}

void kvt__e_keyrec_put(struct kvt_store *s, struct keyrec *r)
{
	if (!r || --r->refs)
		return;
	for (struct keyrec **p = bucket(s, &r->key); *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
	kvt__free(r);
}

/* The tiers a new write of the key must skip: those with a late zero-copy write or a removal
 * of a late write out, and every tier while another zero-copy write of the key is out (it
 * may yet miss its deadline). Bit i is link i. */
uint32_t kvt__e_keyrec_blocked(const struct keyrec *r)
{
	if (!r)
		return 0;
	if (r->zc_pending)
		return UINT32_MAX;
	uint32_t mask = 0;
	for (int i = 0; i < KVT_MAX_TIERS; i++)
		if (r->zc_late[i] || r->undoing[i] || r->rm_late[i])
			mask |= 1u << i;
	return mask;
}

/* A late write of job seq has landed: may it stay? Not if a remove of the key came after
 * it and no put came after that remove. (A late zero-copy write never stays; the caller
 * checks that.) */
bool kvt__e_keyrec_removed_since(const struct keyrec *r, uint64_t seq)
{
	return r && r->last_remove > seq && r->last_remove > r->last_put;
}

/* A remove that waited for writes of its key: superseded by a put that came after it. */
bool kvt__e_keyrec_put_since(const struct keyrec *r, uint64_t seq)
{
	return r && r->last_put > seq;
}

/* A remove of the key is still out in a deeper tier, or a write of the key that missed its
 * deadline is (it is older than the newest put, so older than a remove after that), and no
 * put of the key came after the newest remove (one not ordered yet is newer than every
 * put): a deeper tier's copy is not to be served or promoted. */
bool kvt__e_keyrec_removing(const struct keyrec *r)
{
	return r && (r->unordered ||
		     ((r->removing || r->late_writes) && r->last_remove > r->last_put));
}

/* A remove call of the key is out on some tier, within its deadline: a new write waits. */
bool kvt__e_keyrec_rm_on(const struct keyrec *r)
{
	if (r)
		for (int i = 0; i < KVT_MAX_TIERS; i++)
			if (r->rm_on[i])
				return true;
	return false;
}

/* A remove call of the key on link is over within its deadline (late false: answered, or
 * never sent), or went past it (late: counted in rm_late until its late answer). Once no
 * call is out in time, the jobs parked on the record start. Takes wb_lock (not held). */
void kvt__e_keyrec_rm_over(struct kvt_store *s, struct keyrec *r, int link, bool late)
{
	pthread_mutex_lock(&s->wb_lock);
	r->rm_on[link]--;
	if (late)
		r->rm_late[link]++;
	struct wb *ready = NULL;
	if (!kvt__e_keyrec_rm_on(r)) {
		ready = r->parked;
		r->parked = NULL;
	}
	pthread_mutex_unlock(&s->wb_lock);
	while (ready) {
		struct wb *w = ready;
		ready = w->park_next;
		w->park_next = NULL;
		kvt__e_wb_start(w, w->end);
	}
}

/* A count that blocked link for the key dropped: true (once) if a job of the key's DRAM
 * slot was to skip the link and it is no longer blocked - the caller writes the slot again
 * (kvt__e_wb_rewrite): else, under write-through, nothing but a flush or close would, and
 * the dirty slot could never be evicted. */
bool kvt__e_keyrec_unblocked(struct keyrec *r, int link)
{
	uint32_t bit = 1u << link;
	if (!(r->redo & bit) || (kvt__e_keyrec_blocked(r) & bit))
		return false;
	r->redo &= ~bit;
	return true;
}

/* Close: is a deeper tier still to answer a call that removes a key (a late remove call,
 * the removal of a late write), or a late write of a removed key still out (it may land,
 * and then is removed again)? The tiers are closed once none is, within a bound. */
bool kvt__e_keyrec_any_removing(struct kvt_store *s)
{
	for (int i = 0; i < KEYREC_BUCKETS; i++)
		for (struct keyrec *r = s->keyrecs[i]; r; r = r->next)
			if (r->removing || kvt__e_keyrec_removing(r))
				return true;
	return false;
}

/* Close: every record should be gone with the last late answer; free any left. */
void kvt__e_keyrec_free_all(struct kvt_store *s)
{
	for (int i = 0; i < KEYREC_BUCKETS; i++) {
		struct keyrec *r = s->keyrecs[i];
		while (r) {
			struct keyrec *next = r->next;
			kvt__free(r);
			r = next;
		}
		s->keyrecs[i] = NULL;
	}
}
