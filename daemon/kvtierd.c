/*
 * kvtierd.c - the node daemon: one kvt_store (DRAM pool and deeper tiers) that several
 * engine processes share over a Unix socket (docs/DAEMON.md). Why a thread per
 * connection: each serves one request at a time with the store's blocking *_sync calls,
 * so a slow client only ever waits on itself, and a connection's whole state (its socket,
 * its mapped region) is freed by the one thread that owns it when the peer goes away.
 *
 * Usage: kvtierd --config FILE | --dir D --socket PATH [--metrics 127.0.0.1:PORT]
 *        [--events tcp://ADDR:PORT|ipc://PATH] [--tiers LIST] [--set K=V]...
 *        (foreground; ready once the socket exists)
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "daemon_proto.h"
#include "dram.h"
#include "format.h"
#include "engine.h"
#include "internal.h"
#include "kvtierd.h"
#include "tp_commit.h"

struct conn {
	struct conn *next, *prev;
	struct kvtd_state *st;
	int sock; /* -1 once closed (a connection may outlive its socket: its quarantine) */
	/* The peer process (SO_PEERCRED; 0: unknown, say in another pid namespace) and a
	 * pidfd that turns readable when it exits (-1: cannot be watched). */
	pid_t pid;
	int pidfd;
	uint32_t next_lease; /* lease ids of this connection: 1, 2, ... (never 0) */
	/* the store's unsaved evictions this client's flushes have reported (from its
	 * connect): each client hears of a loss at its next flush (kvt__store_flush_direct) */
	_Atomic uint64_t unsaved_seen;
	bool tp; /* it sent a TP_RESERVE: its thread also ends the leases of TP objects */
	bool cut; /* a request was answered at its deadline with its call still running: the
		   * connection ends after that answer (held_wait), once its TP claims and pins
		   * can go (cut_peer_wait) */
	struct held *late; /* that call, cut at the cap: the thread waits for its end before
			    * the connection's region and place go (late_wait) */
	uint8_t *shm;
	size_t shm_len;
	/* slots pinned for the client's own copy (GET_PIN until UNPIN); released when the
	 * connection goes, so a client killed mid-read leaves nothing pinned */
	struct kvt_slot_ref pins[KVTD_MAX_PINS];
	uint64_t pin_expiry[KVTD_MAX_PINS]; /* kvt__now_ns() past which the pin is released */
	uint32_t pin_lease[KVTD_MAX_PINS];
	int npins;
	/* slots reserved for the client's puts (PUT_RESERVE until PUT_COMMIT); given back
	 * unpublished when the connection goes, so a client killed mid-put shows nothing */
	struct resv {
		struct kvt_slot_ref ref;
		struct kvt_key skey;
		uint64_t expiry; /* kvt__now_ns() past which it is cancelled */
		uint32_t lease;
	} resv[KVTD_MAX_RESERVATIONS];
	int nresv;
	/* nresv as the other connections' threads read it (reserved_of, under g_lock): only
	 * this connection's thread changes nresv, always with resv_sync after; one above it
	 * while a PUT_RESERVE that passed the cap waits for its reserve (put_reserve) */
	_Atomic int resv_live;
	/* Leases (daemon.lease_ms): a client that hangs (alive but stuck, SIGSTOPped) must not
	 * hold slots forever. Pins and reservations that outlived their lease were let go;
	 * their slots and lease ids are remembered here so that the late UNPIN or PUT_COMMIT
	 * gets a clear -ETIMEDOUT instead of reading as a protocol error. The oldest is
	 * forgotten first, and past that lapsed_forgotten answers for it. */
	struct lapsed {
		int32_t slot;
		uint32_t lease;
		bool resv;
	} lapsed[KVTD_MAX_PINS + KVTD_MAX_RESERVATIONS];
	int nlapsed;
	/* The newest lease forgotten from lapsed[] (0: none). Leases are numbered in order, so
	 * an UNPIN / PUT_COMMIT of one no newer that is neither live nor remembered lapsed
	 * too: -ETIMEDOUT, not a protocol error (until 2026-12-05 more than lapsed[] holds -
	 * a client whose copies stalled past several leases - got the client dropped). */
	uint32_t lapsed_forgotten;
	/* Slots of expired reservations: the client process may still be writing into them
	 * (stopped mid-write, it resumes), and its mapping of the pool cannot be revoked, so
	 * they stay out of the pool until the connection is closed and the process is gone.
	 * Under g_lock (other connections count a process's quarantine in put_reserve). */
	struct kvt_slot_ref quar[KVTD_MAX_QUARANTINE + KVTD_MAX_RESERVATIONS];
	int nquar;
	/* Descriptors the peer passed that are not kept (drop_later): closed by this thread
	 * after the connection is let go, since a close of one may wait. The connection ends
	 * at the first message that carries one, so one message's worth is room enough
	 * (except while a cut connection waits for its peer: cut_peer_wait). */
	int drop_fds[KVTD_MAX_FDS];
	int ndrop;
};

static struct kvtd_state g_st;
static struct kvt_geometry g_geo;
static uint8_t g_ns[KVT_NS_ID_BYTES];
static uint64_t g_instance; /* this run (KVTD_CAP_LOSS_SEEN): random, not 0 */
static uint64_t g_shm_max;
static uint64_t g_max_clients;
static uint64_t g_lease_ns; /* daemon.lease_ms */
/* The DRAM pool, mapped by clients read-only (-1: not offered: no DRAM tier, or objects
 * are encrypted in their slots) */
static int g_pool_fd = -1;
static void *g_pool;
static size_t g_pool_len;
static uint64_t g_slot_bytes;
static bool g_pool_writable; /* daemon.shared_writes: g_pool_fd maps read-write */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static struct conn *g_conns;
/* cut calls that left their connection: they own its region or pin (held_wait's cap) */
static _Atomic uint64_t g_cut_left;
/* PREFETCHes answered at their deadline and still running (prefetch_call) */
static _Atomic uint64_t g_pf_left;
static _Atomic bool g_stopping; /* shutdown: connections waiting on a process stop waiting */
/* slots clients held at the shutdown (pins, reservations, quarantine), kept out of the pool
 * until the store's close: reported by the last line the daemon prints */
static _Atomic uint64_t g_kept_at_stop;

static void log_cb(void *arg, int level, const char *msg)
{
	static const char *names[] = {"error", "warn", "info", "debug"};
	fprintf(stderr, "kvtierd: %s: %s\n", names[level & 3], msg);
}

/* -------------------------------------------------------------- serving */

/* A descriptor the peer passed, not kept: its close is left to the end of the connection
 * (conn_main), after the connection is unlisted. Its last close runs the file's release,
 * and a peer chooses what that waits for: a TCP socket with SO_LINGER and unsent bytes
 * (its linger time), a FUSE file (its server). Closed where it arrived, until 2026-12-06,
 * it held the connection's thread, and the shutdown waits for every connection. */
static void drop_later(struct conn *c, int fd)
{
	if (fd < 0)
		return;
	if (c->ndrop < KVTD_MAX_FDS)
		c->drop_fds[c->ndrop++] = fd;
	else
		close(fd); /* a cut peer that keeps sending them (cut_peer_wait) */
}

