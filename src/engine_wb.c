/*
 * engine_wb.c - write-behind and flush. A job writes one object (a pinned DRAM slot, or a
 * staging buffer without DRAM) to every deeper tier that admits it, each write under a
 * deadline. The job completes when every tier answered or missed its deadline; the slot
 * or buffer is let go only when every tier has let go of it. A tier that misses simply
 * lacks the object (counted as writes_skipped); a DRAM slot that no deeper tier took
 * because they failed stays dirty, marked unsaved (written again by flush and close,
 * evictable meanwhile, its eviction counted and reported by the next flush). kvt_flush
 * writes every dirty slot, waits
 * for the jobs submitted before it, then calls each tier's durability op under its
 * deadline, and names the tier that could not. A write that lands after its deadline is
 * kept or removed again by the key's order of puts and removes (engine_keyorder.c). A
 * slot whose key was removed from DRAM before its job registered is not written (the
 * remove found no job to wait for and cleared the deeper tiers itself).
 */
#include <assert.h>

#include "engine_internal.h"

/* ------------------------------------------------------------ write-behind */

static void flush_tiers(struct flush_waiter *f);

/* The job stops counting in wb_holds (once): its bytes are let go, or a tier missed its
 * deadline and may hold them for as long as it hangs. */
static void wb_drop_hold(struct wb *w)
{
	if (!atomic_exchange(&w->hold_dropped, true))
		atomic_fetch_sub(&w->s->wb_holds, 1);
}

static void wb_unref(struct wb *w)
{
	if (atomic_fetch_sub(&w->refs, 1) != 1)
		return;
	struct kvt_store *s = w->s;
	if (w->ref.id >= 0)
		kvt__dram_unpin(s->dram, w->ref.id);
	else
		kvt__e_bounce_put(s, w->ref.buf);
	wb_drop_hold(w); /* after the unpin: see kvt__e_do_put */
	if (w->rec) {
		pthread_mutex_lock(&s->wb_lock);
		kvt__e_keyrec_put(s, w->rec);
		pthread_mutex_unlock(&s->wb_lock);
	}
	kvt__free(w);
}

static void wb_set_err(struct wb *w, int rc)
{
	int zero = 0;
	atomic_compare_exchange_strong(&w->first_err, &zero, rc);
}

/* Failures a flush keeps with their key's record, at most (then, as those of a job without
 * a record, as they are: a failure a newer job repaired still fails the flush) */
#define FLUSH_FAILS_MAX 4096u

/* Job w's write to link i failed, and w is in flush f's window (wb_lock held). Kept with the
 * key's record, so that flush_tiers can tell whether a newer job of the key wrote link i
 * in time since: then the tier holds the chunk (content-addressed: the same bytes) and the
 * failure is no longer the flush's. */
static void flush_note_fail(struct flush_waiter *f, struct wb *w, int i)
{
	if (w->seq > f->target) /* after its window closed: not the flush's */
		return;
	if (w->rec && f->n_fails < FLUSH_FAILS_MAX) {
		if (f->n_fails == f->cap_fails) {
			uint32_t cap = f->cap_fails ? f->cap_fails * 2 : 16;
			struct flush_fail *p = kvt__realloc(f->fails, cap * sizeof(*p));
			if (p) {
				f->fails = p;
				f->cap_fails = cap;
			}
		}
		if (f->n_fails < f->cap_fails) {
			f->fails[f->n_fails++] =
			    (struct flush_fail){.rec = w->rec, .seq = w->seq, .link = i};
			w->rec->refs++;
			return;
		}
	}
	if (f->first_fail[i] > w->seq)
		f->first_fail[i] = w->seq;
}

/* Whether a flush answers for this job: not a hit's second offer of a clean chunk
 * (w->reoffer) nor a promotion (a hit from a deeper tier, written only to the tiers above
 * it: w->end), whose chunk that deeper tier holds whatever happens here. */
static bool wb_owes_flush(const struct wb *w)
{
	return !w->reoffer && w->end >= w->s->n_links;
}

/* A tier did not take this job's object for a reason flush must report: every flush
 * waiting whose window may hold the job is told (before the job completes, so before any
 * of them can be ready). */
static void wb_tier_failed(struct wb *w, struct link *l, int rc)
{
	struct kvt_store *s = w->s;
	int i = (int)(l - s->links);
	if (w->reoffer) {
		/* A hit's second offer owes nothing (the chunk was clean): no flush fails for
		 * it, and the chunk is offered to the tier again at its next hit. */
		kvt__dram_add_reoffer(s->dram, w->ref.id, (uint8_t)(1u << i));
		return;
	}
	if (!wb_owes_flush(w)) {
		/* A promotion owes nothing either: the deeper tier it came from holds it (until
		 * 2026-12-06 a flush whose window held the job failed -EIO) */
		atomic_store(&w->failed_link, i + 1);
		wb_set_err(w, rc);
		return;
	}
	pthread_mutex_lock(&s->wb_lock);
	w->flush_failed |= 1u << i;
	struct kvt_list *p;
	kvt_list_for_each(p, &s->flushes)
	{
		struct flush_waiter *f = kvt_list_entry(p, struct flush_waiter, node);
		if (w->seq >= f->from)
			flush_note_fail(f, w, i);
	}
	pthread_mutex_unlock(&s->wb_lock);
	atomic_store(&w->failed_link, i + 1);
	wb_set_err(w, rc);
}

void (*_Atomic kvt__test_wb_decided)(struct wb *w);

