/*
 * tp_commit.c - the tensor-parallel commit of kvtierd: ranks of one model in separate
 * processes each gather the KV heads they hold into ONE DRAM slot, and the object is
 * published only when every head is written. Why in the daemon: the ranks share nothing
 * but the daemon's pool, so the table that says which heads are written must live here
 * (the in-process version is in src/device_store.c).
 *
 * A partial object is keyed by its storage key (the daemon serves one namespace, and the
 * geometry, hence the head count, is the daemon's). The first TP_RESERVE reserves the slot;
 * every TP_RESERVE claims for its connection the heads of its range no one has claimed, so
 * ranks that replicate heads (TP > kv_heads) write each head once. TP_WRITTEN marks the
 * connection's claimed heads of its range written; the call that completes the last head
 * seals (header, CRCs) and publishes the object. Until then the slot is pinned and no
 * reader can see it. An object is cancelled (slot back to the pool, nothing visible) when a
 * rank reports a failed copy, when a connection holding unwritten claims goes away (the
 * rank died), when nobody has claimed or written anything for STALE_LEASES leases and no
 * claim is outstanding (ranks that never came: 60 s at the default lease), or when claims are held but the object was untouched for daemon.lease_ms (a rank
 * alive but stuck - SIGSTOPped, hung - that would otherwise keep it, and its slot, without
 * end: the pins and reservations of kvtierd.c have the same lease). A cancelled object's
 * slot is given back only once no rank still holds a claim on it: a live rank may still be
 * copying into it. An expired object's key is given back at once (the same object can be
 * written afresh, into another slot) and its slot is quarantined off the table until the
 * connections holding its claims report or go.
 *
 * Bounds per client, as kvtierd.c's for PUT_RESERVE (a client stopped mid-write must not
 * end up holding the pool): a process (a connection, where its pid is unknown) holding
 * claims on max_held open objects starts no new one (it still joins objects other ranks
 * started: those are always finished), and a
 * process whose claims keep KVTD_MAX_QUARANTINE quarantined objects off the pool reserves
 * nothing more until it reports them or goes. Both answer -EBUSY.
 */
#include "tp_commit.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dram.h"
#include "engine.h"
#include "internal.h"

/* An object with no claim outstanding, untouched this many leases, waits for ranks that
 * are not coming. */
#define STALE_LEASES 6
/* Bound on open and quarantined objects: each holds a DRAM slot. */
#define MAX_OPEN 1024
/* Open objects one connection may hold claims on when it starts another: half the pool's
 * slots (at least KVTD_MAX_RESERVATIONS). A rank has one object per chunk it is saving in
 * flight, and every rank of a model claims on the same ones; more than half the node's
 * DRAM in flight unpublished is no real save but a client that reserves and never reports. */
#define MAX_HELD_OF(slots) KVT_MAX((uint64_t)KVTD_MAX_RESERVATIONS, (uint64_t)(slots) / 2)

enum { H_FREE = 0, H_CLAIMED = 1, H_WRITTEN = 2 };