static int map_region(struct conn *c, int fd, const struct kvtd_req *r)
{
	if (c->shm)
		return -EPROTO; /* a second HELLO */
	if (memcmp(r->ns_id, g_ns, sizeof(g_ns)))
		return -EINVAL; /* another model, geometry or tenant */
	/* The seals first: F_GET_SEALS answers for tmpfs and hugetlbfs files from memory and
	 * refuses anything else (-EINVAL) without calling into its file system, where the
	 * fstat and fstatfs below would ask a FUSE server, which may never answer. */
	int seals = fd < 0 ? -1 : fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return -EPROTO;
	struct stat sb;
	struct statfs fs;
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode))
		return -EPROTO;
	/* tmpfs only (a plain memfd): on hugetlbfs a client can punch a hole (F_SEAL_SHRINK
	 * does not stop FALLOC_FL_PUNCH_HOLE) and use up the node's huge pages, and our next
	 * write into the region dies of SIGBUS; tmpfs gives a punched page back on the next
	 * touch. */
	if (fstatfs(fd, &fs) < 0 || fs.f_type != TMPFS_MAGIC)
		return -EPROTO;
	/* Sealed against shrinking, so the mapping can never fault under us - and the size
	 * that is mapped read after the seal: a seal is never taken back, so that size is a
	 * floor. Until 2026-12-06 the size came from the first fstat, and a client that shrank
	 * the file and then sealed it between the two had the daemon map (and write) past
	 * its end: SIGBUS, the daemon gone for every client (from a review; no test: the
	 * window is between two system calls of the daemon). */
	if (!(seals & F_SEAL_SHRINK))
		return -EPERM;
	if (fstat(fd, &sb) < 0)
		return -EPROTO;
	if ((uint64_t)sb.st_size < KVTD_SHM_MIN || (uint64_t)sb.st_size > g_shm_max ||
	    (uint64_t)sb.st_size < sizeof(struct kvtd_info))
		return -EMSGSIZE;
	void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	c->shm = p;
	c->shm_len = (size_t)sb.st_size;
	atomic_fetch_add(&g_st.regions_mapped, 1);
	struct kvtd_info info = {.version = KVTD_VERSION,
				 .geo = g_geo,
				 .caps = KVTD_CAP_CUT_MARK | KVTD_CAP_LEASE_MS | KVTD_CAP_LOSS_SEEN |
					 KVTD_CAP_PF_RELATIVE,
				 .lease_ms = (uint32_t)(g_lease_ns / 1000000ull)};
	/* A reconnect of a client of this run: its next flush reports the losses since the
	 * count it was last told (never more than there are), not only those from now on. */
	if (r->off && r->off == g_instance) {
		uint64_t now = kvt__store_evicted_unsaved(g_st.store);
		atomic_store(&c->unsaved_seen, KVT_MIN(r->n, now));
	}
	info.instance = g_instance;
	info.loss_seen = atomic_load(&c->unsaved_seen);
	memcpy(info.ns_id, g_ns, sizeof(g_ns));
	int n = kvt_store_tier_count(g_st.store);
	info.n_tiers = (uint32_t)KVT_MIN(n, KVT_MAX_TIERS);
	for (uint32_t i = 0; i < info.n_tiers; i++)
		snprintf(info.tier[i], sizeof(info.tier[i]), "%s",
			 kvt_store_tier_name(g_st.store, (int)i));
	if (g_pool_fd >= 0) {
		info.pool_bytes = g_pool_len;
		info.slot_bytes = g_slot_bytes;
		info.pool_writable = g_pool_writable;
	}
	memcpy(c->shm, &info, sizeof(info));
	return 0;
}

/* Counts a call the store refused for now (busy_waits), once per call: *counted says it was. */
static void busy_wait_once(bool *counted)
{
	if (!*counted) {
		*counted = true;
		atomic_fetch_add(&g_st.busy_waits, 1);
	}
}

/* The store answers -EAGAIN when it cannot take a call now (its in-flight bound, a deeper
 * tier backlogged, a slot being filled): retry briefly (up to 1 s), giving up at by
 * (kvt__now_ns; 0: never) with -ETIME: the client's deadline passed. The call is counted
 * in busy_waits at its first refusal (RETRY_COUNTED: counted shared by a caller that
 * retries the whole call too, held_call). */
#define RETRY_COUNTED(expr, by, counted)                                                           \
	({                                                                                         \
		int _r, _tries = 0;                                                                \
		uint64_t _by = (by);                                                               \
		while ((_r = (expr)) == -EAGAIN && _tries++ < 5000) {                              \
			busy_wait_once(counted);                                                   \
			if (_by && kvt__now_ns() >= _by) {                                         \
				_r = -ETIME;                                                       \
				break;                                                             \
			}                                                                          \
			usleep(200);                                                               \
		}                                                                                  \
		_r;                                                                                \
	})
#define RETRY_BY(expr, by)                                                                         \
	({                                                                                         \
		bool _once = false;                                                                \
		RETRY_COUNTED(expr, by, &_once);                                                   \
	})
#define RETRY(expr) RETRY_BY(expr, 0)

/* Each request's call runs asynchronously and the connection's thread waits for it until
 * the client's deadline (kvtd_req.deadline_ns; none: until it ends). Past the deadline the
 * client has dropped the connection (a late answer could not be told from the next
 * request's), so the thread answers -ETIME and the connection ends instead of holding a
 * thread and a daemon.max_clients place until the tier's own deadline - at once, unless
 * it holds TP claims or pins the client's other threads may still use (cut_peer_wait). The call,
 * left to finish, then owns what it uses - the client's region (a get writes into it, a
 * put reads from it) or the slot an acquire pinned - and gives it back when it ends.
 * At most daemon.max_clients calls are left so; past that a cut call stays with its
 * connection, whose thread gives back what it used once it ends (late_wait). */
struct held {
	pthread_mutex_t m;
	pthread_cond_t cv;
	bool done, cut;
	struct kvt_result res; /* a get's or put's answer */
	int rc, tier;	       /* an acquire's answer (GET_PIN) */
	int cause;	       /* a failed promotion: why (written before acq_cb runs) */
	bool pinned;	       /* ref is a pin the acquire took */
	struct kvt_slot_ref ref;
	uint8_t *shm; /* cut and left: the region to unmap at the end (NULL: none) */
	size_t shm_len;
	bool prefetch; /* a PREFETCH (prefetch_call): cut and left, counted in g_pf_left */
};

static struct held *held_new(void)
{
	struct held *h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are kvt__now_ns */
	pthread_cond_init(&h->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&h->m, NULL);
	return h;
}

static void held_free(struct held *h)
{
	pthread_mutex_destroy(&h->m);
	pthread_cond_destroy(&h->cv);
	free(h);
}

/* The call ended. Waited for (cut at the cap too: late_wait): the thread takes its answer.
 * Cut and left: give back what it held. */
static void held_end(struct held *h)
{
	pthread_mutex_lock(&h->m);
	bool cut = h->cut;
	h->done = true;
	if (!cut)
		pthread_cond_signal(&h->cv);
	pthread_mutex_unlock(&h->m);
	if (!cut)
		return;
	if (h->pinned)
		kvt__store_release(g_st.store, &h->ref);
	if (h->shm) {
		munmap(h->shm, h->shm_len);
		atomic_fetch_sub(&g_st.regions_mapped, 1);
	}
	if (h->prefetch) { /* left running: not a cut call of STATUS's counts */
		atomic_fetch_sub(&g_pf_left, 1);
	} else {
		atomic_fetch_sub(&g_st.cut_running, 1);
		atomic_fetch_sub(&g_cut_left, 1);
	}
	held_free(h);
}

static void held_cb(void *arg, const struct kvt_result *res)
{
	struct held *h = arg;
	h->res = *res;
	held_end(h);
}

static void acq_cb(void *arg, int rc, const struct kvt_slot_ref *ref, int tier)
{
	struct held *h = arg;
	h->rc = rc;
	h->tier = tier;
	if (rc == 0) {
		h->ref = *ref;
		h->pinned = true;
	}
	held_end(h);
	kvt__store_leave(g_st.store); /* entered by get_pin: a close waits for this */
}

/* Wait for h's call until by (0: no deadline). true: it ended, its answer is in h (the
 * caller frees h); false: cut - the connection ends after its -ETIME answer, and h and,
 * with region, c's region now belong to the call (past the cap: they stay c's, c->late,
 * until the call ends). */
/* With h->m held: wait for h's call until by (0: no deadline). true: it ended; false: by
 * passed first. */
static bool held_wait_locked(struct held *h, uint64_t by)
{
	struct timespec ts = {.tv_sec = (time_t)(by / 1000000000u),
			      .tv_nsec = (long)(by % 1000000000u)};
	while (!h->done) {
		if (!by)
			pthread_cond_wait(&h->cv, &h->m);
		else if (pthread_cond_timedwait(&h->cv, &h->m, &ts) == ETIMEDOUT && !h->done)
			return false;
	}
	return true;
}

static bool held_wait(struct conn *c, struct held *h, uint64_t by, bool region)
{
	pthread_mutex_lock(&h->m);
	if (!held_wait_locked(h, by)) {
		/* At most daemon.max_clients cut calls leave their connection: past that this one
		 * stays with it - its thread, region and daemon.max_clients place held to the
		 * call's end (late_wait), as before cuts existed - so a client retrying against a
		 * stalled tier meets the same bound on what abandoned calls hold. Its client is
		 * still answered now, -ETIME as any cut: until 2026-12-05 the thread waited for the
		 * call first, so at the cap a call's answer came at the tier's own deadline, past
		 * its client's (one without a deadline of its own timed out on the socket and
		 * marked the daemon down, as before cuts). Its region is unmapped only after the
		 * call's end, and the client, told of the cut, drops it (a reconnect brings a new
		 * one): late bytes land in no one else's memory. */
		if (atomic_fetch_add(&g_cut_left, 1) >= g_max_clients) {
			atomic_fetch_sub(&g_cut_left, 1);
			c->late = h;
		} else {
			h->cut = true;
			if (region) {
				h->shm = c->shm;
				h->shm_len = c->shm_len;
				c->shm = NULL;
			}
		}
		c->cut = true;
		atomic_fetch_add(&g_st.cut_running, 1);
		atomic_fetch_add(&g_st.cut, 1);
		pthread_mutex_unlock(&h->m);
		return false;
	}
	pthread_mutex_unlock(&h->m);
	return true;
}