/* The job is complete: every tier answered or missed its deadline. */
static void wb_complete(struct wb *w)
{
	struct kvt_store *s = w->s;
	/* Clean unless a tier was never tried for lack of memory: then it stays dirty for
	 * flush or write-back to retry. A tier skipped for an older call of the key still out
	 * there counts as failed here, and the slot, if dirty, is written again once that call
	 * is answered (kvt__e_wb_rewrite).
	 * A tier that failed or missed its deadline simply lacks the object - but if no
	 * deeper tier took it, the DRAM copy is the only one: it stays dirty, marked unsaved,
	 * so that flush and close write it again and an eviction of it is counted and
	 * reported (marking it clean let it go unnoticed, and a later flush said 0). A tier
	 * that declined it (admission, write budget, full) leaves it clean: a choice, not a
	 * failure. */
	/* With a newer job of the key out (a flush's rewrite, a selective write), the newest
	 * decides: an older one that failed must not mark unsaved a slot the newer one wrote.
	 * The look and the marks in one hold of wb_lock (then the pool's mutex), in which a
	 * newer job neither registers nor completes: until 2026-12-06 the marks came after the
	 * lock was let go, and a newer job registered, written and marked clean in between was
	 * marked unsaved again (a review: a false loss, -EIO from a flush;
	 * integ.store_wb_newer_marks). The links this job wrote go on the key's record in the
	 * same hold, before any flush waiting for the job can be ready (flush_tiers). */
	bool newer = false;
	if (w->rec) {
		pthread_mutex_lock(&s->wb_lock);
		newer = w->rec->last_put > w->seq;
		for (uint32_t m = atomic_load(&w->wrote); m; m &= m - 1) {
			int i = __builtin_ctz(m);
			if (w->rec->wrote[i] < w->seq)
				w->rec->wrote[i] = w->seq;
		}
	}
	/* A hit's second offer of a declined chunk (w->reoffer) changes no mark: the slot was
	 * clean, a tier that took it at its put still holds it, none owes it, and a job that
	 * owns the slot's state (a selective write, a flush's rewrite) decides. */
	if (w->ref.id >= 0 && !w->keep_dirty && !newer && !w->reoffer) {
		int failed = atomic_load(&w->failed_link);
		/* A promotion (a hit from a deeper tier, written only to the tiers above it:
		 * w->end) is held by that tier whatever happened here: a failure leaves it clean,
		 * its eviction no loss (until 2026-12-05 it was marked unsaved, its eviction
		 * counted as lost and flush failed -EIO) */
		if (!atomic_load(&w->ok) && failed && w->end >= s->n_links) {
			atomic_store(&s->unsaved_link, failed - 1); /* before it can be evicted */
			kvt__dram_set_unsaved(s->dram, w->ref.id);
		} else {
			kvt__dram_set_dirty(s->dram, w->ref.id, false);
		}
	}
	if (w->rec)
		pthread_mutex_unlock(&s->wb_lock);
	void (*decided)(struct wb *) = atomic_load(&kvt__test_wb_decided);
	if (decided)
		decided(w);
	if (w->ref.id >= 0 && !w->reoffer) /* after its marks: a flush that sees no job sees them */
		kvt__dram_job(s->dram, w->ref.id, false);
	/* Unlink; wake flushes whose target is now below every outstanding job, and the
	 * removes that waited for this job. */
	struct kvt_list ready;
	kvt_list_init(&ready);
	pthread_mutex_lock(&s->wb_lock);
	kvt_list_del(&w->node);
	s->wb_pending--;
	if (w->rec) {
		w->rec->pending--;
		if (w->tail)
			w->rec->zc_pending--;
	}
	struct kvt_list *first = kvt_list_first(&s->wb);
	uint64_t oldest = first ? kvt_list_entry(first, struct wb, node)->seq : UINT64_MAX;
	struct kvt_list *p, *tmp;
	kvt_list_for_each_safe(p, tmp, &s->flushes)
	{
		struct flush_waiter *f = kvt_list_entry(p, struct flush_waiter, node);
		if (f->target < oldest) {
			kvt_list_del(&f->node);
			kvt_list_add_tail(&ready, &f->node);
		}
	}
	struct remove_op *after = w->after;
	w->after = NULL;
	pthread_cond_broadcast(&s->wb_cond);
	pthread_mutex_unlock(&s->wb_lock);
	/* The put's answer once the job no longer counts as out: answered before, a caller
	 * putting the key again at once (a zero-copy put) found the job's zc_pending and was
	 * refused -EAGAIN with nothing late. Before the removes that waited for it start. */
	if (w->cb) {
		int err = atomic_load(&w->first_err);
		struct kvt_result res = {.status = atomic_load(&w->ok) ? 0 : (err ? err : -EIO),
					 .tier = KVT_TIER_NONE,
					 .bytes = w->ref.object_bytes};
		kvt__e_complete(s, w->cb, w->arg, w->direct, &res);
	}
	while (after) {
		struct remove_op *o = after;
		after = *(struct remove_op **)o; /* next_after is a remove_op's first member */
		kvt__e_remove_start(o);
	}
	while ((p = kvt_list_pop(&ready)))
		flush_tiers(kvt_list_entry(p, struct flush_waiter, node));
	wb_unref(w);
}

static void wb_leg_finish(struct wb *w)
{
	if (atomic_fetch_sub(&w->legs, 1) == 1)
		wb_complete(w);
}

/* A tier's write budget refused the chunk (-EDQUOT): a verdict the clock changes (the
 * budget is a rolling day), so its DRAM slot is offered to that tier again at its next hit,
 * as admission's changeable verdicts are (not one larger than a whole day's budget, which
 * the tier answers -EFBIG: every hit would start a write-behind job for nothing). Until 2026-12-05 it was not: a chunk refused
 * once was never written while it stayed in DRAM, and a second offer refused lost its
 * mark. */
static void budget_reoffer(struct wb *w, const struct kvt_slot_ref *ref, int link, int rc)
{
	if (rc == -EDQUOT && ref->id >= 0)
		kvt__dram_add_reoffer(w->s->dram, ref->id, (uint8_t)(1u << link));
}

static void wb_leg_account(struct wb *w, struct link *l, int rc)
{
	struct kvt_store *s = w->s;
	if (rc < 0) {
		/* refused (full, over a budget or quota, or larger than the tier takes: an S3
		 * server's EntityTooLarge): not a failing tier */
		if (rc == -ENOSPC || rc == -EDQUOT || rc == -EFBIG) {
			atomic_fetch_add(&l->writes_refused, 1);
			budget_reoffer(w, &w->ref, (int)(l - s->links), rc);
			wb_set_err(w, rc);
		} else {
			wb_tier_failed(w, l, rc);
		}
		KVT_DEBUG(&s->log, "write-behind to %s failed: %s", l->name, kvt_strerror(rc));
	} else {
		atomic_fetch_add(&w->ok, 1);
		atomic_fetch_or(&w->wrote, 1u << (l - s->links));
		kvt__e_event(s, KVT_EVENT_STORED, KVT_REASON_NONE, (int)(l - s->links), &w->key,
			     w->ref.object_bytes);
	}
}