struct part {
	struct part *next;
	struct kvt_key skey;
	struct kvt_slot_ref ref;
	uint32_t n_tokens;
	uint32_t written, claimed; /* heads WRITTEN, heads CLAIMED now */
	int error;                 /* cancelled: waiting for the claims to go */
	uint64_t touched_ns;
	struct {
		uint8_t state;
		const void *owner; /* the connection of a CLAIMED head */
		int32_t pid;       /* and its process (0: unknown) */
	} head[];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct part *tab;
static struct part *quar; /* expired with claims held: slot kept until they are dropped */
static uint64_t n_quar, lease_ns;
static uint64_t max_held, slot_bytes; /* see MAX_HELD_OF; bytes of one DRAM slot */
static struct kvt_store *store;
static uint8_t ns[KVT_NS_ID_BYTES];
static uint8_t *pool;
static bool enabled;
static uint32_t kv_heads;
static uint64_t n_open, n_published, n_cancelled;

void kvtd_tp_init(struct kvt_store *s, const uint8_t *ns_id, void *p, bool on, uint64_t lease)
{
	store = s;
	lease_ns = lease;
	memcpy(ns, ns_id, sizeof(ns));
	pool = p;
	enabled = on;
	kv_heads = kvt_store_geometry(s)->kv_heads;
	struct kvt_dram *d = kvt__store_dram(s);
	/* and at most a quarter of MAX_OPEN: half of a large pool is more than the table
	 * holds, so one process that claimed its share and stopped (its objects then
	 * quarantined) took every place of the table, and every other process's TP_RESERVE
	 * of a new object was refused (until 2026-12-06; integ.daemon_tp_hoard) */
	max_held = KVT_MIN(MAX_HELD_OF(d ? kvt__dram_slots(d) : 0), (uint64_t)MAX_OPEN / 4);
	slot_bytes = d ? kvt__dram_slot_bytes(d) : 0;
}

/* Unlink *pp and give its slot back. mu held. */
static void cancel(struct part **pp)
{
	struct part *p = *pp;
	*pp = p->next;
	kvt__store_cancel(store, &p->ref);
	free(p);
	n_open--;
	n_cancelled++;
}

/* Unlink *pp, a part with claims still out: its slot is cancelled but kept until they are
 * reported or dropped, and each is answered err. mu held. */
static void quarantine(struct part **pp, int err)
{
	struct part *p = *pp;
	*pp = p->next;
	kvt__store_cancel_keep(store, &p->ref);
	p->error = err;
	p->next = quar;
	quar = p;
	n_open--;
	n_quar++;
	n_cancelled++;
}

static struct part **find(const struct kvt_key *skey)
{
	struct part **pp = &tab;
	while (*pp && memcmp(&(*pp)->skey, skey, sizeof(*skey)))
		pp = &(*pp)->next;
	return pp;
}

/* Does conn (or, pid > 0, any connection of process pid) hold a claim on p? mu held. */
static bool holds(const struct part *p, const void *conn, int32_t pid)
{
	for (uint32_t h = 0; p->claimed && h < kv_heads; h++)
		if (p->head[h].state == H_CLAIMED &&
		    (p->head[h].owner == conn || (pid > 0 && p->head[h].pid == pid)))
			return true;
	return false;
}

/* Objects of list l that conn (or its process, pid > 0) holds claims on. mu held. */
static uint64_t held_in(const struct part *l, const void *conn, int32_t pid)
{
	uint64_t n = 0;
	for (const struct part *p = l; p; p = p->next)
		n += holds(p, conn, pid);
	return n;
}

/* Drop conn's claims on p (all heads, or those of [h0, h1)). mu held. */
static bool drop_claims(struct part *p, const void *conn, uint32_t h0, uint32_t h1)
{
	bool held = false;
	for (uint32_t h = h0; h < h1 && h < kv_heads; h++) {
		if (p->head[h].state == H_CLAIMED && p->head[h].owner == conn) {
			p->head[h].state = H_FREE;
			p->head[h].owner = NULL;
			p->head[h].pid = 0;
			p->claimed--;
			held = true;
		}
	}
	return held;
}

/* Quarantined objects with no claim left: their slots back to the pool. mu held. */
static void release_quarantined(void)
{
	struct part **pp = &quar;
	while (*pp) {
		struct part *p = *pp;
		if (p->claimed) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		kvt__store_release(store, &p->ref);
		free(p);
		n_quar--;
	}
}

/* Cancel what nobody works on any more: cancelled objects whose claims are gone, objects
 * untouched for STALE_LEASES leases with no claim outstanding, and (lease) objects with
 * claims held but untouched for lease_ns: their key given back, their slot quarantined.
 * mu held. Returns the earliest lease end of an object conn holds claims on (UINT64_MAX:
 * none); *next_any (if set): when the next object of any kind is due. */
static uint64_t sweep_for(const void *conn, uint64_t *next_any)
{
	uint64_t now = kvt__now_ns(), next = UINT64_MAX, any = UINT64_MAX;
	uint64_t stale = lease_ns ? STALE_LEASES * lease_ns : 60ull * 1000000000ull;
	struct part **pp = &tab;
	while (*pp) {
		struct part *p = *pp;
		if (!p->claimed && (p->error || now - p->touched_ns > stale)) {
			cancel(pp);
		} else if (p->claimed && lease_ns && now - p->touched_ns >= lease_ns) {
			quarantine(pp, -ETIMEDOUT);
		} else {
			if (!p->claimed)
				any = KVT_MIN(any, p->touched_ns + stale + 1);
			else if (lease_ns)
				any = KVT_MIN(any, p->touched_ns + lease_ns);
			for (uint32_t h = 0; conn && p->claimed && h < kv_heads; h++) {
				if (p->head[h].state == H_CLAIMED && p->head[h].owner == conn) {
					next = KVT_MIN(next, p->touched_ns + lease_ns);
					break;
				}
			}
			pp = &p->next;
		}
	}
	if (next_any)
		*next_any = any;
	return next;
}

static void sweep(void)
{
	sweep_for(NULL, NULL);
}

uint64_t kvtd_tp_sweep(void)
{
	if (!enabled)
		return UINT64_MAX;
	uint64_t any;
	pthread_mutex_lock(&mu);
	sweep_for(NULL, &any);
	pthread_mutex_unlock(&mu);
	/* and at least once a lease: an object opened since (on a connection's thread) is not
	 * in this answer */
	return KVT_MIN(any, kvt__now_ns() + (lease_ns ? lease_ns : 1000000000ull));
}

uint64_t kvtd_tp_expire(const void *conn)
{
	pthread_mutex_lock(&mu);
	uint64_t next = sweep_for(conn, NULL);
	pthread_mutex_unlock(&mu);
	return next;
}

void kvtd_tp_reserve(const void *conn, int32_t pid, const struct kvtd_req *r, void *claim_out,
		     struct kvtd_rep *rep)
{
	struct kvt_result *res = &rep->res;
	struct kvtd_tp_claim *claim = claim_out;
	if (!enabled) {
		res->status = -ENOTSUP;
		return;
	}
	struct kvt_key sk, sp;
	bool resident = false;
	kvt_storage_key(ns, &r->key, &sk);
	if (r->has_parent)
		kvt_storage_key(ns, &r->parent, &sp);
	memset(claim, 0, sizeof(*claim) + kv_heads);
	pthread_mutex_lock(&mu);
	sweep();
	struct part **pp = find(&sk), *p = *pp;
	if (p && kvt__store_reserve_removed(store, &p->ref)) {
		/* A kvt_remove of the key came since this object was started: its commit would
		 * drop it, and this rank, asking after the remove, starts a new one rather than
		 * finishing it. The old one goes as an expired one does: at once if no claim is
		 * out, else quarantined until the claims are reported or dropped. */
		if (!p->claimed)
			cancel(pp);
		else
			quarantine(pp, -ECANCELED);
		p = NULL;
	}
	/* A process whose claims hold quarantined slots (its ranks stopped, or never report)
	 * gets no more, not even of objects others started: the pool would drain into it.
	 * A pid unknown (0) is charged per connection. */
	if (held_in(quar, conn, pid) >= KVTD_MAX_QUARANTINE) {
		res->status = -EBUSY;
		goto out;
	}
	if (!p) {
		/* counted over the process's connections: one connection per rank of a
		 * process holds the same objects, a second connection is no second budget */
		if (n_open + n_quar >= MAX_OPEN || held_in(tab, conn, pid) >= max_held) {
			res->status = -EBUSY;
			goto out;
		}
		/* As a local kvt_device_store: no new object while a deeper tier is backlogged
		 * (the rank retries after polling); an object other ranks started is finished. */
		if (kvt__store_backlogged(store, kvt_object_bytes(kvt_store_geometry(store),
								   r->n_tokens))) {
			res->status = -EAGAIN;
			goto out;
		}
		struct kvt_slot_ref ref;
		int rc = kvt__store_reserve_part(store, &sk, r->has_parent ? &sp : NULL,
						 r->n_tokens, &ref);
		if (rc == -EEXIST) { /* stored already: nothing to write */
			res->status = 1;
			/* one put of the object, counted by the rank of its first head */
			resident = r->layer_begin == 0;
			goto out;
		}
		if (rc < 0) {
			res->status = rc;
			goto out;
		}
		p = calloc(1, sizeof(*p) + kv_heads * sizeof(p->head[0]));
		if (!p) {
			kvt__store_cancel(store, &ref);
			res->status = -ENOMEM;
			goto out;
		}
		p->skey = sk;
		p->ref = ref;
		p->n_tokens = r->n_tokens;
		p->next = tab;
		tab = p;
		n_open++;
		p->touched_ns = kvt__now_ns();
	} else if (p->n_tokens != r->n_tokens) {
		res->status = -EINVAL;
		goto out;
	} else if (p->error) {
		res->status = p->error;
		goto out;
	}
	/* Only progress keeps an object alive (its lease): a head claimed here, or reported
	 * below by the connection that claimed it. A peer claiming nothing kept a stuck
	 * rank's object, and its slot, for as long as it kept asking (until 2026-12-05). */
	for (uint32_t h = r->layer_begin; h < r->layer_end; h++) {
		if (p->head[h].state == H_FREE) {
			p->head[h].state = H_CLAIMED;
			p->head[h].owner = conn;
			p->head[h].pid = pid;
			p->claimed++;
			claim->claimed[h] = 1;
			p->touched_ns = kvt__now_ns();
		}
	}
	claim->missing = kv_heads - p->written;
	res->status = 0;
	res->bytes = p->ref.object_bytes;
	res->n_tokens = p->n_tokens;
	rep->slot = p->ref.id;
	rep->slot_off = (uint64_t)((uint8_t *)p->ref.buf - pool);
out:
	pthread_mutex_unlock(&mu);
	if (resident)
		kvt__store_put_resident(store, &sk);
}

void kvtd_tp_written(const void *conn, const struct kvtd_req *r, struct kvt_result *res)
{
	struct kvt_key sk;
	kvt_storage_key(ns, &r->key, &sk);
	pthread_mutex_lock(&mu);
	struct part **pp = find(&sk), *p = *pp;
	if (!p || (uint64_t)p->ref.id != r->n) {
		/* Its lease ran out (quarantined: this rank's claims on it end here), or it was
		 * cancelled and is gone (stale, or this connection was dropped meanwhile). */
		res->status = -ECANCELED;
		for (struct part *q = quar; q; q = q->next)
			if ((uint64_t)q->ref.id == r->n && !memcmp(&q->skey, &sk, sizeof(sk)) &&
			    drop_claims(q, conn, r->layer_begin, r->layer_end))
				res->status = q->error; /* -ETIMEDOUT, or -ECANCELED: removed */
		release_quarantined();
		pthread_mutex_unlock(&mu);
		return;
	}
	uint32_t mine = 0;
	for (uint32_t h = r->layer_begin; h < r->layer_end; h++) {
		if (p->head[h].state != H_CLAIMED || p->head[h].owner != conn)
			continue;
		p->head[h].state = r->flags ? H_FREE : H_WRITTEN;
		p->head[h].owner = NULL;
		p->head[h].pid = 0;
		p->claimed--;
		p->written += !r->flags;
		mine++;
	}
	if (mine)
		p->touched_ns = kvt__now_ns();
	/* The rank's copy failed: the object cannot be completed. Only a rank that held
	 * claims in the range can say so: another connection's word would cancel an object
	 * it has no part in. */
	if (r->flags && mine && !p->error)
		p->error = -EIO;
	res->n_tokens = p->n_tokens;
	if (p->error) {
		res->status = p->error;
		if (!p->claimed)
			cancel(pp);
		pthread_mutex_unlock(&mu);
		return;
	}
	res->status = (int)(kv_heads - p->written);
	if (p->written < kv_heads) {
		pthread_mutex_unlock(&mu);
		return;
	}
	/* Every head written: off the table, then sealed and published outside the lock. */
	*pp = p->next;
	n_open--;
	pthread_mutex_unlock(&mu);
	res->bytes = p->ref.object_bytes;
	int rc = kvt__store_commit(store, &p->ref);
	if (rc < 0)
		res->status = rc;
	if (rc == 0) { /* not one a remove overtook (KVT__COMMIT_DROPPED), nor a failed seal */
		pthread_mutex_lock(&mu);
		n_published++;
		pthread_mutex_unlock(&mu);
	}
	free(p);
}

void kvtd_tp_conn_gone(const void *conn)
{
	pthread_mutex_lock(&mu);
	for (struct part *p = tab; p; p = p->next)
		if (drop_claims(p, conn, 0, kv_heads) && !p->error)
			p->error = -ECONNRESET; /* a rank died mid-write */
	for (struct part *p = quar; p; p = p->next)
		drop_claims(p, conn, 0, kv_heads);
	release_quarantined();
	sweep();
	pthread_mutex_unlock(&mu);
}

bool kvtd_tp_conn_holds(const void *conn)
{
	pthread_mutex_lock(&mu);
	bool any = held_in(tab, conn, 0) || held_in(quar, conn, 0);
	pthread_mutex_unlock(&mu);
	return any;
}

void kvtd_tp_cancel_all(void)
{
	pthread_mutex_lock(&mu);
	while (tab)
		cancel(&tab);
	for (struct part *p = quar; p; p = p->next) /* every connection is gone */
		p->claimed = 0;
	release_quarantined();
	pthread_mutex_unlock(&mu);
}

void kvtd_tp_counts(uint64_t *open, uint64_t *published, uint64_t *cancelled,
		    uint64_t *quarantined, uint64_t *quarantined_bytes)
{
	pthread_mutex_lock(&mu);
	*open = n_open;
	*quarantined = n_quar;
	*quarantined_bytes = n_quar * slot_bytes;
	*published = n_published;
	*cancelled = n_cancelled;
	pthread_mutex_unlock(&mu);
}