/* A PREFETCH, waited for until its deadline (absolute, kvt__now_ns, or the time left with
 * KVTD_PF_RELATIVE; 0: none). Answered
 * -ETIME then, it runs on (a prefetch is a hint, and the connection stays), counted in
 * g_pf_left until it ends; past daemon.max_clients of them a PREFETCH is refused at once
 * (-EBUSY). Until 2026-12-06 they were not counted: one client looping on PREFETCHes
 * with a deadline already due, against a slow tier, left thousands running - the store's
 * in-flight bound filled (every client's lookups and gets then failed -EAGAIN) and their
 * key copies grew without bound (integ.daemon_prefetch_bound). */
static void prefetch_call(const struct kvtd_req *r, const uint8_t *p, struct kvt_result *res)
{
	uint64_t by = r->deadline_ns;
	if (r->flags & KVTD_PF_RELATIVE) { /* the time left, on our clock */
		uint64_t now = kvt__now_ns();
		by = !by ? 0 : by < UINT64_MAX - now ? now + by : UINT64_MAX;
	}
	/* a place taken now (given back unless the prefetch is left running), so that
	 * connections at once cannot pass the bound */
	if (atomic_fetch_add(&g_pf_left, 1) >= g_max_clients) {
		atomic_fetch_sub(&g_pf_left, 1);
		res->status = -EBUSY;
		return;
	}
	struct held *h = held_new();
	if (!h) {
		atomic_fetch_sub(&g_pf_left, 1);
		res->status = -ENOMEM;
		return;
	}
	h->prefetch = true;
	int rc = RETRY_BY(kvt__store_prefetch_direct(g_st.store, (const struct kvt_key *)p, r->n,
						     by, held_cb, h),
			  by);
	if (rc < 0) {
		atomic_fetch_sub(&g_pf_left, 1);
		held_free(h);
		res->status = rc;
		return;
	}
	pthread_mutex_lock(&h->m);
	if (!held_wait_locked(h, by)) {
		h->cut = true; /* held_end frees it, and gives its g_pf_left place back */
		pthread_mutex_unlock(&h->m);
		res->status = -ETIME;
		return;
	}
	pthread_mutex_unlock(&h->m);
	atomic_fetch_sub(&g_pf_left, 1);
	*res = h->res;
	held_free(h);
}

/* When a request's wait ends: its arrival plus the time its client gives it (0: none). */
static uint64_t deadline_of(const struct kvtd_req *r)
{
	uint64_t now = kvt__now_ns();
	/* (a budget past the clock's range is none: never a wrap to a deadline passed) */
	return r->deadline_ns && r->deadline_ns < UINT64_MAX - now ? now + r->deadline_ns : 0;
}

/* Start r's call on the store with a direct completion into h (held_cb). */
static int call_start(struct conn *c, const struct kvtd_req *r, struct held *h)
{
	struct kvt_store *s = g_st.store;
	uint8_t *p = c->shm + r->off;
	switch (r->op) {
	case KVTD_GET:
		return kvt__store_get_direct(s, &r->key, r->has_parent ? &r->parent : NULL,
					     r->layer_begin, r->layer_end, p, r->len, held_cb, h);
	case KVTD_PUT:
		return kvt__store_put_direct(s, &r->key, r->has_parent ? &r->parent : NULL,
					     r->n_tokens, p, r->len, held_cb, h);
	case KVTD_LOOKUP:
		return kvt__store_lookup_direct(s, (const struct kvt_key *)p, r->n,
						(int8_t *)(p + r->n * KVT_KEY_BYTES), held_cb, h);
	case KVTD_REMOVE:
		return kvt__store_remove_direct(s, &r->key, held_cb, h);
	default: /* KVTD_FLUSH */
		return kvt__store_flush_direct(s, held_cb, h, &c->unsaved_seen);
	}
}

/* A get, put, lookup, remove or flush, waited for until the request's deadline (the
 * client's budget): a slow tier gets the client -ETIME (a cut) before its own timeout,
 * which would take the daemon for dead. A get, put or lookup uses the client's region
 * until its end: cut, it owns the region (held_wait). Until 2026-12-05 only gets and puts
 * had a budget: a flush behind a slow write-through, or a lookup or remove a stalled tier
 * held, timed the client out, and every call of that process then failed at once for the
 * backoff, DRAM hits included. A lookup, remove or flush answered -EAGAIN (the store's
 * bounds) is tried again, as the synchronous calls' RETRY did. */
static void held_call(struct conn *c, const struct kvtd_req *r, struct kvt_result *res)
{
	uint64_t by = deadline_of(r);
	bool region = r->op == KVTD_GET || r->op == KVTD_PUT || r->op == KVTD_LOOKUP;
	bool again = r->op != KVTD_GET && r->op != KVTD_PUT;
	bool counted = false; /* busy_waits: once for the whole call */
	for (int tries = 0;; tries++) {
		struct held *h = held_new();
		if (!h) {
			res->status = -ENOMEM;
			return;
		}
		int rc = RETRY_COUNTED(call_start(c, r, h), by, &counted);
		if (rc < 0) {
			held_free(h);
			res->status = rc;
			return;
		}
		if (!held_wait(c, h, by, region)) {
			res->status = -ETIME;
			return;
		}
		*res = h->res;
		held_free(h);
		if (!again || res->status != -EAGAIN || tries >= 5000 || (by && kvt__now_ns() >= by))
			break;
		busy_wait_once(&counted);
		usleep(200);
	}
	if (r->op == KVTD_PUT) {
		res->tier = KVT_TIER_NONE;
		if (res->status >= 0)
			res->bytes = r->len;
	}
}

static uint32_t new_lease(struct conn *c)
{
	if (++c->next_lease == 0)
		c->next_lease = 1;
	return c->next_lease;
}

static void resv_sync(struct conn *c)
{
	atomic_store(&c->resv_live, c->nresv);
}

/* Reservations live for c's process, all its connections together (g_lock held): each can
 * become a quarantined slot when its lease ends. */
static int reserved_of(const struct conn *c)
{
	if (c->pid <= 0)
		return c->nresv;
	int n = 0;
	for (const struct conn *o = g_conns; o; o = o->next)
		if (o->pid == c->pid)
			n += atomic_load(&o->resv_live);
	return n;
}

/* Slots quarantined for c's process, all its connections together (g_lock held). A peer
 * whose pid is unknown is charged per connection. */
static int quarantined_of(const struct conn *c)
{
	if (c->pid <= 0)
		return c->nquar;
	int n = 0;
	for (const struct conn *o = g_conns; o; o = o->next)
		if (o->pid == c->pid)
			n += o->nquar;
	return n;
}

/* Pin key's slot for the client to copy from the pool (promoting it into DRAM first, as a
 * get does). */
static void get_pin(struct conn *c, const struct kvtd_req *r, struct kvtd_rep *rep)
{
	struct kvt_store *s = g_st.store;
	struct kvt_result *res = &rep->res;
	if (g_pool_fd < 0) {
		res->status = -ENOTSUP;
		return;
	}
	if (c->npins == KVTD_MAX_PINS) {
		res->status = -EBUSY;
		return;
	}
	struct kvt_key sk, sp;
	kvt_storage_key(g_ns, &r->key, &sk);
	if (r->has_parent) /* the chunk before it in its chain: a promotion links it there */
		kvt_storage_key(g_ns, &r->parent, &sp);
	uint64_t by = deadline_of(r);
	struct held *h = held_new();
	if (!h) {
		res->status = -ENOMEM;
		return;
	}
	/* The store's gate is held until acq_cb: a cut acquire outlives this thread, and
	 * kvt_store_close must wait for it (as for the gets and puts of held_call). */
	int rc = kvt__store_enter(s);
	if (rc == 0 &&
	    (rc = RETRY_BY(kvt__store_acquire_cause(s, &sk, r->has_parent ? &sp : NULL, acq_cb, h,
						    &h->cause),
			   by)) < 0)
		kvt__store_leave(s); /* no acq_cb comes */
	if (rc == 0) {
		if (!held_wait(c, h, by, false)) {
			kvt__store_count_get(s); /* cut: the client does not ask again */
			res->status = -ETIME;
			return;
		}
		rc = h->rc;
	}
	/* Counted where the client takes this answer; on any other failure it asks again
	 * with a GET through its region, which counts (until 2026-12-05 both did). */
	if (rc == 0 || rc == -ENOENT || rc == -ETIME) /* -ETIME: past the deadline, no retry */
		kvt__store_count_get(s);
	res->status = rc;
	if (rc == -ENOENT) /* a miss says why, as an in-process get's (set before acq_cb) */
		res->cause = h->cause;
	struct kvt_slot_ref ref = h->ref;
	int tier = h->tier;
	held_free(h);
	if (rc < 0)
		return;
	c->pin_expiry[c->npins] = kvt__now_ns() + g_lease_ns;
	c->pin_lease[c->npins] = rep->lease = new_lease(c);
	c->pins[c->npins++] = ref;
	atomic_fetch_add(&g_st.pins, 1);
	atomic_fetch_add(&g_st.pinned_gets, 1);
	rep->slot = ref.id;
	rep->slot_off = (uint64_t)((uint8_t *)ref.buf - (uint8_t *)g_pool);
	res->tier = tier;
	res->n_tokens = ref.n_tokens;
	res->bytes = ref.object_bytes;
}