/* The tier answered in time. */
static void wb_leg_done(void *arg, int64_t rc64)
{
	struct wb_leg *leg = arg;
	struct wb *w = leg->w;
	int rc = rc64 < 0 ? (int)rc64 : 0;
	kvt__e_link_result(w->s, leg->l, rc);
	wb_leg_account(w, leg->l, rc);
	kvt__free(leg);
	wb_leg_finish(w);
	wb_unref(w); /* the tier's hold on the bytes */
}

/* Removing a late write again: the key's record counts it (undoing) until the tier answers
 * the remove, in time or late, so that no new write of the key reaches the tier before.
 * It also counts as a remove out (removing, removes_out): kvt_remove may have completed
 * long before the late write landed, and until the undo is answered a get or lookup that
 * no put followed must not find the copy, nor promote it into DRAM, where it would outlive
 * the undo (kvt__e_remove_pending; a put since the remove still wins). Before that, from
 * its deadline on, the late write itself is counted (late_writes): it may land on the tier
 * well before its answer reaches the engine. Undos are sent until kvt_store_close is about
 * to close the tiers (tiers_closing), and close waits for them within a bound first. */
struct undo {
	struct kvt_store *s;
	struct keyrec *rec;
	int link;
};

/* The counts a late write's undo holds on the key's record (rec NULL: none). */
static void undo_unmark(struct kvt_store *s, struct keyrec *rec, int i)
{
	if (!rec) /* the job had no record (no memory), nothing counted */
		return;
	struct kvt_key key;
	pthread_mutex_lock(&s->wb_lock);
	rec->undoing[i]--;
	rec->removing--;
	bool rewrite = kvt__e_wb_rewrite_claim(s, rec, i);
	key = rec->key;
	kvt__e_keyrec_put(s, rec);
	pthread_mutex_unlock(&s->wb_lock);
	atomic_fetch_sub(&s->removes_out, 1);
	if (rewrite)
		kvt__e_wb_rewrite(s, &key);
}

static void undo_release(struct undo *u)
{
	undo_unmark(u->s, u->rec, u->link);
	kvt__free(u);
}

static void undo_done(void *arg, int64_t rc)
{
	struct undo *u = arg;
	if (rc < 0 && rc != -ENOENT)
		KVT_WARN(&u->s->log, "tier %s: removing a late write again failed: %s",
			 u->s->links[u->link].name, kvt_strerror((int)rc));
	undo_release(u);
}

static void undo_late(struct guard *g)
{
	undo_release(g->orphan_arg);
}

static void undo_expire(struct guard *g)
{
	g->orphan_fn = undo_late;
	g->orphan_arg = g->op;
}

/* Remove the late write of key from link i again (the record's undoing is counted; rec
 * NULL: a job without a record). */
static void undo_late_write(struct kvt_store *s, struct keyrec *rec, const struct kvt_key *key,
			    int i)
{
	struct link *l = &s->links[i];
	struct undo *u = kvt__malloc(sizeof(*u));
	struct guard *g = u ? kvt__e_guard_new(s, l, "remove", 0, u, undo_done, undo_expire) : NULL;
	bool sent = false;
	if (g) {
		*u = (struct undo){.s = s, .rec = rec, .link = i};
		if (l->t->ops->remove(l->t, key, kvt__e_guard_cb, g) == 0) {
			kvt__e_guard_arm(g);
			sent = true;
		} else {
			kvt__e_guard_cancel(g);
		}
	}
	/* the call is out (or never will be): close may close the tier */
	pthread_mutex_lock(&s->wb_lock);
	s->undo_sending--;
	pthread_cond_broadcast(&s->wb_cond);
	pthread_mutex_unlock(&s->wb_lock);
	if (sent)
		return;
	KVT_WARN(&s->log, "tier %s: a late write could not be removed again", l->name);
	kvt__free(u);
	undo_unmark(s, rec, i);
}

/* The late answer to a write that missed its deadline (the guard's last reference). What
 * landed stays if no remove of the key came after it (or a put came after that remove:
 * the same content); a zero-copy write's never stays, since it was written from the
 * caller's buffer, which the caller had back at the deadline and may have changed. */
/* A write's failure that says it was not applied: refused before anything was stored. */
bool kvt__e_write_refused(int rc)
{
	switch (-rc) {
	case ENOSPC: case EDQUOT: case EFBIG: case EACCES: case EPERM: case EINVAL: case EROFS:
	case ECONNREFUSED: case EHOSTUNREACH: case ENETUNREACH: case ENOMEM: case EAGAIN:
	case EOPNOTSUPP:
		return true;
	default:
		return false;
	}
}

static void wb_leg_orphan(struct guard *g)
{
	struct wb_leg *leg = g->orphan_arg;
	struct wb *w = leg->w;
	struct kvt_store *s = w->s;
	struct link *l = leg->l;
	int i = (int)(l - s->links);
	/* A failure other than a definite refusal is an outcome unknown: -ETIMEDOUT from a
	 * Redis or S3 tier that gave up waiting for its server, -EIO or -ECONNRESET after the
	 * server applied the SET or PUT and the answer was lost. For removing it again it
	 * counts as landed (until 2026-12-06 only -ETIMEDOUT did, and before that none: a
	 * removed key came back when the server had applied the write; store_late_writes 13,
	 * 14); it is not announced stored. Removing a write that never landed costs a remove
	 * answered -ENOENT.
	 * This narrows the window, it does not close it: a write the server runs after the
	 * remove sent now (a stalled server, another Redis connection) still lands after it. */
	bool landed = g->late_rc >= 0, undo = false;
	bool maybe = landed || !kvt__e_write_refused(g->late_rc);
	pthread_mutex_lock(&s->wb_lock);
	struct keyrec *rec = w->rec;
	if (rec) {
		rec->late_writes--;
		if (w->tail)
			rec->zc_late[i]--;
	}
	bool drop = w->tail || kvt__e_keyrec_removed_since(rec, w->seq);
	/* Also while the store is closing: its tiers are open until close has waited for the
	 * undos it can (tiers_closing) */
	if (maybe && drop && !s->tiers_closing) {
		s->undo_sending++;
		if (rec) {
			/* in the same hold of the lock: no write slips in, and no read finds the
			 * copy unmarked */
			rec->undoing[i]++;
			rec->removing++;
			rec->refs++;
			atomic_fetch_add(&s->removes_out, 1);
		}
		undo = true;
	}
	bool removed = undo && kvt__e_keyrec_removing(rec);
	pthread_mutex_unlock(&s->wb_lock);
	if (rec) /* after the record's count: the fast path never says none while one is */
		atomic_fetch_sub(&s->late_writes, 1);
	if (landed && !drop) {
		kvt__e_event(s, KVT_EVENT_STORED, KVT_REASON_NONE, i, &w->key, w->ref.object_bytes);
		/* the tier holds it after all: not unsaved (its eviction is no loss), and not
		 * offered to it again (a second offer's deadline marked it again: until
		 * 2026-12-05 its next hit wrote the chunk there once more) */
		if (w->ref.id >= 0) {
			kvt__dram_clear_unsaved(s->dram, w->ref.id);
			kvt__dram_clear_reoffer(s->dram, w->ref.id, (uint8_t)(1u << i));
		}
	}
	/* A promotion that started before the mark and read what landed does not publish it
	 * (fill_lock after wb_lock, as kvt__e_do_remove does) */
	if (removed)
		kvt__e_fill_removed(s, &w->key);
	if (undo)
		undo_late_write(s, rec, &w->key, i);
	kvt__free(leg);
	wb_unref(w);
}