/* Reserve a slot for the client to encode a put into. Status 1: the key is stored already
 * (a put is idempotent). */
static void put_reserve(struct conn *c, const struct kvtd_req *r, struct kvtd_rep *rep)
{
	struct kvt_store *s = g_st.store;
	struct kvt_result *res = &rep->res;
	if (!g_pool_writable) {
		res->status = -ENOTSUP;
		return;
	}
	if (c->nresv == KVTD_MAX_RESERVATIONS) {
		res->status = -EBUSY;
		return;
	}
	/* A process charged with enough quarantined slots (it let reservations expire, say
	 * stopped mid-write) reserves no more: its puts go through the region. Its live
	 * reservations count too, on all its connections: each may lapse into quarantine,
	 * and until 2026-12-05 a process that opened many connections and reserved 4 on each
	 * before any lapsed could quarantine the whole pool for as long as it lived. */
	/* The check and the count in one hold of g_lock: counted at once (resv_live one
	 * above nresv until the reserve's answer), so that requests on the process's other
	 * connections at the same moment see it. */
	pthread_mutex_lock(&g_lock);
	int held = quarantined_of(c), live = reserved_of(c);
	bool refuse =
		held >= KVTD_MAX_QUARANTINE ||
		held + live >= KVTD_MAX_QUARANTINE + KVTD_MAX_RESERVATIONS - 1;
	if (!refuse)
		atomic_store(&c->resv_live, c->nresv + 1);
	pthread_mutex_unlock(&g_lock);
	if (refuse) {
		res->status = -EBUSY;
		return;
	}
	/* A deeper tier has as much to write as its deadline allows: no reservation, so the
	 * client puts through the region, whose kvt_put applies the same bound and is
	 * retried (RETRY), then answers -EAGAIN. */
	if (kvt__store_backlogged(s, kvt_object_bytes(kvt_store_geometry(s), r->n_tokens))) {
		resv_sync(c);
		res->status = -EAGAIN;
		return;
	}
	struct resv *v = &c->resv[c->nresv];
	struct kvt_key sp;
	kvt_storage_key(g_ns, &r->key, &v->skey);
	if (r->has_parent)
		kvt_storage_key(g_ns, &r->parent, &sp);
	int rc = kvt__store_reserve(s, &v->skey, r->has_parent ? &sp : NULL, r->n_tokens, &v->ref);
	if (rc < 0)
		resv_sync(c); /* the provisional count goes */
	if (rc == -EEXIST) {
		res->status = 1;
		return;
	}
	res->status = rc;
	if (rc < 0)
		return;
	v->expiry = kvt__now_ns() + g_lease_ns;
	v->lease = rep->lease = new_lease(c);
	c->nresv++;
	resv_sync(c);
	atomic_fetch_add(&g_st.reserved, 1);
	rep->slot = v->ref.id;
	rep->slot_off = (uint64_t)((uint8_t *)v->ref.buf - (uint8_t *)g_pool);
	res->bytes = v->ref.object_bytes;
}

static void lapse(struct conn *c, int32_t slot, uint32_t lease, bool resv)
{
	if (c->nlapsed == (int)(sizeof(c->lapsed) / sizeof(c->lapsed[0]))) {
		c->lapsed_forgotten = KVT_MAX(c->lapsed_forgotten, c->lapsed[0].lease);
		memmove(c->lapsed, c->lapsed + 1, sizeof(c->lapsed) - sizeof(c->lapsed[0]));
		c->nlapsed--;
	}
	c->lapsed[c->nlapsed++] = (struct lapsed){.slot = slot, .lease = lease, .resv = resv};
}

/* A late UNPIN / PUT_COMMIT of a lease that ran out: 0 (and forgotten), else -1. */
static int lapsed_take(struct conn *c, uint64_t slot, uint32_t lease, bool resv)
{
	for (int i = 0; i < c->nlapsed; i++)
		if ((uint64_t)(uint32_t)c->lapsed[i].slot == slot && c->lapsed[i].lease == lease &&
		    c->lapsed[i].resv == resv) {
			memmove(c->lapsed + i, c->lapsed + i + 1,
				(size_t)(c->nlapsed - i - 1) * sizeof(c->lapsed[0]));
			c->nlapsed--;
			return 0;
		}
	return lease && lease <= c->lapsed_forgotten ? 0 : -1;
}

/* An expired reservation: its key is given back unpublished, its slot quarantined and
 * charged to this connection's process (see struct conn). */
static void quarantine(struct conn *c, struct kvt_slot_ref *ref)
{
	kvt__store_cancel_keep(g_st.store, ref);
	pthread_mutex_lock(&g_lock);
	c->quar[c->nquar++] = *ref;
	pthread_mutex_unlock(&g_lock);
	atomic_fetch_add(&g_st.quarantined, 1);
	atomic_fetch_add(&g_st.quarantined_bytes, g_slot_bytes);
}

/* The connection is closed: once its process is gone too (or cannot be watched), nothing
 * can write into its quarantined slots any more, and they go back to the pool. At a
 * shutdown they stay out, as pins and reservations do (conn_main): the process may still
 * be alive and stopped, and other connections' calls received before the shutdown may
 * still allocate slots; one given this slot would be overwritten when the writer resumes,
 * and the shutdown's flush would then store those bytes under a fresh checksum. Until
 * 2026-12-06 they were given back here at a shutdown. */
static void quarantine_drain(struct conn *c)
{
	if (c->nquar && c->pidfd >= 0) {
		struct pollfd pf = {.fd = c->pidfd, .events = POLLIN};
		while (!atomic_load(&g_stopping) && poll(&pf, 1, 100) != 1)
			;
	}
	if (atomic_load(&g_stopping) && c->nquar &&
	    (c->pidfd < 0 || poll(&(struct pollfd){.fd = c->pidfd, .events = POLLIN}, 1, 0) != 1)) {
		atomic_fetch_add(&g_kept_at_stop, (uint64_t)c->nquar);
		c->nquar = 0; /* the store's close frees the pool with them */
		return;
	}
	pthread_mutex_lock(&g_lock);
	while (c->nquar) {
		kvt__store_release(g_st.store, &c->quar[--c->nquar]);
		atomic_fetch_sub(&g_st.quarantined, 1);
		atomic_fetch_sub(&g_st.quarantined_bytes, g_slot_bytes);
	}
	pthread_mutex_unlock(&g_lock);
}

static uint64_t expire_leases(struct conn *c, uint64_t now);

/* A call cut at the cap (held_wait) still uses the connection's region, or pins a slot:
 * wait for its end (bounded by the tier's own deadline), then give back its pin; the
 * region goes with the connection after. The socket is shut first, so a peer that did not
 * drop its end on the cut answer learns at once that nothing more comes. */
static void late_wait(struct conn *c)
{
	struct held *h = c->late;
	if (!h)
		return;
	shutdown(c->sock, SHUT_RDWR);
	pthread_mutex_lock(&h->m);
	while (!h->done)
		pthread_cond_wait(&h->cv, &h->m);
	pthread_mutex_unlock(&h->m);
	if (h->pinned)
		kvt__store_release(g_st.store, &h->ref);
	held_free(h);
	c->late = NULL;
	atomic_fetch_sub(&g_st.cut_running, 1);
}

/* A cut connection's process may still be copying into its TP slots or out of its pinned
 * ones, on threads other than the one whose call was cut: its gathers stop once that
 * thread has read the cut answer, swapped its pool mapping out and closed its end
 * (src/daemon_client.c, disconnect). Until then, or until the process is gone, its TP
 * claims stay held: released at once, as until 2026-12-05, another client could be given
 * a slot that late bytes of the old gather then overwrote (DRAM hits are not CRC-checked).
 * Pins stay held too, but only to their lease (expire_leases runs here as in the loop: a
 * stopped client must not hold the pool past it), and the wait ends once nothing is held.
 * Anything the peer still sends is discarded. */
static void cut_peer_wait(struct conn *c)
{
	struct pollfd pf[2] = {{.fd = c->sock, .events = POLLIN},
			       {.fd = c->pidfd, .events = POLLIN}};
	while (!atomic_load(&g_stopping)) {
		expire_leases(c, kvt__now_ns());
		if (!c->npins && !kvtd_tp_conn_holds(c))
			return;
		int n = poll(pf, c->pidfd >= 0 ? 2 : 1, 100);
		if (n < 0 && errno != EINTR)
			return;
		if (n <= 0)
			continue;
		if (pf[1].revents && c->pidfd >= 0)
			return; /* the process is gone */
		if (pf[0].revents) {
			/* received with its descriptors: dropped by the kernel they would be
			 * closed in this thread (drop_later) */
			char b[256];
			int fds[KVTD_MAX_FDS], nfds;
			long r = kvtd_recv_fds(c->sock, b, sizeof(b), fds, &nfds);
			for (int i = 0; i < nfds; i++)
				drop_later(c, fds[i]);
			if (r == 0 || (r < 0 && r != -ETIMEDOUT && r != -EMSGSIZE))
				return; /* its end is closed */
		}
	}
}

/* Let go of every pin and reservation whose lease ended by now: a pin is released (its
 * slot may be evicted and reused), a reservation cancelled (never published; its slot
 * quarantined). Returns the earliest lease still running (UINT64_MAX: none). */
static uint64_t expire_leases(struct conn *c, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	for (int i = 0; i < c->npins;) {
		if (c->pin_expiry[i] <= now) {
			lapse(c, c->pins[i].id, c->pin_lease[i], false);
			kvt__store_release(g_st.store, &c->pins[i]);
			c->pins[i] = c->pins[--c->npins];
			c->pin_expiry[i] = c->pin_expiry[c->npins];
			c->pin_lease[i] = c->pin_lease[c->npins];
			atomic_fetch_sub(&g_st.pins, 1);
			atomic_fetch_add(&g_st.pins_expired, 1);
			continue;
		}
		next = KVT_MIN(next, c->pin_expiry[i]);
		i++;
	}
	for (int i = 0; i < c->nresv;) {
		if (c->resv[i].expiry <= now) {
			lapse(c, c->resv[i].ref.id, c->resv[i].lease, true);
			quarantine(c, &c->resv[i].ref);
			c->resv[i] = c->resv[--c->nresv];
			resv_sync(c);
			atomic_fetch_sub(&g_st.reserved, 1);
			atomic_fetch_add(&g_st.reservations_expired, 1);
			continue;
		}
		next = KVT_MIN(next, c->resv[i].expiry);
		i++;
	}
	return next;
}

/* The client wrote the object: check its header (format, geometry, namespace, the key
 * reserved, its size) and publish it; anything else is given back unpublished. */
static int put_commit(struct conn *c, uint64_t slot, uint32_t lease, struct kvt_result *res)
{
	for (int i = 0; i < c->nresv; i++) {
		struct resv *v = &c->resv[i];
		if ((uint64_t)v->ref.id != slot || v->lease != lease)
			continue;
		struct kvt_slot_ref ref = v->ref;
		struct kvt_key sk = v->skey;
		c->resv[i] = c->resv[--c->nresv];
		resv_sync(c);
		atomic_fetch_sub(&g_st.reserved, 1);
		struct kvt_header h;
		struct kvt_expect exp = {.geometry = &g_geo, .ns_id = g_ns, .key = &sk,
					 .max_object_bytes = ref.object_bytes};
		if (kvt__header_decode(ref.buf, &h, &exp) < 0 || h.n_tokens != ref.n_tokens ||
		    h.object_bytes != ref.object_bytes || h.flags) {
			kvt__store_cancel(g_st.store, &ref);
			res->status = -EBADMSG;
			return 0;
		}
		int rc = kvt__store_commit_sealed(g_st.store, &ref);
		res->status = rc < 0 ? rc : 0; /* KVT__COMMIT_DROPPED: done, ordered before a remove */
		if (rc == 0)
			atomic_fetch_add(&g_st.shared_puts, 1);
		res->bytes = kvt_payload_bytes(&g_geo, ref.n_tokens);
		return 0;
	}
	if (lapsed_take(c, slot, lease, true) == 0) {
		res->status = -ETIMEDOUT; /* its lease ran out: cancelled, never published */
		return 0;
	}
	return -EPROTO; /* not a reservation of this connection */
}

static int unpin(struct conn *c, uint64_t slot, uint32_t lease)
{
	for (int i = 0; i < c->npins; i++)
		if ((uint64_t)c->pins[i].id == slot && c->pin_lease[i] == lease) {
			kvt__store_release(g_st.store, &c->pins[i]);
			c->pins[i] = c->pins[--c->npins];
			c->pin_expiry[i] = c->pin_expiry[c->npins];
			c->pin_lease[i] = c->pin_lease[c->npins];
			atomic_fetch_sub(&g_st.pins, 1);
			return 0;
		}
	if (lapsed_take(c, slot, lease, false) == 0)
		return -ETIMEDOUT; /* its lease ran out: released before this UNPIN */
	return -EPROTO; /* not a pin of this connection */
}

static void serve_one(struct conn *c, const struct kvtd_req *r, struct kvtd_rep *rep)
{
	struct kvt_result *res = &rep->res;
	struct kvt_store *s = g_st.store;
	uint8_t *p = c->shm + r->off;
	res->tier = KVT_TIER_NONE;
	switch (r->op) {
	case KVTD_PUT:
	case KVTD_GET:
	case KVTD_LOOKUP: /* res->cause: why the prefix stopped, if a tier could not say */
	case KVTD_REMOVE:
	case KVTD_FLUSH:
		held_call(c, r, res);
		if (r->op == KVTD_FLUSH) /* the losses this connection has been told of */
			rep->slot_off = atomic_load(&c->unsaved_seen);
		break;
	case KVTD_PREFETCH:
		/* the retries end at the deadline too: the client has stopped waiting by then, and
		 * an answer after it reads as a dead daemon (until 2026-12-06 up to 1 s of them) */
		prefetch_call(r, p, res);
		break;
	case KVTD_STATS: {
		struct kvt_stats st;
		res->status = kvt_stats(s, &st);
		memcpy(p, &st, KVT_MIN((size_t)r->len, sizeof(st))); /* KVTD_STATS_MIN_BYTES */
		break;
	}
	case KVTD_STATUS: {
		struct kvtd_status st = {
			.connections = atomic_load(&g_st.connections),
			.connections_total = atomic_load(&g_st.connections_total),
			/* this request itself is not counted */
			.ops_in_progress = atomic_load(&g_st.ops_in_progress) - 1,
			.regions_mapped = atomic_load(&g_st.regions_mapped),
			.protocol_errors = atomic_load(&g_st.protocol_errors),
			.refused = atomic_load(&g_st.refused),
			.pins = atomic_load(&g_st.pins),
			.pinned_gets = atomic_load(&g_st.pinned_gets),
			.reserved = atomic_load(&g_st.reserved),
			.shared_puts = atomic_load(&g_st.shared_puts),
			.pins_expired = atomic_load(&g_st.pins_expired),
			.reservations_expired = atomic_load(&g_st.reservations_expired),
			.quarantined = atomic_load(&g_st.quarantined),
			.quarantined_bytes = atomic_load(&g_st.quarantined_bytes),
			.cut = atomic_load(&g_st.cut),
			.cut_running = atomic_load(&g_st.cut_running),
			.busy_waits = atomic_load(&g_st.busy_waits),
		};
		kvtd_tp_counts(&st.tp_partials, &st.tp_published, &st.tp_cancelled,
			       &st.tp_quarantined, &st.tp_quarantined_bytes);
		/* a client older than the last fields asks for less (kvtd_req_check) */
		memcpy(p, &st, KVT_MIN(r->len, sizeof(st)));
		res->status = 0;
		break;
	}
	case KVTD_GET_PIN:
		get_pin(c, r, rep);
		break;
	case KVTD_UNPIN:
		res->status = unpin(c, r->n, r->lease);
		break;
	case KVTD_PUT_RESERVE:
		put_reserve(c, r, rep);
		break;
	case KVTD_PUT_COMMIT:
		if (put_commit(c, r->n, r->lease, res) < 0)
			res->status = -EPROTO;
		break;
	case KVTD_TP_RESERVE:
		c->tp = true;
		kvtd_tp_reserve(c, c->pid, r, p, rep);
		break;
	case KVTD_TP_WRITTEN:
		kvtd_tp_written(c, r, res);
		break;
	case KVTD_CLEAR:
		/* half the client's time: the answer must reach it before it stops waiting */
		res->status = kvt__store_clear_sync(
		    s, r->deadline_ns ? kvt__now_ns() + r->deadline_ns / 2 : 0, &res->bytes);
		break;
	default:
		res->status = -EPROTO;
	}
}