/* The write missed its deadline: the job goes on without this tier (the object is not
 * there, as far as the engine knows); the slot or buffer stays held for the tier until it
 * answers. */
static void wb_leg_expire(struct guard *g)
{
	struct wb_leg *leg = g->op;
	struct wb *w = leg->w;
	struct kvt_store *s = w->s;
	if (w->rec) { /* before the job can complete: no window without a count */
		atomic_fetch_add(&s->late_writes, 1); /* before the record's: see wb_leg_orphan */
		pthread_mutex_lock(&s->wb_lock);
		w->rec->late_writes++;
		if (w->tail)
			w->rec->zc_late[leg->l - s->links]++;
		pthread_mutex_unlock(&s->wb_lock);
	}
	atomic_fetch_add(&leg->l->writes_skipped, 1);
	wb_tier_failed(w, leg->l, -ETIMEDOUT);
	wb_drop_hold(w);
	g->orphan_fn = wb_leg_orphan;
	g->orphan_arg = leg;
	wb_leg_finish(w);
}

static struct wb *wb_register(struct kvt_store *s, const struct kvt_key *key,
			      const struct kvt_slot_ref *ref, const void *tail,
			      uint64_t tail_bytes, kvt_cb cb, void *arg, bool direct,
			      uint8_t reoffer, bool *nomem, int end);

/* Write an object (a pinned slot, or a staging buffer when ref->id < 0) to every deeper
 * tier before chain position end that admits it. The job owns the pin / buffer from here
 * on. If cb is set it runs when all writes are done (status 0 if any tier took it). */
void kvt__e_wb_submit(struct kvt_store *s, const struct kvt_key *key,
		      const struct kvt_slot_ref *ref, int end, kvt_cb cb, void *arg, bool direct)
{
	struct wb *w = wb_register(s, key, ref, NULL, 0, cb, arg, direct, 0, NULL, end);
	if (w)
		kvt__e_wb_start(w, end);
}


/* A DRAM hit of a clean slot that a deeper tier's admission declined for a reason a later
 * sighting can change (kvt__admit_reoffer; the hit has just been recorded): offer it to
 * those tiers again. Without this a chunk declined at its put was never written while it
 * stayed in DRAM, so min_freq = 2 wrote only chunks whose second sighting missed DRAM (the
 * replay, which offers the same way, measured 0.006 fewer hits on conversation and 0.013
 * on chat without it). hit: the caller's pin, kept by the caller. */
void kvt__e_wb_reoffer(struct kvt_store *s, const struct kvt_key *key,
		       const struct kvt_slot_ref *hit)
{
	if (hit->dirty) /* a write of it is due anyway (write-back, a flush) */
		return;
	uint8_t links = kvt__dram_take_reoffer(s->dram, hit->id);
	if (!links) /* another hit took the marks */
		return;
	kvt__dram_pin(s->dram, hit->id); /* the job's own */
	struct wb *w =
	    wb_register(s, key, hit, NULL, 0, NULL, NULL, false, links, NULL, s->n_links);
	if (!w) /* no memory (the pin is let go), or removed meanwhile */
		return;
	kvt__e_wb_start(w, s->n_links);
}

/* The first half of kvt__e_wb_submit: the job joins the write-behind list (a remove or a
 * flush that comes after it waits for it) and its key's order record, and writes nothing
 * yet, so that a put is acknowledged only once the job can be found. tail (tail_bytes):
 * a zero-copy put's payload, written from where it is after ref->buf's header. NULL if
 * there is no memory: then, as kvt__e_wb_submit would, the pin or buffer is let go and cb
 * has run with -ENOMEM (and *nomem is set, if given); also NULL if the slot's key has left DRAM (removed): the pin is
 * let go and cb has run with 0, nothing to write. */