static int hist_of(uint32_t op)
{
	return op == KVTD_PUT || op == KVTD_PUT_RESERVE ? KVTD_H_PUT
	       : op == KVTD_GET || op == KVTD_GET_PIN ? KVTD_H_GET
				     : op == KVTD_LOOKUP  ? KVTD_H_LOOKUP
							  : KVTD_H_OTHER;
}

/* A peer that connects and never says HELLO would hold one of daemon.max_clients slots
 * forever: it gets this long, then the connection is dropped. */
#define HELLO_DEADLINE_S 5
/* A reply that cannot be sent in this long means a peer that sent requests without reading
 * the replies (the protocol has one request in flight, and a reply is a few hundred
 * bytes): the connection is dropped, and what it held with it. Blocked in the send, its
 * thread would never expire its leases. */
#define REPLY_DEADLINE_S 2

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	struct timeval tv = {.tv_sec = HELLO_DEADLINE_S}, stv = {.tv_sec = REPLY_DEADLINE_S};
	setsockopt(c->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c->sock, SOL_SOCKET, SO_SNDTIMEO, &stv, sizeof(stv));
	for (;;) {
		/* While it holds pins or reservations, the client gets until their leases end to
		 * speak; then they are let go, and it may stay connected. */
		uint64_t next = expire_leases(c, kvt__now_ns());
		if (c->tp) /* and the objects it claimed tensor-parallel heads of */
			next = KVT_MIN(next, kvtd_tp_expire(c));
		if (next != UINT64_MAX) {
			uint64_t now = kvt__now_ns();
			int ms = next > now ? (int)KVT_MIN((next - now + 999999) / 1000000,
							   (uint64_t)INT32_MAX)
					    : 0;
			struct pollfd pf = {.fd = c->sock, .events = POLLIN};
			int pr = poll(&pf, 1, ms);
			if (pr == 0 || (pr < 0 && errno == EINTR))
				continue;
		}
		struct kvtd_req req;
		int fds[KVTD_MAX_FDS], nfds;
		long got = kvtd_recv_fds(c->sock, &req, sizeof(req), fds, &nfds);
		int fd = got > 0 && nfds == 1 ? fds[0] : -1;
		for (int i = 0; fd < 0 && i < nfds; i++)
			drop_later(c, fds[i]);
		if (got <= 0) { /* EOF: the client left (or died); anything else: drop it */
			if (got < 0) {
				if (got == -EMSGSIZE)
					atomic_fetch_add(&g_st.protocol_errors, 1);
			}
			break;
		}
		char err[128];
		int rc = kvtd_req_check(&req, (size_t)got, c->shm_len, &g_geo, err, sizeof(err));
		if (rc == 0 && nfds > 1)
			rc = -EPROTO, snprintf(err, sizeof(err), "%d descriptors on one message", nfds);
		if (rc == 0 && fd >= 0 && req.op != KVTD_HELLO)
			rc = -EPROTO, snprintf(err, sizeof(err), "descriptor on a non-HELLO message");
		if (rc < 0) {
			drop_later(c, fd);
			atomic_fetch_add(&g_st.protocol_errors, 1);
			fprintf(stderr, "kvtierd: dropping a client: %s\n", err);
			break;
		}
		struct kvtd_rep rep = {.magic = KVTD_MAGIC, .op = req.op, .seq = req.seq};
		if (req.op == KVTD_HELLO) {
			rep.res.status = map_region(c, fd, &req);
			rep.res.tier = KVT_TIER_NONE;
			if (rep.res.status == 0)
				close(fd); /* a memfd: its close waits for nothing */
			else
				drop_later(c, fd);
			if (rep.res.status == -EPROTO) {
				atomic_fetch_add(&g_st.protocol_errors, 1);
				break;
			}
			if (rep.res.status == 0) { /* attached: an idle client may stay */
				tv.tv_sec = 0;
				setsockopt(c->sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
			}
		} else {
			atomic_fetch_add(&g_st.ops_in_progress, 1);
			uint64_t t0 = kvt__now_ns();
			serve_one(c, &req, &rep);
			/* UNPIN and PUT_COMMIT are the tails of a request, not requests */
			if (req.op != KVTD_UNPIN && req.op != KVTD_PUT_COMMIT)
				kvtd_hist_record(&g_st.hist[hist_of(req.op)], kvt__now_ns() - t0);
			atomic_fetch_sub(&g_st.ops_in_progress, 1);
			if ((req.op == KVTD_UNPIN || req.op == KVTD_PUT_COMMIT) &&
			    rep.res.status == -EPROTO) {
				atomic_fetch_add(&g_st.protocol_errors, 1);
				fprintf(stderr, "kvtierd: dropping a client: %s of a slot it did "
						"not %s\n", req.op == KVTD_UNPIN ? "UNPIN" : "PUT_COMMIT",
					req.op == KVTD_UNPIN ? "pin" : "reserve");
				break;
			}
		}
		if (c->cut)
			rep.slot = KVTD_SLOT_CUT; /* the client drops its end too */
		/* HELLO's answer carries the DRAM pool, which the client maps read-only */
		int pass = req.op == KVTD_HELLO && rep.res.status == 0 ? g_pool_fd : -1;
		int src = kvtd_send(c->sock, &rep, sizeof(rep), pass);
		/* A refused HELLO is told why, then let go: retried on one connection, it would
		 * restart the HELLO deadline each time and hold a daemon.max_clients place. */
		if (req.op == KVTD_HELLO && rep.res.status < 0)
			break;
		if (c->cut)
			break; /* its call still runs, on the region it now owns */
		if (src < 0) {
			if (src == -ETIMEDOUT) {
				atomic_fetch_add(&g_st.protocol_errors, 1);
				fprintf(stderr, "kvtierd: dropping a client: it has not read a reply "
						"for %d s\n", REPLY_DEADLINE_S);
			}
			break;
		}
	}
	if (c->cut && (c->npins || kvtd_tp_conn_holds(c)))
		cut_peer_wait(c);
	/* At a shutdown the connection was closed by us, not by its client, which may still be
	 * reading a pinned slot (a device load marks layers ready within its lease) or writing
	 * a reserved or claimed one; other connections' calls received before the shutdown may
	 * still allocate slots. Released now, a slot could be refilled under that client
	 * (DRAM is not CRC-checked: silent). So at a shutdown nothing is given back: the
	 * store's close frees the pool, and the client's mapping keeps the bytes it reads
	 * (until 2026-12-06 everything was released here as for any closed connection). */
	bool stopping = atomic_load(&g_stopping);
	if (stopping)
		atomic_fetch_add(&g_kept_at_stop, (uint64_t)(c->npins + c->nresv));
	/* The connection's whole state goes with it: nothing it held stays pinned. */
	while (!stopping && c->npins) {
		kvt__store_release(g_st.store, &c->pins[--c->npins]);
		atomic_fetch_sub(&g_st.pins, 1);
	}
	if (!stopping)
		kvtd_tp_conn_gone(c);
	/* Live reservations are cancelled at once: our client writes into a slot only between
	 * its PUT_RESERVE and PUT_COMMIT, on the thread that owns the connection, so a closed
	 * connection means a finished writer (or a dead process). */
	while (!stopping && c->nresv) {
		kvt__store_cancel(g_st.store, &c->resv[--c->nresv].ref);
		atomic_fetch_sub(&g_st.reserved, 1);
	}
	resv_sync(c);
	late_wait(c); /* before the region goes: a call cut at the cap may still use it */
	if (c->shm) {
		munmap(c->shm, c->shm_len);
		atomic_fetch_sub(&g_st.regions_mapped, 1);
	}
	/* The peer sees the end now (EOF, EPIPE). The socket is closed last, with the
	 * descriptors the peer passed and we did not keep: its close drops the messages still
	 * queued on it, and with them the descriptors they carry, whose last close may wait
	 * (drop_later). Closed here under g_lock, until 2026-12-06, one such message stopped
	 * every accept and the shutdown. */
	pthread_mutex_lock(&g_lock);
	int sock = c->sock;
	shutdown(sock, SHUT_RDWR);
	c->sock = -1;
	atomic_fetch_sub(&g_st.connections, 1);
	pthread_mutex_unlock(&g_lock);
	quarantine_drain(c); /* may wait for the process to exit */
	if (c->pidfd >= 0)
		close(c->pidfd);
	pthread_mutex_lock(&g_lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		g_conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	pthread_cond_broadcast(&g_cond);
	pthread_mutex_unlock(&g_lock);
	/* Unlisted: the shutdown no longer waits for this thread, and nothing of the
	 * connection is left in memory while a close below waits (exit ends it). */
	int drop[KVTD_MAX_FDS], ndrop = c->ndrop;
	memcpy(drop, c->drop_fds, sizeof(int) * (size_t)ndrop);
	free(c);
	close(sock);
	for (int i = 0; i < ndrop; i++)
		close(drop[i]);
	return NULL;
}

static void accept_one(int lfd)
{
	int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (s < 0) {
		/* Out of descriptors: the pending peer keeps the listening socket readable, so
		 * poll would return at once, forever. Wait for connections to end instead. */
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
			static uint64_t last_warn;
			uint64_t now = kvt__now_ns();
			if (now - last_warn > 10000000000ull) {
				last_warn = now;
				fprintf(stderr, "kvtierd: cannot accept a client: %s (retrying every "
						"100 ms)\n", strerror(errno));
			}
			usleep(100000);
		}
		return;
	}
	pthread_mutex_lock(&g_lock);
	if (atomic_load(&g_st.connections) >= g_max_clients) {
		pthread_mutex_unlock(&g_lock);
		atomic_fetch_add(&g_st.refused, 1);
		close(s);
		return;
	}
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		pthread_mutex_unlock(&g_lock);
		close(s);
		return;
	}
	pthread_t th;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 256 << 10);
	c->sock = s;
	atomic_init(&c->unsaved_seen, kvt__store_evicted_unsaved(g_st.store));
	/* Who is at the other end, to know when it is gone (quarantine_drain): a pidfd
	 * (Linux 5.3) opened now, while the connection is fresh. Set before the connection is
	 * listed: other threads read pid under g_lock (quarantined_of). */
	struct ucred cr;
	socklen_t crl = sizeof(cr);
	c->pidfd = -1;
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &crl) == 0 && cr.pid > 0) {
		c->pid = cr.pid;
#ifdef SYS_pidfd_open
		c->pidfd = (int)syscall(SYS_pidfd_open, cr.pid, 0);
#endif
	}
	c->next = g_conns;
	if (g_conns)
		g_conns->prev = c;
	g_conns = c;
	atomic_fetch_add(&g_st.connections, 1);
	atomic_fetch_add(&g_st.connections_total, 1);
	if (pthread_create(&th, &at, conn_main, c)) {
		g_conns = c->next;
		if (g_conns)
			g_conns->prev = NULL;
		atomic_fetch_sub(&g_st.connections, 1);
		if (c->pidfd >= 0)
			close(c->pidfd);
		close(s);
		free(c);
	}
	pthread_attr_destroy(&at);
	pthread_mutex_unlock(&g_lock);
}

/* ---------------------------------------------------------------- setup */

/* Bound to a temporary name, restricted, listening, then renamed into place: the socket
 * exists only once it is ready, and never with wider permissions. The daemon holds an
 * exclusive flock on "<path>.lock" for as long as it runs (the file is left in place:
 * removing it would race the next daemon's open): two daemons started at once for one
 * path both found no socket and the second rename silently replaced the first's socket,
 * which then served nobody while holding its pool and tier locks (until 2026-12-06). */
static int listen_at(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	char tmp[sizeof(a.sun_path)], lockp[sizeof(a.sun_path) + 8];
	if (snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid()) >= (int)sizeof(tmp)) {
		fprintf(stderr, "kvtierd: socket path too long: %s\n", path);
		return -1;
	}
	snprintf(lockp, sizeof(lockp), "%s.lock", path);
	int lk = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lk < 0) {
		fprintf(stderr, "kvtierd: cannot open %s: %s\n", lockp, strerror(errno));
		return -1;
	}
	if (flock(lk, LOCK_EX | LOCK_NB) < 0) {
		fprintf(stderr, "kvtierd: %s is in use by a running daemon (%s is locked)\n", path,
			lockp);
		close(lk);
		return -1;
	}
	/* lk stays open (and locked) until the process exits */
	/* A socket left by a daemon that died: replace it only if nobody listens there
	 * (ECONNREFUSED; ENOENT: it went meanwhile). Any other failure (EACCES: a live daemon
	 * of another user) says nothing of that, and its socket stays. */
	struct stat sb;
	if (lstat(path, &sb) == 0) {
		int probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
		int crc = S_ISSOCK(sb.st_mode) ? connect(probe, (struct sockaddr *)&a, sizeof(a))
					       : -1;
		int cerr = errno;
		close(probe);
		if (!S_ISSOCK(sb.st_mode) || crc == 0) {
			fprintf(stderr, "kvtierd: %s exists and is %s\n", path,
				S_ISSOCK(sb.st_mode) ? "in use by a running daemon" : "not a socket");
			return -1;
		}
		if (cerr != ECONNREFUSED && cerr != ENOENT) {
			fprintf(stderr, "kvtierd: %s exists and cannot be probed: %s\n", path,
				strerror(cerr));
			return -1;
		}
		unlink(path);
	}
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", tmp);
	unlink(tmp);
	mode_t old = umask(0077);
	int rc = bind(s, (struct sockaddr *)&a, sizeof(a));
	umask(old);
	if (rc < 0 || chmod(tmp, 0600) < 0 || listen(s, 128) < 0 || rename(tmp, path) < 0) {
		fprintf(stderr, "kvtierd: cannot listen on %s: %s\n", path, strerror(errno));
		unlink(tmp);
		close(s);
		return -1;
	}
	return s;
}

static int usage(void)
{
	fprintf(stderr,
		"usage: kvtierd (--config FILE | --dir D) [--socket PATH] [--metrics "
		"127.0.0.1:PORT]\n"
		"               [--events tcp://ADDR:PORT|ipc://PATH] [--tiers LIST] [--set "
		"K=V]...\n"
		"Runs in the foreground; ready once the socket exists. SIGINT/SIGTERM: flush, "
		"close.\n");
	return 2;
}