static struct wb *wb_register(struct kvt_store *s, const struct kvt_key *key,
			      const struct kvt_slot_ref *ref, const void *tail,
			      uint64_t tail_bytes, kvt_cb cb, void *arg, bool direct,
			      uint8_t reoffer, bool *nomem, int end)
{
	struct wb *w = kvt__calloc(1, sizeof(*w));
	if (!w) {
		if (nomem)
			*nomem = true;
		/* No memory for the job: the chunk stays in DRAM, still dirty, for flush or
		 * write-back to retry; never marked clean unwritten. A second offer's marks
		 * were taken (kvt__e_wb_reoffer): given back, so the next hit offers it again
		 * (until 2026-12-05 they were lost). */
		if (reoffer && ref->id >= 0)
			kvt__dram_add_reoffer(s->dram, ref->id, reoffer);
		if (ref->id >= 0)
			kvt__dram_unpin(s->dram, ref->id);
		else
			kvt__e_bounce_put(s, ref->buf);
		if (cb) {
			struct kvt_result res = {.status = -ENOMEM, .tier = KVT_TIER_NONE};
			kvt__e_complete(s, cb, arg, direct, &res);
		}
		return NULL;
	}
	atomic_fetch_add(&s->wb_holds, 1);
	w->s = s;
	w->end = end; /* before the job is listed: a flush reads it (wb_owes_flush) */
	w->key = *key;
	w->ref = *ref;
	w->cb = cb;
	w->arg = arg;
	w->direct = direct;
	w->tail = tail;
	w->tail_bytes = tail_bytes;
	w->reoffer = reoffer;
	atomic_store(&w->legs, 1); /* held by this function until all legs are out */
	atomic_store(&w->refs, 1); /* dropped when the job completes */
	pthread_mutex_lock(&s->wb_lock);
	/* A slot whose key a remove took out of DRAM before this job could be found (the
	 * cleaner picked it, then let go of the pool's lock) is not written: that remove found
	 * no job of the key, so it has cleared (or is clearing) the deeper tiers, and this
	 * write would bring the key back. Checked under wb_lock (then the pool's mutex; the
	 * pool never takes wb_lock): a remove that unlinks the slot after this check takes
	 * wb_lock after this hold, and finds the job. If a put of the key since linked a new
	 * slot, this job is written: keys are content-addressed, its bytes are that put's. */
	int32_t indexed = ref->id >= 0 ? kvt__dram_indexed(s->dram, key) : -1;
	if (ref->id >= 0 && indexed < 0) {
		pthread_mutex_unlock(&s->wb_lock);
		kvt__dram_unpin(s->dram, ref->id); /* the slot is freed here */
		atomic_fetch_sub(&s->wb_holds, 1); /* after the unpin: see kvt__e_do_put */
		kvt__free(w);
		if (cb) {
			struct kvt_result res = {.status = 0, .tier = KVT_TIER_NONE};
			kvt__e_complete(s, cb, arg, direct, &res);
		}
		return NULL;
	}
	w->seq = ++s->wb_seq;
	/* A flush from now on waits for this job instead of writing the slot - not for a second
	 * offer: it decides no mark and owes no flush, so a slot made dirty while one is out (a
	 * selective write that failed or had no memory for a leg) would be skipped and the
	 * flush say 0 over a chunk only DRAM held (until 2026-12-05 it did). */
	if (ref->id >= 0 && !reoffer)
		kvt__dram_job(s->dram, ref->id, true);
	/* Without a record (no memory) the job is written as before the records existed: a
	 * late write of it is kept (or, zero-copy, removed again) whatever came since. */
	w->rec = kvt__e_keyrec_get(s, key);
	if (w->rec) {
		w->blocked = kvt__e_keyrec_blocked(w->rec);
		if (ref->id >= 0) /* a slot that skips a tier is written again (rewrite_claim) */
			w->rec->redo |= w->blocked;
		/* A second offer owns nothing: the newest owner still decides. Nor does the job of
		 * a slot the key is no longer indexed under (a flush picked it, a remove and a
		 * new put came before it registered): it writes the same bytes, but taking
		 * last_put from the new slot's own job left that slot dirty after its write
		 * (wb_complete's `newer`), unevictable under write-through until a flush (until
		 * 2026-12-06; found by review, integ.store_wb_stale_slot). */
		if (!reoffer && (ref->id < 0 || indexed == ref->id))
			w->rec->last_put = w->seq;
		w->rec->pending++;
		if (tail)
			w->rec->zc_pending++;
	}
	kvt_list_add_tail(&s->wb, &w->node);
	s->wb_pending++;
	pthread_mutex_unlock(&s->wb_lock);
	return w;
}

struct wb *kvt__e_wb_register(struct kvt_store *s, const struct kvt_key *key,
			      const struct kvt_slot_ref *ref, const void *tail,
			      uint64_t tail_bytes, kvt_cb cb, void *arg, bool direct)
{
	return wb_register(s, key, ref, tail, tail_bytes, cb, arg, direct, 0, NULL, s->n_links);
}

/* The second half: write the registered job's object to every deeper tier before chain
 * position end that admits it. */
void kvt__e_wb_start(struct wb *w, int end)
{
	struct kvt_store *s = w->s;
	const struct kvt_key *key = &w->key;
	const struct kvt_slot_ref *ref = &w->ref;
	assert(w->end == end); /* set at its registration: a flush may read it from then on */
	/* A remove of the key whose tier call is still out (an older one: a newer remove waits
	 * for this job) could run on the tier after this write and delete it: the job waits,
	 * parked on the key's record, until every such call is answered or past its deadline
	 * (kvt__e_keyrec_rm_over starts it again); a tier whose call went late is skipped, as
	 * while a late write is removed again. removes_out counts every remove with calls out,
	 * so while it is 0 there is nothing to ask. */
	if (w->rec && atomic_load(&s->removes_out)) {
		pthread_mutex_lock(&s->wb_lock);
		if (kvt__e_keyrec_rm_on(w->rec)) {
			w->park_next = w->rec->parked;
			w->rec->parked = w;
			pthread_mutex_unlock(&s->wb_lock);
			return; /* holds its first leg: the job is not complete, a flush waits */
		}
		for (int i = 0; i < KVT_MAX_TIERS; i++)
			if (w->rec->rm_late[i])
				w->blocked |= 1u << i;
		if (ref->id >= 0)
			w->rec->redo |= w->blocked;
		pthread_mutex_unlock(&s->wb_lock);
	}
	for (int i = s->dram_pos + 1; i < end; i++) {
		struct link *l = &s->links[i];
		if (w->reoffer && !(w->reoffer & (1u << i)))
			continue; /* a second offer: this tier took it or declined it for good */
		int verdict = KVT_ADMIT_YES;
		if (l->admit) {
			pthread_mutex_lock(&s->admit_lock);
			verdict = kvt__admit_decide(l->admit, kvt__key_hash(key),
						    ref->has_parent ? kvt__key_hash(&ref->parent) : 0,
						    (uint64_t)ref->depth * s->geo.chunk_tokens,
						    ref->n_tokens, ref->object_bytes);
			pthread_mutex_unlock(&s->admit_lock);
		}
		if (verdict != KVT_ADMIT_YES) {
			atomic_fetch_add(&l->admission_rejects, 1);
			atomic_fetch_add(&l->writes_skipped, 1);
			if (ref->id >= 0 && kvt__admit_reoffer(verdict)) /* the slot is the job's */
				kvt__dram_add_reoffer(s->dram, ref->id, (uint8_t)(1u << i));
			continue;
		}
		int cw = l->t->ops->can_write ? l->t->ops->can_write(l->t, ref->object_bytes) : 0;
		if (cw < 0) {
			atomic_fetch_add(&l->writes_skipped, 1);
			budget_reoffer(w, ref, i, cw);
			continue;
		}
		if (w->blocked & (1u << i)) {
			/* An earlier write of the key is still out on this tier past its deadline
			 * (or being removed again, or a remove call of it is): this one waits for
			 * no one and is not written there. A put told -EAGAIN retries once the tier
			 * has answered; a DRAM slot is marked as after a failed write (wb_complete):
			 * unsaved if no deeper tier took it - dirty, written again once the tier
			 * has answered if it is still in DRAM (the key's record has its link in
			 * redo: kvt__e_wb_rewrite_claim), and evictable with the loss counted. Until
			 * 2026-12-06 it stayed plainly dirty, which the pool never evicts: on a hung
			 * tier, removes whose calls were late and puts of the same keys again
			 * filled a small DRAM with such slots, and every put after was refused
			 * -ENOSPC for as long as the tier hung (a review; store_blocked_pool). */
			atomic_fetch_add(&l->writes_skipped, 1);
			wb_tier_failed(w, l, -EAGAIN);
			continue;
		}
		/* circuit open, or it holds what it may in late calls: the tier is unwell */
		if (kvt__e_link_late_full(s, l) || !kvt__e_link_usable(l)) {
			atomic_fetch_add(&l->writes_skipped, 1);
			wb_tier_failed(w, l, -EIO);
			continue;
		}
		struct wb_leg *leg = kvt__malloc(sizeof(*leg));
		struct guard *g = leg ? kvt__e_guard_new(s, l, "write", ref->object_bytes, leg,
						  wb_leg_done, wb_leg_expire)
				      : NULL;
		if (!g) {
			kvt__free(leg);
			kvt__e_link_unused(l);
			/* The tier was not written, as if it had answered -ENOMEM: a flush waiting
			 * for this job is told (until 2026-12-05 it said 0 over the slot left dirty),
			 * and a second offer marks the tier again (it lost the mark). */
			w->keep_dirty = true;
			wb_tier_failed(w, l, -ENOMEM);
			continue;
		}
		leg->w = w;
		leg->l = l;
		atomic_fetch_add(&w->legs, 1);
		atomic_fetch_add(&w->refs, 1);
		const struct kvt_key *parent = ref->has_parent ? &ref->parent : NULL;
		int rc = w->tail ? l->t->ops->write_split(l->t, key, parent, ref->buf,
							  ref->object_bytes - w->tail_bytes,
							  w->tail, w->tail_bytes, w->obj_crc,
							  kvt__e_guard_cb, g)
			 : l->t->ops->write_chained
			     ? l->t->ops->write_chained(l->t, key, parent, ref->buf,
							ref->object_bytes, kvt__e_guard_cb, g)
			     : l->t->ops->write(l->t, key, ref->buf, ref->object_bytes,
						kvt__e_guard_cb, g);
		if (rc == 0) {
			kvt__e_guard_arm(g);
			continue;
		}
		kvt__e_guard_cancel(g);
		kvt__free(leg);
		atomic_fetch_sub(&w->legs, 1);
		atomic_fetch_sub(&w->refs, 1);
		kvt__e_link_result(s, l, rc);
		if (rc == -ENOMEM)
			w->keep_dirty = true;
		wb_leg_account(w, l, rc);
	}
	wb_leg_finish(w);
}

/* A count that blocked link i for rec's key has just dropped (wb_lock held): does a slot of
 * the key, left dirty because a job skipped the link, need writing again now? Counted in
 * undo_sending until its write is out, so that close does not close the tiers under it;
 * none once close is about to (its own pass over the dirty slots came before). */
bool kvt__e_wb_rewrite_claim(struct kvt_store *s, struct keyrec *rec, int i)
{
	if (s->tiers_closing || !kvt__e_keyrec_unblocked(rec, i))
		return false;
	s->undo_sending++;
	return true;
}

/* Write the key's DRAM slot again if it is still dirty (a claim of rewrite_claim; wb_lock
 * not held). Every deeper tier is written, as flush does; a tier still blocked for the key
 * is skipped again and claimed again when it unblocks. */
void kvt__e_wb_rewrite(struct kvt_store *s, const struct kvt_key *key)
{
	struct kvt_slot_ref ref;
	if (s->dram && kvt__dram_get_dirty(s->dram, key, &ref) == 0)
		kvt__e_wb_submit(s, key, &ref, s->n_links, NULL, NULL, false);
	pthread_mutex_lock(&s->wb_lock);
	s->undo_sending--;
	pthread_cond_broadcast(&s->wb_cond);
	pthread_mutex_unlock(&s->wb_lock);
}

/* Write every dirty slot not already being written (flush, close), pinned ones included (a
 * reader's pin makes nothing durable). A slot with a job out is left to it (the pool says
 * which, kvt__dram_job; a hit's second offer is none): the flush that called this waits for
 * that job, and one that fails leaves the slot unsaved, for the next flush. Each slot once per pass
 * (kvt__dram_flush_pass): a slot that stays dirty (no memory for its job) is not retried
 * in the same pass. Returns how many slots had no memory for their job: no tier was
 * written, and the flush must say so. */
uint64_t kvt__e_wb_dirty_all(struct kvt_store *s)
{
	uint32_t pass = kvt__dram_flush_pass(s->dram);
	struct kvt_slot_ref refs[16];
	uint32_t n;
	uint64_t nomem = 0;
	while ((n = kvt__dram_dirty_victims(s->dram, refs, 16u, pass)) > 0) {
		for (uint32_t i = 0; i < n; i++) {
			struct kvt_key key;
			bool no = false;
			kvt__dram_key(s->dram, refs[i].id, &key);
			struct wb *w = wb_register(s, &key, &refs[i], NULL, 0, NULL, NULL, false, 0,
						   &no, s->n_links);
			if (w)
				kvt__e_wb_start(w, s->n_links);
			nomem += no;
		}
	}
	return nomem;
}

/* Would a write of key skip a deeper tier as blocked (kvt__e_keyrec_blocked), leaving its
 * slot dirty? */
static bool wb_would_skip(struct kvt_store *s, const struct kvt_key *key)
{
	if (!atomic_load(&s->removes_out)) /* every count that blocks a DRAM slot's key is in it */
		return false;
	uint32_t deeper = 0;
	for (int i = s->dram_pos + 1; i < s->n_links; i++)
		deeper |= 1u << i;
	pthread_mutex_lock(&s->wb_lock);
	bool skip = (kvt__e_keyrec_blocked(kvt__e_keyrec_find(s, key)) & deeper) != 0;
	pthread_mutex_unlock(&s->wb_lock);
	return skip;
}