/* Everything but the configuration's life, so that every exit path frees it (main). */
static int run(struct kvt_config *cfg, int argc, char **argv)
{
	char err[256];
	kvt_config_set_log(cfg, log_cb, NULL, KVT_LOG_WARN);
	/* The pool in a memfd that HELLO hands to clients: their DRAM hits are copied straight
	 * out of the slot, not through a second buffer (--set dram.shared=false: through it). */
	kvt_config_set(cfg, "dram.shared", "true", err, sizeof(err));
	/* The node's pool lives as long as the node: fault it in once at start, not in the
	 * first requests (--set dram.prefault=false: lazily). */
	kvt_config_set(cfg, "dram.prefault", "true", err, sizeof(err));
	bool have_store = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help"))
			return usage(), 0;
		if (!v) {
			fprintf(stderr, "kvtierd: %s needs a value (see --help)\n", a);
			return 2;
		}
		i++;
		int rc = 0;
		char key[128]; /* --set's key */
		if (!strcmp(a, "--config")) {
			rc = kvt_config_load_file(cfg, v, err, sizeof(err));
			have_store = true;
		} else if (!strcmp(a, "--dir")) {
			rc = kvt_config_set(cfg, "nvme.dirs", v, err, sizeof(err));
			have_store = true;
		} else if (!strcmp(a, "--socket")) {
			rc = kvt_config_set(cfg, "daemon.socket", v, err, sizeof(err));
		} else if (!strcmp(a, "--metrics")) {
			rc = kvt_config_set(cfg, "daemon.metrics", v, err, sizeof(err));
		} else if (!strcmp(a, "--events")) {
			rc = kvt_config_set(cfg, "daemon.events", v, err, sizeof(err));
		} else if (!strcmp(a, "--tiers")) {
			rc = kvt_config_set(cfg, "store.tiers", v, err, sizeof(err));
		} else if (!strcmp(a, "--set")) {
			const char *eq = strchr(v, '=');
			if (!eq) { /* v is not shown: it may be a password given without its key */
				fprintf(stderr, "kvtierd: --set wants K=V (got no '=')\n");
				return 2;
			}
			snprintf(key, sizeof(key), "%.*s", (int)(eq - v), v);
			rc = kvt_config_set(cfg, key, eq + 1, err, sizeof(err));
			if (rc == -ENOENT)
				snprintf(err, sizeof(err), "unknown configuration key '%s'", key);
			v = key; /* an error names the key, never the value (a URL's password) */
		} else {
			fprintf(stderr, "kvtierd: unknown option '%s' (see --help)\n", a);
			return 2;
		}
		if (rc < 0) {
			fprintf(stderr, "kvtierd: %s %s: %s\n", a, v, err); /* --set: v is the key */
			return 2;
		}
	}
	if (!have_store)
		return usage();
	if (kvt__cfg_str(cfg, "store.daemon")[0]) {
		fprintf(stderr, "kvtierd: store.daemon is set: a daemon cannot be a client of "
				"another\n");
		return 2;
	}
	char sock_path[108], metrics[128];
	if (snprintf(sock_path, sizeof(sock_path), "%s", kvt__cfg_str(cfg, "daemon.socket")) >=
	    (int)sizeof(sock_path)) {
		fprintf(stderr, "kvtierd: daemon.socket longer than %zu bytes\n",
			sizeof(sock_path) - 1);
		return 2;
	}
	snprintf(metrics, sizeof(metrics), "%s", kvt__cfg_str(cfg, "daemon.metrics"));
	g_max_clients = kvt__cfg_u64(cfg, "daemon.max_clients");
	g_lease_ns = kvt__cfg_u64(cfg, "daemon.lease_ms") * 1000000ull;

	/* Every thread inherits the blocked signals; the main loop takes them by signalfd. */
	sigset_t ss;
	sigemptyset(&ss);
	sigaddset(&ss, SIGINT);
	sigaddset(&ss, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &ss, NULL);
	signal(SIGPIPE, SIG_IGN);
	int sfd = signalfd(-1, &ss, SFD_CLOEXEC);
	if (sfd < 0) { /* SIGINT and SIGTERM stay blocked: only SIGKILL, no final flush */
		fprintf(stderr, "kvtierd: cannot take signals (signalfd): %s\n", strerror(errno));
		return 1;
	}

	int rc = kvt_store_open(cfg, &g_st.store);
	if (rc < 0) {
		fprintf(stderr, "kvtierd: cannot open the store: %s\n", kvt_strerror(rc));
		return 1;
	}
	g_geo = *kvt_store_geometry(g_st.store);
	struct kvt_dram *dram = kvt__store_dram(g_st.store);
	if (dram && !kvt__store_encrypts(g_st.store)) {
		int fd = kvt__dram_pool(dram, &g_pool, &g_pool_len);
		g_slot_bytes = kvt__dram_slot_bytes(dram);
		/* Writable for clients only with shared writes (and objects the store need not
		 * MAC); else sealed against writes first. A read-only descriptor alone is not
		 * enough: a memfd's access is checked on the file, so a client could open its
		 * /proc/self/fd entry O_RDWR, map it writable and change any published object
		 * (until 2026-12-04; integ.daemon_pool_readonly). F_SEAL_FUTURE_WRITE refuses every
		 * new writable mapping and write(2); the daemon's own mapping, made before, stays
		 * writable. F_SEAL_SEAL then fixes the seals. A pool that cannot be sealed is not
		 * shared: clients then go through their region. */
		g_pool_writable = fd >= 0 && kvt__cfg_bool(cfg, "daemon.shared_writes") &&
				  !kvt__store_protected(g_st.store);
		/* Not on hugetlbfs: there F_SEAL_SHRINK does not stop FALLOC_FL_PUNCH_HOLE, and a
		 * client holding the pool read-write could unmap every page under the daemon and
		 * take the freed huge pages - its next touch of the pool dies of SIGBUS (until
		 * 2026-12-05; the client regions were refused on hugetlbfs for the same reason).
		 * F_SEAL_FUTURE_WRITE refuses the punch there. */
		struct statfs pfs;
		if (g_pool_writable && fstatfs(fd, &pfs) == 0 && pfs.f_type == HUGETLBFS_MAGIC) {
			fprintf(stderr, "kvtierd: the shared DRAM pool is on huge pages: clients read "
					"it, and write through their regions (daemon.shared_writes "
					"needs dram.hugepages=false)\n");
			g_pool_writable = false;
		}
		if (fd >= 0 &&
		    fcntl(fd, F_ADD_SEALS, (g_pool_writable ? 0 : F_SEAL_FUTURE_WRITE) | F_SEAL_SEAL) < 0) {
			fprintf(stderr, "kvtierd: cannot seal the shared DRAM pool (%s): clients "
					"copy through their regions\n", strerror(errno));
			fd = -1;
			g_pool_writable = false;
		}
		if (fd >= 0 && !g_pool_writable) {
			char proc[64];
			snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
			fd = open(proc, O_RDONLY | O_CLOEXEC);
		}
		g_pool_fd = fd;
	}
	memcpy(g_ns, kvt_store_ns_id(g_st.store), sizeof(g_ns));
	kvtd_tp_init(g_st.store, g_ns, g_pool, g_pool_writable, g_lease_ns);
	g_shm_max = KVT_ALIGN_UP(KVT_MAX(kvt_payload_bytes(&g_geo, g_geo.chunk_tokens),
					 (uint64_t)KVTD_SHM_MIN),
				 4096) +
		    KVTD_SHM_MAX_EXTRA;
	struct MHD_Daemon *mhd = NULL;
	if (metrics[0] && kvtd_metrics_start(metrics, &g_st, &mhd) < 0) {
		kvt_store_close(g_st.store);
		return 2;
	}
	struct kvtd_events *events = NULL;
	if (kvtd_events_start(cfg, &g_st, &events) < 0) {
		kvtd_metrics_stop(mhd);
		kvt_store_close(g_st.store);
		return 2;
	}
	int lfd = listen_at(sock_path);
	if (lfd < 0) {
		kvtd_metrics_stop(mhd);
		kvt_store_close(g_st.store);
		kvtd_events_stop(events);
		return 1;
	}
	fprintf(stderr, "kvtierd: serving %s%s%s\n", sock_path, metrics[0] ? ", metrics on " : "",
		metrics);
	for (;;) {
		struct pollfd p[2] = {{.fd = lfd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
		/* Tensor-parallel objects end on time even with no rank's connection left to
		 * notice (ranks that never came, all of them gone): this loop wakes for them. */
		uint64_t due = kvtd_tp_sweep(), now = kvt__now_ns();
		int ms = due == UINT64_MAX ? -1
			 : due <= now	  ? 0
					  : (int)KVT_MIN((due - now + 999999) / 1000000,
							 (uint64_t)INT32_MAX);
		if (poll(p, 2, ms) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (p[0].revents)
			accept_one(lfd);
	}
	/* Clean shutdown: no new clients, the current ones are cut off (their next call
	 * errors, then reconnects to a restarted daemon), then the store flushes and closes. */
	unlink(sock_path);
	close(lfd);
	atomic_store(&g_stopping, true);
	pthread_mutex_lock(&g_lock);
	for (struct conn *c = g_conns; c; c = c->next)
		if (c->sock >= 0)
			shutdown(c->sock, SHUT_RDWR);
	while (g_conns)
		pthread_cond_wait(&g_cond, &g_lock);
	pthread_mutex_unlock(&g_lock);
	kvtd_tp_cancel_all();
	kvtd_metrics_stop(mhd);
	int frc = kvt_flush_sync(g_st.store);
	kvt_store_close(g_st.store);
	kvtd_events_stop(events); /* after the close: its write-back's events are sent too */
	uint64_t kept = atomic_load(&g_kept_at_stop);
	if (kept)
		fprintf(stderr, "kvtierd: slots clients held at the stop, kept out of the pool "
				"until the close: %llu\n", (unsigned long long)kept);
	fprintf(stderr, "kvtierd: stopped%s\n", frc < 0 ? " (flush failed)" : "");
	return frc < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct kvt_config *cfg;
	if (kvt_config_create(&cfg) < 0)
		return 1;
	/* a run of its own: a client of an earlier one that reconnects starts a new count */
	if (getrandom(&g_instance, sizeof(g_instance), 0) != sizeof(g_instance))
		g_instance = (uint64_t)getpid() << 32 ^ kvt__now_ns();
	g_instance |= 1;
	int rc = run(cfg, argc, argv);
	kvt_config_destroy(cfg);
	return rc;
}