/* Write-back: keep some DRAM headroom by writing the coldest dirty slots behind. A slot
 * whose key a tier is blocked for (a remove call of it past its deadline, or the removal of
 * a late write of it, not answered yet) is passed over: its write would leave it dirty,
 * and as the coldest it would be picked every time while the call is out, the others
 * never; it stays pinned while the pass looks further, so the pool does not offer it
 * again, and is let go at the end. */
void kvt__e_writeback_clean(struct kvt_store *s)
{
	uint32_t slots = kvt__dram_slots(s->dram);
	uint32_t low = KVT_MAX(1u, slots / 8);
	if (kvt__dram_headroom(s->dram) >= low || kvt__e_wb_backlogged(s, 0))
		return;
	struct kvt_slot_ref refs[16];
	int32_t passed[64];
	uint32_t n_passed = 0, want = KVT_MIN(16u, low), n;
	while (want && (n = kvt__dram_dirty_victims(s->dram, refs, want, 0)) > 0) {
		for (uint32_t i = 0; i < n; i++) {
			struct kvt_key key;
			kvt__dram_key(s->dram, refs[i].id, &key);
			if (n_passed < KVT_ARRAY_SIZE(passed) && wb_would_skip(s, &key)) {
				passed[n_passed++] = refs[i].id;
				continue;
			}
			kvt__e_wb_submit(s, &key, &refs[i], s->n_links, NULL, NULL, false);
			want--;
		}
		if (n_passed == KVT_ARRAY_SIZE(passed))
			break;
	}
	for (uint32_t i = 0; i < n_passed; i++)
		kvt__dram_unpin(s->dram, passed[i]);
}

/* ------------------------------------------------------------ flush */

/* kvt_flush: write every dirty slot, wait for every write-behind submitted before it,
 * then call each tier's durability op (flush) under its deadline. status 0, or the error
 * of a tier that did not take a write of the flush's window or missed its deadline, with
 * res.tier naming it. */
struct flush_leg {
	struct flush_waiter *f;
	struct link *l;
};

static void flush_bad(struct flush_waiter *f, struct link *l, int rc, const char *why)
{
	struct kvt_store *s = f->s;
	int zero = 0;
	if (atomic_compare_exchange_strong(&f->status, &zero, rc))
		atomic_store(&f->bad_tier, (int)(l - s->links));
	KVT_WARN(&s->log, "flush: tier %s %s", l->name, why);
}

static void flush_release(struct flush_waiter *f)
{
	if (atomic_fetch_sub(&f->remaining, 1) != 1)
		return;
	struct kvt_store *s = f->s;
	/* The store's losses are reported once this flush answers, not when it counted them:
	 * a flush called before then reports them too (kvt__e_do_flush) */
	uint64_t seen = atomic_load(&s->flush_unsaved_seen);
	while (seen < f->lost_upto &&
	       !atomic_compare_exchange_weak(&s->flush_unsaved_seen, &seen, f->lost_upto))
		;
	struct kvt_result res = {.status = atomic_load(&f->status),
				 .tier = atomic_load(&f->bad_tier)};
	kvt_cb cb = f->cb;
	void *arg = f->arg;
	bool direct = f->direct;
	kvt__free(f);
	kvt__e_complete(s, cb, arg, direct, &res);
}

static void flush_leg_done(void *arg, int64_t rc)
{
	struct flush_leg *leg = arg;
	struct flush_waiter *f = leg->f;
	kvt__e_link_result(f->s, leg->l, rc < 0 ? (int)rc : 0);
	if (rc < 0)
		flush_bad(f, leg->l, (int)rc, "could not make its writes durable");
	kvt__free(leg);
	flush_release(f);
}

static void flush_leg_expire(struct guard *g)
{
	struct flush_leg *leg = g->op;
	struct flush_waiter *f = leg->f;
	flush_bad(f, leg->l, -ETIMEDOUT, "missed its deadline making its writes durable");
	kvt__free(leg);
	flush_release(f);
}

/* Every write-behind up to f->target is complete: report tiers that did not take one,
 * and make the others durable. */
static void flush_tiers(struct flush_waiter *f)
{
	struct kvt_store *s = f->s;
	/* The failures kept with their keys' records: each fails the flush unless a newer job
	 * of its key wrote that link in time since (until 2026-12-06 every one did: a job out
	 * when the flush was called failed it -EIO although a flush's rewrite of the same slot
	 * had written the tier before this one answered; a review, integ.store_flush_repaired) */
	if (f->n_fails) {
		pthread_mutex_lock(&s->wb_lock);
		for (uint32_t j = 0; j < f->n_fails; j++) {
			struct flush_fail *x = &f->fails[j];
			if (x->rec->wrote[x->link] <= x->seq && f->first_fail[x->link] > x->seq)
				f->first_fail[x->link] = x->seq;
			kvt__e_keyrec_put(s, x->rec);
		}
		pthread_mutex_unlock(&s->wb_lock);
	}
	kvt__free(f->fails);
	f->fails = NULL;
	f->n_fails = f->cap_fails = 0;
	if (f->lost) {
		KVT_WARN(&s->log, "flush: %llu chunk(s) left DRAM before any deeper tier took them",
			 (unsigned long long)f->lost);
		flush_bad(f, &s->links[f->lost_link], -EIO,
			  "failed the write-behind of chunks since evicted from DRAM (lost)");
	}
	if (f->nomem) { /* dirty chunks this flush could not start a write of: on no tier */
		KVT_WARN(&s->log, "flush: %llu dirty chunk(s) had no memory for their write",
			 (unsigned long long)f->nomem);
		flush_bad(f, &s->links[s->dram_pos + 1], -ENOMEM,
			  "was not written dirty chunks (no memory for their write-behind)");
	}
	for (int i = s->dram_pos + 1; i < s->n_links; i++) {
		struct link *l = &s->links[i];
		if (f->first_fail[i] <= f->target) { /* every job up to target is complete */
			flush_bad(f, l, -EIO, "did not take a write-behind (failed, unwell or missed "
					      "its deadline)");
			continue;
		}
		if (!l->t->ops->flush)
			continue; /* durable when the write completes */
		if (!kvt__e_link_usable(l)) {
			flush_bad(f, l, -EIO, "is unwell (circuit open)");
			continue;
		}
		struct flush_leg *leg = kvt__malloc(sizeof(*leg));
		struct guard *g = leg ? kvt__e_guard_new(s, l, "flush", 0, leg, flush_leg_done,
						  flush_leg_expire)
				      : NULL;
		if (!g) {
			kvt__free(leg);
			kvt__e_link_unused(l);
			flush_bad(f, l, -ENOMEM, "could not be asked (no memory)");
			continue;
		}
		leg->f = f;
		leg->l = l;
		atomic_fetch_add(&f->remaining, 1);
		int rc = l->t->ops->flush(l->t, kvt__e_guard_cb, g);
		if (rc == 0) {
			kvt__e_guard_arm(g);
			continue;
		}
		kvt__e_guard_cancel(g);
		kvt__free(leg);
		atomic_fetch_sub(&f->remaining, 1);
		kvt__e_link_result(s, l, rc);
		flush_bad(f, l, rc, "refused to flush");
	}
	flush_release(f);
}

int kvt__e_do_flush(struct kvt_store *s, kvt_cb cb, void *arg, bool direct,
		    _Atomic uint64_t *unsaved_seen)
{
	if (!s || !cb)
		return -EINVAL;
	struct flush_waiter *f = kvt__calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	int arc = kvt__e_admit_inflight(s);
	if (arc < 0) {
		kvt__free(f);
		return arc;
	}
	f->s = s;
	f->cb = cb;
	f->arg = arg;
	f->direct = direct;
	atomic_store(&f->remaining, 1);
	atomic_store(&f->bad_tier, KVT_TIER_NONE);
	/* The store's own count of losses reported, as it is when the flush is called (below) */
	uint64_t seen_at_call = atomic_load(&s->flush_unsaved_seen);
	/* The window opens before the dirty slots are written, so that the failures of those
	 * writes are the flush's: from the oldest job out (or the next); failures of the jobs
	 * out now from their flush_failed, later ones told by wb_tier_failed. A job complete
	 * before now is not the flush's: if no deeper tier took its chunk, the slot is unsaved
	 * and written again below (that write's outcome is the flush's), or was evicted and is
	 * counted lost; if one did, the chunk is held. Until 2026-12-05 only the newest failure
	 * per tier was kept and compared with the window at the end: a rewrite that failed at
	 * once (circuit open) fell before it, and a later put failing hid an earlier one inside
	 * it - the flush said 0 over chunks only DRAM held. Until 2026-12-06 the failures of
	 * jobs complete before the flush counted from the oldest job out: -EIO over a chunk the
	 * flush had just written again, and 0 for the same failure when no job was out. */
	pthread_mutex_lock(&s->wb_lock);
	/* A second offer's or a promotion's job owes the flush nothing (wb_owes_flush): it
	 * does not open the window either (until 2026-12-05 one out on a slow tier made a put's failure from
	 * before the flush the flush's, -EIO after the flush had written that chunk again). */
	f->from = s->wb_seq + 1;
	for (int i = 0; i < KVT_MAX_TIERS; i++)
		f->first_fail[i] = UINT64_MAX;
	/* Open until the dirty slots are written (then s->wb_seq, below): set before the jobs
	 * out are looked at, or flush_note_fail takes each for one after the window */
	f->target = UINT64_MAX;
	struct kvt_list *p;
	kvt_list_for_each(p, &s->wb)
	{
		struct wb *w = kvt_list_entry(p, struct wb, node);
		if (!wb_owes_flush(w))
			continue;
		if (f->from > w->seq)
			f->from = w->seq;
		for (uint32_t m = w->flush_failed; m; m &= m - 1)
			flush_note_fail(f, w, __builtin_ctz(m));
	}
	kvt_list_add_tail(&s->flushes, &f->node);
	pthread_mutex_unlock(&s->wb_lock);
	/* Dirty slots (write-back, or left dirty for lack of memory) are part of "everything
	 * submitted before the flush". */
	if (s->dram && s->n_links > s->dram_pos + 1) {
		f->nomem = kvt__e_wb_dirty_all(s);
		/* Unsaved slots still in DRAM were just written again (the jobs' outcome is the
		 * flush's); those evicted since the last flush that reported them to this caller
		 * are lost. Per caller: until 2026-12-06 the store kept one count, so of the
		 * kvtierd clients flushing one store only the first to flush after a loss heard
		 * of it - the others' flushes answered 0 over the chunks gone. */
		uint64_t n = kvt__dram_evicted_unsaved(s->dram), seen;
		if (unsaved_seen) {
			/* A kvtierd connection's flushes come one at a time (its thread waits for
			 * each), and one cut off may outlive the connection: its count moves now */
			seen = atomic_load(unsaved_seen);
			while (seen < n && !atomic_compare_exchange_weak(unsaved_seen, &seen, n))
				;
			/* and the store's: a flush of the store's own (kvtierd's at its stop)
			 * reports only losses no caller has heard of */
			uint64_t own = atomic_load(&s->flush_unsaved_seen);
			while (own < n &&
			       !atomic_compare_exchange_weak(&s->flush_unsaved_seen, &own, n))
				;
		} else {
			/* The store's one count, which flushes of several threads at once share:
			 * this flush reports every loss not reported when it was called, and they
			 * count as reported once it answers (flush_release). Until 2026-12-06 the
			 * first flush to count a loss took it at once: another flush called before
			 * that one answered said 0 over it, and could answer first (a review;
			 * integ.store_flush_loss_shared). */
			seen = seen_at_call;
			f->lost_upto = n;
		}
		if (seen < n) {
			f->lost = n - seen;
			f->lost_link = atomic_load(&s->unsaved_link);
		}
	}
	pthread_mutex_lock(&s->wb_lock);
	f->target = s->wb_seq;
	struct kvt_list *first = kvt_list_first(&s->wb);
	uint64_t oldest = first ? kvt_list_entry(first, struct wb, node)->seq : s->wb_seq + 1;
	bool ready = oldest > f->target;
	if (ready)
		kvt_list_del(&f->node);
	pthread_mutex_unlock(&s->wb_lock);
	if (ready)
		flush_tiers(f);
	return 0;
}

int kvt_flush(struct kvt_store *s, kvt_cb cb, void *arg)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	rc = s->client ? kvt__client_flush(s->client, cb, arg) : kvt__e_do_flush(s, cb, arg, false, NULL);
	kvt__store_leave(s);
	return rc;
}
