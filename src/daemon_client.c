/*
 * daemon_client.c - a store that is a client of kvtierd (store.daemon=PATH; see
 * docs/DAEMON.md). Why a worker thread: the asynchronous API must never run a callback
 * inside the submitting call, and a submitting call must never block on the daemon, so
 * submissions are queued (bounded by store.max_inflight: -EAGAIN beyond) and one worker
 * sends them over the connection; results go through this client's own completion queue
 * and eventfd, delivered by kvt_poll. The *_sync calls (and the device layer's pins and TP
 * reservations) run on the caller's thread, after the removes submitted before them, or
 * after everything submitted before them for flush, remove and clear (see ran_cond).
 *
 * Payload crosses a memfd region shared with the daemon, not the socket. Every exchange
 * has a deadline (store.daemon_timeout_ms, as socket timeouts): a dead or restarting
 * daemon turns into errors (put, remove, flush, stats) or misses (get, lookup, prefetch),
 * and the next call reconnects; a call whose request could not leave because the
 * connection had died before it (the daemon restarted between two calls) reconnects and
 * sends it once more, so a restart costs no failed call.
 *
 * A daemon that does not answer (stopped, hung: an exchange or a connect ran past the
 * timeout) is marked down for a backoff (see DOWN_BACKOFF_MAX_MS): meanwhile every call,
 * queued or new, asynchronous or *_sync, fails at once with the error the timeout gave,
 * instead of each waiting out its own timeout in turn; after the backoff one call at a
 * time (the probe) tries the daemon again.
 *
 * What the daemon says at attach (c->info) is rewritten by every reconnect, under io_lock.
 * The accessors (tier count and names, namespace) answer from any thread without that
 * lock, so they never read it: the namespace is this client's own (the daemon attaches
 * only a client of its namespace), and the tier chain is an immutable copy per distinct
 * chain, published atomically and kept until close, so a name handed out stays valid and
 * unchanged however often the daemon restarts, with whatever tiers.
 */
#include "daemon_client.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "daemon_proto.h"
#include "format.h"
#include "protect.h"
#include "store_key.h"
#include "internal.h"

struct cop {
	struct cop *next;
	uint32_t op;
	struct kvt_key key, parent;
	bool has_parent;
	uint32_t n_tokens, layer_begin, layer_end;
	const void *src;
	void *dst;
	size_t len;
	const struct kvt_key *keys;
	/* a queued call's own copy of keys (submit), freed once it has run: kvt_lookup and
	 * kvt_prefetch return before the worker sends the keys, and a caller may reuse its
	 * array then, as in process (until 2026-12-06 the worker read the caller's array
	 * after the call had returned: a review's heap-use-after-free, daemon_async_keys) */
	struct kvt_key *keys_copy;
	size_t n;
	int8_t *tiers;
	uint64_t deadline_ns; /* prefetch: the daemon's deadline for it */
	uint64_t by_ns; /* a *_sync call's own deadline (kvt__now_ns; 0: none), see call_deadline */
	kvt_cb cb;
	void *arg;
	struct kvt_result res;
	uint64_t ticket; /* its place among the submissions (submit) */
};

/* The daemon's tier chain as an attach told it; never written once published. */
struct tier_names {
	struct tier_names *next; /* the client's list of every chain published */
	uint32_t n;
	char name[KVT_MAX_TIERS][KVTD_MAX_TIER_NAME];
};

struct kvt_client {
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct kvt_log log;
	int timeout_ms;
	uint8_t my_ns[KVT_NS_ID_BYTES];
	struct kvt_geometry my_geo;

	/* the connection: one exchange at a time, under io_lock */
	pthread_mutex_t io_lock;
	int sock; /* -1: disconnected; the next exchange reconnects */
	/* the last exchange failed before its request left: the connection was already dead
	 * (a restarted daemon), so the request can be sent again on a new one, see stale() */
	bool unsent;
	int memfd;
	uint8_t *shm;
	size_t shm_len;
	bool region_dirty; /* a daemon thread may still write the current region */
	/* this process is a fork() child of the one that opened the client (atfork_child):
	 * every call fails -ENOTCONN, close frees only memory */
	bool forked;
	struct kvt_log_limit fork_limit;
	/* KVTD_CAP_LOSS_SEEN: the daemon run attached to (0: none) and the loss count its
	 * flushes have told this client of; under io_lock */
	uint64_t instance;
	uint64_t loss_seen;
	uint64_t seq;
	uint64_t gen; /* connections made: TP claims belong to one */
	/* the deadline of the call running its exchanges now (kvt__now_ns; 0: none, only
	 * timeout_ms): an exchange that would end past it is cut (see call_wait) */
	uint64_t call_deadline;
	struct kvtd_info info; /* the last attach's; read under io_lock only */
	/* the tier chain the accessors read, lock-free (see the file comment): the last
	 * attach's, stored with release after it is filled; tier_sets (under io_lock) holds
	 * every one published, freed at close */
	_Atomic(struct tier_names *) tiers;
	struct tier_names *tier_sets;
	/* the daemon's DRAM pool, mapped read-only (NULL: not offered): DRAM hits are copied
	 * from the pinned slot straight into the caller's buffer (GET_PIN, UNPIN) */
	uint8_t *pool; /* writable only with info.pool_writable */
	size_t pool_len;
	/* TP gathers copying into slots of the pool now (tp_reserve until tp_written); while
	 * any are, a dropped connection does not unmap the pool under them: the mapping is
	 * replaced by anonymous memory (their late bytes land nowhere) and kept in retired
	 * until the client closes */
	uint64_t tp_writes;
	/* pins held (kvt__client_pin until kvt__client_unpin): a device load scatters from
	 * its slot outside io_lock, so a reconnect retires the pool instead of unmapping it
	 * (the copy then reads zeros instead of faulting, and the unpin reports the pin lost,
	 * which fails the load) */
	uint64_t pins_out;
	/* connections dropped by this side, counted before the socket closes: a pin taken on
	 * an earlier count may have been released by the daemon (kvt__client_pin_holds) */
	_Atomic uint64_t drops;
	/* every live client, for the fork handlers (atfork_child); under g_clients_mu */
	struct kvt_client *fork_next;
	bool listed;
	struct retired {
		struct retired *next;
		void *p;
		size_t len;
	} *retired;

	/* a daemon that stopped answering (see admit): under down_lock, taken after io_lock
	 * or alone, never the other way */
	pthread_mutex_t down_lock;
	int down_rc;         /* 0: up; else the error that put it down */
	uint64_t down_until; /* kvt__now_ns when the backoff ends */
	uint64_t backoff_ms; /* the current backoff; doubles with each failed probe */
	bool probing;        /* a call admitted after the backoff is trying the daemon */

	/* submissions, run by the worker */
	pthread_mutex_t q_lock;
	pthread_cond_t q_cond;
	struct cop *q_head, *q_tail;
	uint64_t queued, max_queued; /* queued + running + unpolled */
	bool stopping;
	pthread_t worker;
	/* A *_sync call runs on the caller's thread, not behind the queue: it first waits
	 * (wait_ran: until no exchange has finished for the call's timeout) until the newest
	 * remove submitted before it has had its exchange with the daemon, so that the
	 * remove's promise holds here as in process (kvtier.h: a get, lookup or prefetch
	 * issued after kvt_remove returned misses, and a put issued after it wins); flush,
	 * remove and clear wait for everything submitted before them. Tickets in submission
	 * order; the worker runs them FIFO, one exchange at a time, and the daemon answers a
	 * request once it is done. */
	uint64_t tickets;     /* the last ticket handed out (submit) */
	uint64_t ran;         /* the last ticket whose exchange is over (worker) */
	uint64_t last_remove; /* the ticket of the newest remove submitted */
	pthread_cond_t ran_cond;

	/* completions for kvt_poll */
	pthread_mutex_t cq_lock;
	struct cop *cq_head, *cq_tail;
	uint64_t cq_len; /* on cq_head */
	int efd;
};

bool kvt__client_wanted(const struct kvt_config *cfg)
{
	return cfg && kvt__cfg_str(cfg, "store.daemon")[0] != '\0';
}

/* ------------------------------------------------------------- connection */

/* Why a backoff: calls run one at a time over the one connection (the worker, io_lock),
 * so against a stopped or hung daemon each queued call would wait its own full
 * store.daemon_timeout_ms before failing: N calls, N timeouts (a 100-chunk prompt, a lookup
 * per chunk, minutes). One call that timed out proves the daemon is not answering: the
 * daemon is marked down, and until the backoff ends every call fails at once with that
 * call's error. The first backoff is one timeout (what the call that found it down just
 * waited); each probe that times out again doubles it, up to DOWN_BACKOFF_MAX_MS (or the
 * timeout, if longer): a probe holds the calls queued behind it for up to one timeout, so
 * a daemon hung for long costs at most one timeout per cap, and a daemon that comes back
 * is found within the cap. Any request's answer (or an instant failure: no daemon
 * listening, a dead connection - no waiting there) resets it; a reconnect's HELLO answer
 * does not (see exchange_fd). */
#define DOWN_BACKOFF_MAX_MS 30000u

static uint64_t backoff_cap_ms(const struct kvt_client *c)
{
	return KVT_MAX((uint64_t)DOWN_BACKOFF_MAX_MS, (uint64_t)c->timeout_ms);
}

/* What the daemon's last exchange or connect says: -ETIMEDOUT (it did not answer in time)
 * marks it down, anything else up. Under io_lock. */
static void note_io(struct kvt_client *c, int rc)
{
	uint64_t ms = 0;
	pthread_mutex_lock(&c->down_lock);
	if (rc == -ETIMEDOUT) {
		ms = c->down_rc ? KVT_MIN(c->backoff_ms * 2, backoff_cap_ms(c))
				: (uint64_t)c->timeout_ms;
		c->backoff_ms = ms;
		c->down_rc = rc;
		c->down_until = kvt__now_ns() + ms * 1000000u;
	} else if (c->down_rc) {
		c->down_rc = 0;
		c->backoff_ms = 0;
	}
	pthread_mutex_unlock(&c->down_lock);
	if (ms)
		KVT_WARN(&c->log, "kvtierd %s: not answering: calls fail at once for %llu ms, "
				  "then one tries it again", c->path, (unsigned long long)ms);
}

/* A call cut at its own deadline says nothing new about the daemon, with one exception:
 * while it is marked down, the cut call was the probe (nobody else may talk to it), and a
 * probe that got no answer must not leave the backoff over - every later call would probe
 * in turn and wait out its whole deadline. The backoff is armed again, not doubled (the
 * probe gave up before the daemon's timeout). */
static void note_cut(struct kvt_client *c)
{
	pthread_mutex_lock(&c->down_lock);
	if (c->down_rc)
		c->down_until = kvt__now_ns() + c->backoff_ms * 1000000u;
	pthread_mutex_unlock(&c->down_lock);
}

/* The error a call gets at once while the daemon is down and its backoff runs, else 0. */
static int backing_off(struct kvt_client *c)
{
	pthread_mutex_lock(&c->down_lock);
	int rc = c->down_rc && kvt__now_ns() < c->down_until ? c->down_rc : 0;
	pthread_mutex_unlock(&c->down_lock);
	return rc;
}

/* May a call talk to the daemon? 0: yes; if the daemon is down and its backoff has ended,
 * only one call at a time may (*probe set: the probe, until admit_end); else the error to
 * fail with at once. Called before io_lock (a call never queues for the lock behind a
 * probe or a timing-out exchange just to fail) and again under it (it may have gone down
 * meanwhile); the probe passes the second time. */
static int admit(struct kvt_client *c, bool *probe)
{
	if (*probe)
		return 0;
	int rc = 0;
	pthread_mutex_lock(&c->down_lock);
	if (c->down_rc) {
		if (c->probing || kvt__now_ns() < c->down_until)
			rc = c->down_rc;
		else
			c->probing = *probe = true;
	}
	pthread_mutex_unlock(&c->down_lock);
	return rc;
}

static void admit_end(struct kvt_client *c, bool probe)
{
	if (!probe)
		return;
	pthread_mutex_lock(&c->down_lock);
	c->probing = false;
	pthread_mutex_unlock(&c->down_lock);
}

static void retire_pool(struct kvt_client *c);
static void unmap_pool(struct kvt_client *c);

static void disconnect(struct kvt_client *c)
{
	/* The daemon cancels our unwritten TP claims when the socket closes and may give their
	 * slots to another client's put at once: gathers still running (on the device store's
	 * threads, outside io_lock) must stop writing into its pool first. The pool is swapped
	 * for anonymous memory before the close - once mmap returns no CPU can store into the
	 * old pages through this mapping - so no late byte lands after the daemon can reuse the
	 * slot (closing first left that window open). */
	/* And the pool is let go of whatever runs: the daemon may be gone (a restart), and a
	 * pool lives as long as a mapping of it, so a client holding on to the dead daemon's
	 * until its next attach made the node hold two pools while the new daemon set up its
	 * own - its huge pages refused (it falls back to 4 KiB pages), or twice the memory
	 * (until 2026-12-06, a review; daemon_restart_pool). A copy that may still run from
	 * it keeps reading or writing anonymous pages instead (retire_pool). */
	if ((c->tp_writes || c->pins_out) && c->pool)
		retire_pool(c);
	else
		unmap_pool(c);
	atomic_fetch_add(&c->drops, 1); /* before the close: see kvt__client_pin_holds */
	if (c->sock >= 0)
		close(c->sock);
	c->sock = -1;
	c->region_dirty = true; /* the next attach brings a new region (see new_region) */
}

/* Why a call's own deadline: the socket's timeouts are store.daemon_timeout_ms (5 s by
 * default), the bound on a daemon that stopped answering; a caller with less time (a vLLM
 * load of 0.3 s, kvt_rows_load in client mode) waited that long per chunk. Before each
 * send and each receive, wait for the socket until the call's deadline or timeout_ms
 * from now, whichever is first: -ETIME once the deadline has passed, -ETIMEDOUT at the
 * timeout (as the socket's own would say), 0 to go on (the socket is ready: the send or
 * receive does not wait). Why not the socket's timeouts alone: a signal interrupts a
 * receive under SO_RCVTIMEO with EINTR whatever SA_RESTART says, and each retry waited a
 * whole timeout again, so a thread signalled more often than that (a profiler, SIGCHLD)
 * waited on a stopped daemon without end (until 2026-12-06; integ.daemon_signals). */
static int call_wait(struct kvt_client *c, short ev)
{
	uint64_t limit = kvt__now_ns() + (uint64_t)c->timeout_ms * 1000000u;
	for (;;) {
		bool own = c->call_deadline && c->call_deadline < limit;
		uint64_t by = own ? c->call_deadline : limit, now = kvt__now_ns();
		if (now >= by)
			return own ? -ETIME : -ETIMEDOUT;
		uint64_t left_ms = KVT_MIN((by - now + 999999u) / 1000000u, (uint64_t)INT_MAX);
		struct pollfd p = {.fd = c->sock, .events = ev};
		int n = poll(&p, 1, (int)left_ms);
		if (n > 0)
			return 0; /* ready, or an error the send or receive reports */
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/* The most a request may ask the daemon to wait for its tier: the socket's timeout less
 * an eighth (at least 1 ms) for the request's and the answer's way and the daemon's
 * scheduling, so that a slow tier's -ETIME comes back before the receive times out. */
static uint64_t cut_budget_ns(const struct kvt_client *c)
{
	uint64_t ms = (uint64_t)c->timeout_ms;
	uint64_t margin = KVT_MAX(ms / 8u, (uint64_t)1);
	return (ms > margin ? ms - margin : 1) * 1000000u;
}

/* One request, one reply. On any transport or protocol failure the connection is dropped
 * (the next exchange reconnects) and -errno returned. An exchange cut at the call's
 * deadline (-ETIME) drops it too: the answer would arrive later on this connection, and a
 * daemon thread may still write the abandoned request's bytes into the region (a new
 * connection brings a new region, see new_region); the daemon releases what the
 * connection held (pins, reservations). It says nothing of the daemon's health, so it
 * neither marks the daemon down nor up (but see note_cut). */
static int exchange_fd(struct kvt_client *c, struct kvtd_req *req, struct kvtd_rep *rep, int fd,
		       int *rfd)
{
	req->magic = KVTD_MAGIC;
	req->seq = ++c->seq;
	/* The daemon is told what is left of the call's time, so that it stops waiting for
	 * the tier when we stop waiting for it (a duration: the two clocks need not agree).
	 * A call without a deadline of its own stops waiting at the socket's timeout: the
	 * daemon is given a little less (cut_budget_ns), so that its -ETIME answer (a slow
	 * tier) arrives before our timeout (a dead daemon, which marks it down) - a daemon
	 * that marks its cuts, so that we drop the connection it closes (KVTD_CAP_CUT_MARK).
	 * Lookups, removes and flushes too (since 2026-12-05; a daemon from before ignores
	 * it): a slow tier behind one of them timed us out and took the daemon for dead. A
	 * clear too: it answers when half of it has passed, and is asked again
	 * (kvt__client_clear_sync). A prefetch carries its own deadline instead
	 * (run_lookup_like). */
	bool budget = req->op == KVTD_GET || req->op == KVTD_PUT || req->op == KVTD_GET_PIN ||
		      req->op == KVTD_LOOKUP || req->op == KVTD_REMOVE || req->op == KVTD_FLUSH ||
		      req->op == KVTD_CLEAR;
	if (budget) {
		uint64_t now = kvt__now_ns();
		uint64_t own = c->info.caps & KVTD_CAP_CUT_MARK ? cut_budget_ns(c) : 0; /* 0: none */
		uint64_t left = !c->call_deadline	     ? 0
				: c->call_deadline > now ? c->call_deadline - now
							 : 1;
		req->deadline_ns = !left ? own : own ? KVT_MIN(left, own) : left;
	}
	int rc = call_wait(c, POLLOUT);
	if (rc == 0) {
		rc = kvtd_send(c->sock, req, sizeof(*req), fd);
		c->unsent = rc == -EPIPE || rc == -ECONNRESET || rc == -ENOTCONN;
	} else {
		c->unsent = false;
	}
	if (rc == 0)
		rc = call_wait(c, POLLIN);
	if (rc == 0) {
		long r = kvtd_recv(c->sock, rep, sizeof(*rep), rfd);
		if (r == 0)
			rc = -ECONNRESET;
		else if (r < 0)
			rc = (int)r;
		else if (r != sizeof(*rep) || rep->magic != KVTD_MAGIC || rep->seq != req->seq ||
			 rep->op != req->op)
			rc = -EPROTO;
	}
	/* A HELLO answered does not say the daemon is back: one stuck past its handshake
	 * (its workers hung) answers HELLO and then not the request, and counting the HELLO
	 * would reset the backoff every probe instead of doubling it. The request's answer
	 * does. */
	if (rc == -ETIME) {
		note_cut(c);
		disconnect(c);
		return rc;
	}
	if (rc < 0 || req->op != KVTD_HELLO)
		note_io(c, rc);
	if (rc < 0) {
		KVT_WARN(&c->log, "kvtierd %s: %s", c->path, kvt_strerror(rc));
		disconnect(c);
	} else if (budget && rep->slot == KVTD_SLOT_CUT) {
		/* the daemon cut the call at its budget and closes the connection after this
		 * answer (its thread may still write the region): ours goes too, so the next
		 * call starts on a new one instead of finding this one dead */
		disconnect(c);
	}
	return rc;
}

static int exchange(struct kvt_client *c, struct kvtd_req *req, struct kvtd_rep *rep, int fd)
{
	return exchange_fd(c, req, rep, fd, NULL);
}

static void unmap_pool(struct kvt_client *c)
{
	if (c->pool)
		munmap(c->pool, c->pool_len);
	c->pool = NULL;
	c->pool_len = 0;
}

/* The pools retired by reconnects, unmapped once no copy can still read or write them:
 * none is in flight (no pin held, no TP gather running). Under io_lock. Without this each
 * reconnect during a pin kept a pool-sized mapping until close. */
static void free_retired(struct kvt_client *c)
{
	if (c->pins_out || c->tp_writes)
		return;
	while (c->retired) {
		struct retired *r = c->retired;
		c->retired = r->next;
		munmap(r->p, r->len);
		kvt__free(r);
	}
}

static void retire_pool(struct kvt_client *c)
{
	struct retired *r = kvt__malloc(sizeof(*r));
	/* if the swap fails the old pool stays mapped there (rather than fault a copy): the
	 * range is unmapped later either way, so it is remembered either way (until
	 * 2026-12-06 a failed swap forgot it: a pool-sized mapping leaked) */
	(void)mmap(c->pool, c->pool_len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (r) {
		r->p = c->pool;
		r->len = c->pool_len;
		r->next = c->retired;
		c->retired = r;
	}
	c->pool = NULL;
	c->pool_len = 0;
}

/* A fresh shared region (sealed at its size: the daemon maps it and must never fault on a
 * shrunk file), replacing the current one. After a failed exchange the old region is
 * never reused: a daemon thread still finishing the abandoned request (past our deadline)
 * may yet write into it, and must not land in the next request's bytes. */
static int new_region(struct kvt_client *c)
{
	int fd = memfd_create("kvtier-client", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)c->shm_len) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	void *p = mmap(NULL, c->shm_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int e = -errno;
		close(fd);
		return e;
	}
	if (c->shm)
		munmap(c->shm, c->shm_len);
	if (c->memfd >= 0)
		close(c->memfd);
	c->shm = p;
	c->memfd = fd;
	c->region_dirty = false;
	return 0;
}

/* Publish the tier chain c->info names for the accessors: the one published already if
 * it is the same, else a fresh copy (the old ones stay: a caller may hold their names).
 * Under io_lock. */
static int publish_tiers(struct kvt_client *c)
{
	struct tier_names *t;
	for (t = c->tier_sets; t; t = t->next) {
		bool same = t->n == c->info.n_tiers;
		for (uint32_t i = 0; same && i < t->n; i++)
			same = !strcmp(t->name[i], c->info.tier[i]);
		if (same)
			break;
	}
	if (!t) {
		if (!(t = kvt__calloc(1, sizeof(*t))))
			return -ENOMEM;
		t->n = c->info.n_tiers;
		for (uint32_t i = 0; i < t->n; i++)
			memcpy(t->name[i], c->info.tier[i], KVTD_MAX_TIER_NAME);
		t->next = c->tier_sets;
		c->tier_sets = t;
	}
	atomic_store_explicit(&c->tiers, t, memory_order_release);
	return 0;
}

static void free_tiers(struct kvt_client *c)
{
	while (c->tier_sets) {
		struct tier_names *t = c->tier_sets;
		c->tier_sets = t->next;
		kvt__free(t);
	}
}

static int attach(struct kvt_client *c)
{
	if (c->region_dirty) {
		int rc = new_region(c);
		if (rc < 0)
			return rc;
	}
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	struct timeval tv = {.tv_sec = c->timeout_ms / 1000,
			     .tv_usec = (c->timeout_ms % 1000) * 1000};
	setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	memcpy(a.sun_path, c->path, sizeof(a.sun_path));
	/* A connect waits for room in the daemon's listen queue, up to SO_SNDTIMEO: a stopped
	 * daemon's queue fills with the connections of cut calls, and each further connect
	 * then waited the whole timeout. A call's nearer deadline bounds it instead. */
	bool cut = false;
	if (c->call_deadline) {
		uint64_t now = kvt__now_ns();
		uint64_t left_us = c->call_deadline > now ? (c->call_deadline - now) / 1000u : 0;
		if (left_us < (uint64_t)c->timeout_ms * 1000u) {
			struct timeval dl = {.tv_sec = (time_t)(left_us / 1000000u),
					     .tv_usec = (suseconds_t)(left_us % 1000000u)};
			if (!left_us)
				dl.tv_usec = 1; /* 0 would mean no timeout at all */
			setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &dl, sizeof(dl));
			cut = true;
		}
	}
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = errno == EAGAIN ? (cut ? -ETIME : -ETIMEDOUT) : -errno;
		close(s);
		if (e == -ETIME)
			note_cut(c);
		else
			note_io(c, e);
		return e;
	}
	if (cut)
		setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	c->sock = s;
	c->gen++;
	struct kvtd_req req = {.op = KVTD_HELLO, .version = KVTD_VERSION,
			       .off = c->instance, .n = c->loss_seen};
	memcpy(req.ns_id, c->my_ns, sizeof(req.ns_id));
	struct kvtd_rep rep;
	int pfd = -1;
	int rc = exchange_fd(c, &req, &rep, c->memfd, &pfd);
	if (rc < 0) {
		if (pfd >= 0)
			close(pfd);
		return rc;
	}
	if (rep.res.status < 0) {
		if (pfd >= 0)
			close(pfd);
		disconnect(c);
		return rep.res.status;
	}
	memcpy(&c->info, c->shm, sizeof(c->info));
	/* Checked at every attach, not only the first: a restarted daemon may say otherwise,
	 * and kvt__client_tier_name indexes tier[] by what it says. Its namespace is ours (it
	 * refuses a HELLO of another): kvt__client_ns_id answers my_ns. */
	if (c->info.n_tiers > KVT_MAX_TIERS ||
	    memcmp(c->info.ns_id, c->my_ns, sizeof(c->my_ns))) {
		if (pfd >= 0)
			close(pfd);
		disconnect(c);
		return -EPROTO;
	}
	for (uint32_t i = 0; i < c->info.n_tiers; i++)
		c->info.tier[i][KVTD_MAX_TIER_NAME - 1] = '\0';
	/* the loss count this connection's flushes report from, kept across reconnects
	 * (KVTD_CAP_LOSS_SEEN: chunks lost while reconnecting are reported to the next flush) */
	c->instance = c->info.caps & KVTD_CAP_LOSS_SEEN ? c->info.instance : 0;
	c->loss_seen = c->instance ? c->info.loss_seen : 0;
	if ((rc = publish_tiers(c)) < 0) {
		if (pfd >= 0)
			close(pfd);
		disconnect(c);
		return rc;
	}
	/* A pool from an earlier daemon (a restart) is stale: this one's replaces it. A copy
	 * that may still run from the old one keeps its pages (retired until close). */
	if ((c->tp_writes || c->pins_out) && c->pool)
		retire_pool(c);
	else
		unmap_pool(c);
	if (pfd >= 0 && c->info.pool_bytes) {
		int prot = PROT_READ | (c->info.pool_writable ? PROT_WRITE : 0);
		void *p = mmap(NULL, c->info.pool_bytes, prot, MAP_SHARED, pfd, 0);
		if (p != MAP_FAILED) {
			/* Not inherited by a fork: the daemon tells when this process is gone (the
			 * end of a quarantine), and a child it cannot see must not write there. */
			madvise(p, c->info.pool_bytes, MADV_DONTFORK);
			c->pool = p;
			c->pool_len = c->info.pool_bytes;
		} else {
			KVT_WARN(&c->log, "kvtierd %s: cannot map its DRAM pool (%s): gets are "
					  "copied through the region", c->path, strerror(errno));
		}
	}
	if (pfd >= 0)
		close(pfd);
	return 0;
}

/* Connected, or not while a backoff runs (a call that has just timed out does not wait
 * again on a reconnect: at most one timeout per call). */
static int forked_refused(struct kvt_client *c)
{
	kvt__logf_limited(&c->log, &c->fork_limit, KVT_LOG_ERROR,
			  "kvtierd %s: a store opened before fork() cannot be used in the child "
			  "process: open one there", c->path);
	return -ENOTCONN;
}

static int ensure(struct kvt_client *c)
{
	if (c->forked)
		return forked_refused(c);
	if (c->sock >= 0)
		return 0;
	int rc = backing_off(c);
	return rc < 0 ? rc : attach(c);
}

/* After a failed exchange (its error in *rc): true if its request never reached a daemon
 * because the connection had died under it (the daemon restarted since the last call) and
 * a new connection is up. Sending it again is then safe for every request, removals
 * included: the daemon never saw the first one. Clears the mark, so one call retries once.
 * A reconnect cut at the call's deadline replaces *rc (the call ends at its deadline, not
 * with the dead connection's error). */
static bool stale(struct kvt_client *c, int *rc)
{
	if (!c->unsent)
		return false;
	c->unsent = false;
	int e = ensure(c);
	if (e == -ETIME)
		*rc = e;
	return e == 0;
}

/* -------------------------------------------------------------- operations */

/* A transport failure reads as a miss for the calls that look things up; a get's and a
 * lookup's miss says why (kvt_result.cause): the transport's error, the daemon being their
 * only tier. */
static void failed(struct cop *o, int rc)
{
	/* (no socket file is -ENOENT from connect, which as a cause would read "absent") */
	int cause = rc == -ENOENT ? -ENOTCONN : rc;
	o->res.status = rc;
	if (o->op == KVTD_GET) {
		o->res.status = -ENOENT;
		o->res.cause = cause;
	} else if (o->op == KVTD_PREFETCH && o->by_ns && rc == -ETIME) {
		o->res.status = -ETIME; /* kvt_prefetch_sync's deadline: as in process */
	} else if (o->op == KVTD_LOOKUP || o->op == KVTD_PREFETCH) {
		o->res.status = 0;
		if (o->op == KVTD_LOOKUP)
			o->res.cause = cause;
	}
}

/* A lookup or prefetch, in batches of what the region holds. The keys are copied into the
 * region after the connection is made: a reconnect brings a new region (its HELLO answer
 * at offset 0), and keys copied before it went out as the answer's bytes - until
 * 2026-12-05 the first lookup after every cut or timeout found nothing
 * (integ.daemon_lookup_reconnect). */
static void run_lookup_like(struct kvt_client *c, struct cop *o)
{
	int64_t total = 0;
	size_t done = 0;
	if (o->tiers)
		memset(o->tiers, KVT_TIER_NONE, o->n);
	while (done < o->n) {
		struct kvtd_rep rep;
		struct kvtd_req req = {.op = o->op, .off = 0, .deadline_ns = o->deadline_ns};
		size_t m = 0;
		int rc = ensure(c);
		/* A prefetch ends before our timeout would take the daemon for dead: its
		 * deadline is at most the cut budget away (the fills started by then land; the
		 * rest are dropped - a prefetch is a hint, and their gets read them). */
		if (rc == 0 && o->op == KVTD_PREFETCH && (c->info.caps & KVTD_CAP_CUT_MARK)) {
			uint64_t by = kvt__now_ns() + cut_budget_ns(c);
			req.deadline_ns = req.deadline_ns ? KVT_MIN(req.deadline_ns, by) : by;
		}
		/* sent as the time left where the daemon reads it so (its clock need not be
		 * ours); a deadline already past is 1 ns left, not none */
		if (rc == 0 && o->op == KVTD_PREFETCH && req.deadline_ns &&
		    (c->info.caps & KVTD_CAP_PF_RELATIVE)) {
			uint64_t now = kvt__now_ns();
			req.deadline_ns = req.deadline_ns > now ? req.deadline_ns - now : 1;
			req.flags = KVTD_PF_RELATIVE;
		}
		for (int tries = 0; rc == 0; tries++) {
			m = KVT_MIN(o->n - done, c->shm_len / (KVT_KEY_BYTES + 1));
			if (!m) {
				rc = -EPROTO; /* a region too small for one key: not a daemon of ours */
				break;
			}
			memcpy(c->shm, o->keys + done, m * KVT_KEY_BYTES);
			req.len = m * (KVT_KEY_BYTES + 1);
			req.n = m;
			rc = exchange(c, &req, &rep, -1);
			/* the connection had died under it: a new one (a new region) is up, and
			 * the keys are copied into it again */
			if (rc == 0 || tries || !stale(c, &rc))
				break;
			rc = 0;
		}
		/* kvt_prefetch_sync past its own deadline (o->by_ns): -ETIME, as in process */
		bool sync_late = o->op == KVTD_PREFETCH && o->by_ns &&
				 (rc == -ETIME || (rc == 0 && rep.res.status == -ETIME));
		if (rc < 0) {
			failed(o, rc);
			o->res.status = sync_late ? -ETIME : (int)total;
			return;
		}
		if (sync_late) {
			o->res.status = -ETIME;
			return;
		}
		/* a lookup cut at its budget: the rest is not known, as when a tier cannot say;
		 * a prefetch at its capped deadline, or refused (-EBUSY: too many of them left
		 * running in the daemon): what it had, as for its other failures (failed():
		 * prefetch failures are misses, never errors) */
		if ((rep.res.status == -ETIME && (o->op == KVTD_LOOKUP || o->op == KVTD_PREFETCH)) ||
		    (rep.res.status == -EBUSY && o->op == KVTD_PREFETCH)) {
			o->res.status = (int)KVT_MIN(total, (int64_t)INT32_MAX);
			if (o->op == KVTD_LOOKUP)
				o->res.cause = -ETIME;
			return;
		}
		if (rep.res.status < 0) {
			o->res.status = done ? (int)total : rep.res.status;
			if (done && o->op == KVTD_LOOKUP) /* the rest is not known absent */
				o->res.cause = rep.res.status;
			return;
		}
		int got = KVT_MIN(rep.res.status, (int)m);
		if (o->op == KVTD_LOOKUP && o->tiers)
			memcpy(o->tiers + done, c->shm + m * KVT_KEY_BYTES, (size_t)got);
		total += got;
		done += m;
		if ((size_t)got < m) {
			if (o->op == KVTD_LOOKUP) /* the daemon's: one of its tiers could not say */
				o->res.cause = rep.res.cause;
			break;
		}
	}
	o->res.status = (int)KVT_MIN(total, (int64_t)INT32_MAX);
}

/* A get through the shared pool: the daemon pins the slot (promoting the chunk into DRAM
 * if needed), the layers are copied from it into the caller's buffer here, then the pin is
 * given back. 0 when o->res holds the answer; -1 to fall back to a get through the
 * region (the daemon could not pin). */
static int get_pinned(struct kvt_client *c, struct cop *o, const struct kvtd_req *base)
{
	struct kvtd_req req = *base;
	req.op = KVTD_GET_PIN;
	struct kvtd_rep rep;
	int rc = exchange(c, &req, &rep, -1);
	if (rc < 0 && c->unsent)
		return -1; /* the connection was dead already: run_op reconnects and retries */
	if (rc < 0) {
		failed(o, rc);
		return 0;
	}
	if (rep.res.status == -ENOENT) {
		o->res = rep.res;
		return 0;
	}
	/* Cut at the call's budget, or -ETIME (the promotion found no slot before it): its
	 * time is up, a second try through the region would wait as long again (and the
	 * daemon counted the get already). Until 2026-12-05 an unmarked -ETIME was retried. */
	if (rep.slot == KVTD_SLOT_CUT || rep.res.status == -ETIME) {
		failed(o, -ETIME);
		return 0;
	}
	/* Could not pin (-ENOTSUP, -EBUSY, no slot for the promotion, its tier missed a
	 * deadline): a get through the region takes the daemon's whole read path (the next
	 * tier, a bounce buffer). */
	if (rep.res.status < 0)
		return -1;
	int64_t n = -EPROTO;
	struct kvt_header h;
	if (rep.slot_off <= c->pool_len && rep.res.bytes >= KVT_HEADER_BYTES &&
	    rep.res.bytes <= c->pool_len - rep.slot_off) {
		const uint8_t *obj = c->pool + rep.slot_off;
		struct kvt_key sk;
		kvt__storage_key(c->my_ns, &o->key, &sk);
		struct kvt_expect exp = {.geometry = &c->my_geo, .ns_id = c->my_ns, .key = &sk,
					 .max_object_bytes = rep.res.bytes};
		n = kvt__header_decode(obj, &h, &exp);
		if (n == 0)
			n = kvt__object_read_layers(&h, obj, o->layer_begin,
						    o->layer_end ? o->layer_end : h.geometry.layers,
						    o->dst, o->len, NULL);
	}
	/* The pin is a lease (daemon.lease_ms): only an UNPIN the daemon accepts proves the
	 * slot stayed pinned through the copy. Refused (-ETIMEDOUT: the lease ran out while
	 * this process was stuck, say stopped) or unanswered (the connection dropped, and its
	 * pins with it, at some moment), the slot may have been reused under the copy: the
	 * bytes are thrown away and the get is retried through the region (the daemon's own
	 * read path), or misses. */
	struct kvtd_req un = {.op = KVTD_UNPIN, .n = (uint64_t)(uint32_t)rep.slot,
			      .lease = rep.lease};
	struct kvtd_rep urep;
	rc = exchange(c, &un, &urep, -1);
	if (rc < 0) {
		failed(o, rc);
		return 0;
	}
	if (urep.res.status < 0) {
		KVT_WARN(&c->log, "kvtierd %s: %s: the bytes copied from its slot are discarded, the "
				  "get is retried through the region", c->path,
			 urep.res.status == -ETIMEDOUT ? "the pin's lease ran out before the copy "
							 "finished"
						       : kvt_strerror(urep.res.status));
		return -1;
	}
	if (n < 0) {
		o->res = (struct kvt_result){.status = (int)n, .tier = KVT_TIER_NONE};
		return 0;
	}
	o->res = (struct kvt_result){.status = 0, .tier = rep.res.tier, .n_tokens = h.n_tokens,
				     .bytes = (uint64_t)n};
	return 0;
}

/* A put encoded by the client straight into a DRAM slot the daemon reserved, then
 * committed (the daemon checks the header and publishes it). 0 when o->res holds the
 * answer; -1 to fall back to a copy through the region (nothing reserved: no room now,
 * shared writes off). */
static int put_reserved(struct kvt_client *c, struct cop *o, const struct kvtd_req *base)
{
	struct kvtd_req req = *base;
	req.op = KVTD_PUT_RESERVE;
	struct kvtd_rep rep;
	int rc = exchange(c, &req, &rep, -1);
	if (rc < 0 && c->unsent)
		return -1; /* the connection was dead already: run_op reconnects and retries */
	if (rc < 0) {
		failed(o, rc);
		return 0;
	}
	if (rep.res.status == 1) { /* stored already: a put is idempotent */
		o->res = (struct kvt_result){.status = 0, .tier = KVT_TIER_NONE,
					     .n_tokens = o->n_tokens, .bytes = o->len};
		return 0;
	}
	if (rep.res.status < 0)
		return -1;
	int erc = -EPROTO;
	if (rep.slot_off <= c->pool_len && rep.res.bytes <= c->pool_len - rep.slot_off) {
		struct kvt_key sk;
		kvt__storage_key(c->my_ns, &o->key, &sk);
		erc = kvt__object_encode(c->pool + rep.slot_off, rep.res.bytes, &c->my_geo,
					 c->my_ns, &sk, o->n_tokens, o->src, o->len);
	}
	/* committed even if encoding failed: the daemon's check refuses it (-EBADMSG) and
	 * gives the slot back */
	struct kvtd_req cm = {.op = KVTD_PUT_COMMIT, .n = (uint64_t)(uint32_t)rep.slot,
			      .lease = rep.lease};
	struct kvtd_rep crep;
	rc = exchange(c, &cm, &crep, -1);
	if (rc < 0) {
		failed(o, rc);
		return 0;
	}
	o->res = crep.res;
	if (erc < 0)
		o->res.status = erc;
	/* -ETIMEDOUT: the reservation's lease ran out before the commit (the daemon cancelled
	 * it, quarantined its slot and refused the commit): the put failed and says so;
	 * nothing was published. */
	if (crep.res.status == -ETIMEDOUT)
		KVT_WARN(&c->log, "kvtierd %s: put reservation lease ran out before the commit: "
				  "not stored", c->path);
	return 0;
}

/* One operation, under io_lock. */
static void run_op_locked(struct kvt_client *c, struct cop *o)
{
	if (o->op == KVTD_LOOKUP || o->op == KVTD_PREFETCH) {
		run_lookup_like(c, o);
		return;
	}
	int rc = ensure(c);
	if (rc < 0) {
		failed(o, rc);
		return;
	}
	struct kvtd_req req = {.op = o->op, .key = o->key, .parent = o->parent,
			       .has_parent = o->has_parent, .n_tokens = o->n_tokens,
			       .layer_begin = o->layer_begin, .layer_end = o->layer_end};
	if (o->op == KVTD_PUT && c->pool && c->info.pool_writable &&
	    put_reserved(c, o, &req) == 0)
		return;
	if (o->op == KVTD_GET && c->pool && get_pinned(c, o, &req) == 0)
		return;
	c->unsent = false;
	struct kvtd_rep rep;
	for (int tries = 0;; tries++) {
		/* get_pinned or put_reserved, or the first try below, lost the connection */
		if (c->sock < 0 && (rc = ensure(c)) < 0)
			break;
		if (o->op == KVTD_PUT) {
			memcpy(c->shm, o->src, o->len);
			req.len = o->len;
		} else if (o->op == KVTD_GET) {
			req.len = KVT_MIN(o->len, c->shm_len);
		} else if (o->op == KVTD_STATS) {
			req.len = sizeof(struct kvt_stats);
			memset(c->shm, 0, req.len); /* a daemon older than the last fields: 0 */
		} else if (o->op == KVTD_STATUS) {
			req.len = sizeof(struct kvtd_status);
			memset(c->shm, 0, req.len); /* a daemon older than the last fields: 0 */
		}
		rc = exchange(c, &req, &rep, -1);
		if (rc == 0 || tries || !stale(c, &rc))
			break;
	}
	if (rc == 0 && (o->op == KVTD_GET || o->op == KVTD_PUT) && rep.slot == KVTD_SLOT_CUT)
		rc = -ETIME; /* cut at its budget: as a cut on our side reads */
	/* a get the daemon gave up on unmarked (its store at the in-flight bound until the
	 * deadline: RETRY_BY) is a miss whose cause is -ETIME, as header and get_pinned say -
	 * until 2026-12-06 it reached the caller as status -ETIME */
	if (rc == 0 && o->op == KVTD_GET && rep.res.status == -ETIME)
		rc = -ETIME;
	if (rc < 0) {
		failed(o, rc);
	} else {
		o->res = rep.res;
		if (o->op == KVTD_FLUSH && c->instance)
			c->loss_seen = rep.slot_off;
		if (o->op == KVTD_GET && rep.res.status >= 0) {
			if (rep.res.bytes > req.len)
				o->res.status = -EPROTO;
			else
				memcpy(o->dst, c->shm, rep.res.bytes);
		} else if ((o->op == KVTD_STATS || o->op == KVTD_STATUS) && rep.res.status >= 0) {
			memcpy(o->dst, c->shm, req.len);
		}
	}
}

/* io_lock, waited for until by (kvt__now_ns; 0: without a bound): another call's exchange
 * may hold it for up to store.daemon_timeout_ms. 0, or -ETIME. (pthread_mutex_timedlock
 * counts in CLOCK_REALTIME: the deadline is carried over from the monotonic clock, so a
 * step of the wall clock during the wait moves it. pthread_mutex_clocklock would not, but
 * the thread sanitizers this project runs do not all see it as a lock.) */
static int lock_io_by(struct kvt_client *c, uint64_t by)
{
	if (!by) {
		pthread_mutex_lock(&c->io_lock);
		return 0;
	}
	uint64_t now = kvt__now_ns();
	if (now >= by)
		return -ETIME;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t ns = (uint64_t)ts.tv_nsec + (by - now);
	ts.tv_sec += (time_t)(ns / 1000000000u);
	ts.tv_nsec = (long)(ns % 1000000000u);
	return pthread_mutex_timedlock(&c->io_lock, &ts) == 0 ? 0 : -ETIME;
}

/* One operation, on the worker or (the *_sync calls) the caller's thread. While the daemon
 * is down it completes at once as the timeout that put it down did (failed: a miss for
 * get, lookup and prefetch, the error for the others). With o->by_ns it ends by then: the
 * wait for io_lock and every exchange are cut there (-ETIME; a get misses with it as the
 * cause). */
static void run_op(struct kvt_client *c, struct cop *o)
{
	o->res = (struct kvt_result){.status = 0, .tier = KVT_TIER_NONE};
	bool probe = false;
	/* already past its deadline: fail without touching the connection (a cut would drop
	 * it, healthy as it is) */
	int rc = o->by_ns && kvt__now_ns() >= o->by_ns ? -ETIME : admit(c, &probe);
	if (rc == 0 && (rc = lock_io_by(c, o->by_ns)) == 0) {
		if ((rc = admit(c, &probe)) == 0) {
			c->call_deadline = o->by_ns;
			run_op_locked(c, o);
			c->call_deadline = 0;
		}
		pthread_mutex_unlock(&c->io_lock);
	}
	admit_end(c, probe);
	if (rc < 0) {
		if (o->op == KVTD_LOOKUP && o->tiers)
			memset(o->tiers, KVT_TIER_NONE, o->n);
		failed(o, rc);
	}
}

/* A finished operation onto the completion queue; the eventfd turns readable, and
 * kvt__client_poll runs its callback on the caller's thread. */
static void cq_push(struct kvt_client *c, struct cop *o)
{
	o->next = NULL;
	pthread_mutex_lock(&c->cq_lock);
	if (c->cq_tail)
		c->cq_tail->next = o;
	else
		c->cq_head = o;
	c->cq_tail = o;
	c->cq_len++;
	pthread_mutex_unlock(&c->cq_lock);
	uint64_t one = 1;
	ssize_t w = write(c->efd, &one, sizeof(one));
	(void)w;
}

/* An idle client notices a daemon that went away (its end of the socket hung up) and drops
 * the connection - and with it the dead daemon's DRAM pool (disconnect) - without waiting
 * for its next call: a restarted daemon sets up its own pool first, and a client that
 * stayed idle held the old one as long as it stayed idle (until 2026-12-06, a review;
 * daemon_restart_pool 2). Only when no call holds the connection (io_lock free). */
static void idle_check(struct kvt_client *c)
{
	if (pthread_mutex_trylock(&c->io_lock))
		return;
	if (c->sock >= 0) {
		struct pollfd p = {.fd = c->sock, .events = POLLRDHUP};
		if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)))
			disconnect(c);
	}
	pthread_mutex_unlock(&c->io_lock);
}

static void *worker_main(void *arg)
{
	struct kvt_client *c = arg;
	for (;;) {
		pthread_mutex_lock(&c->q_lock);
		while (!c->q_head && !c->stopping) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += 1;
			if (pthread_cond_timedwait(&c->q_cond, &c->q_lock, &ts) == ETIMEDOUT &&
			    !c->q_head && !c->stopping) {
				pthread_mutex_unlock(&c->q_lock);
				idle_check(c);
				pthread_mutex_lock(&c->q_lock);
			}
		}
		struct cop *o = c->q_head;
		if (!o) {
			pthread_mutex_unlock(&c->q_lock);
			return NULL;
		}
		c->q_head = o->next;
		if (!c->q_head)
			c->q_tail = NULL;
		pthread_mutex_unlock(&c->q_lock);
		run_op(c, o);
		kvt__free(o->keys_copy);
		o->keys_copy = NULL;
		o->keys = NULL;
		pthread_mutex_lock(&c->q_lock);
		c->ran = o->ticket;
		pthread_cond_broadcast(&c->ran_cond);
		pthread_mutex_unlock(&c->q_lock);
		o->next = NULL;
		cq_push(c, o);
	}
}

static int submit(struct kvt_client *c, struct cop *o)
{
	if (c->forked) /* no worker thread in a child: queued, it would never run */
		return forked_refused(c);
	pthread_mutex_lock(&c->q_lock);
	if (c->queued >= c->max_queued) {
		pthread_mutex_unlock(&c->q_lock);
		return -EAGAIN;
	}
	struct cop *n = kvt__malloc(sizeof(*n));
	struct kvt_key *keys = o->keys && o->n ? kvt__malloc(o->n * sizeof(*keys)) : NULL;
	if (!n || (o->keys && o->n && !keys)) {
		pthread_mutex_unlock(&c->q_lock);
		kvt__free(n);
		kvt__free(keys);
		return -ENOMEM;
	}
	*n = *o;
	if (keys) {
		memcpy(keys, o->keys, o->n * sizeof(*keys));
		n->keys = n->keys_copy = keys;
	}
	n->next = NULL;
	n->ticket = ++c->tickets;
	if (n->op == KVTD_REMOVE)
		c->last_remove = n->ticket;
	c->queued++;
	if (c->q_tail)
		c->q_tail->next = n;
	else
		c->q_head = n;
	c->q_tail = n;
	pthread_cond_signal(&c->q_cond);
	pthread_mutex_unlock(&c->q_lock);
	return 0;
}

int kvt__client_fd(const struct kvt_client *c)
{
	return c->efd;
}

int kvt__client_poll(struct kvt_client *c, int timeout_ms)
{
	pthread_mutex_lock(&c->cq_lock);
	bool empty = !c->cq_head;
	pthread_mutex_unlock(&c->cq_lock);
	if (empty && timeout_ms != 0) {
		struct pollfd p = {.fd = c->efd, .events = POLLIN};
		if (poll(&p, 1, timeout_ms) < 0)
			return -errno;
	}
	uint64_t v;
	ssize_t rd = read(c->efd, &v, sizeof(v));
	(void)rd;
	/* What is queued now, one at a time (as the engine's kvt__e_poll): a kvt_poll nested
	 * in a callback can run a sibling queued with its own. */
	pthread_mutex_lock(&c->cq_lock);
	uint64_t queued = c->cq_len;
	int n = 0;
	while (queued-- > 0 && c->cq_head) {
		struct cop *o = c->cq_head;
		c->cq_head = o->next;
		if (!c->cq_head)
			c->cq_tail = NULL;
		c->cq_len--;
		pthread_mutex_unlock(&c->cq_lock);
		pthread_mutex_lock(&c->q_lock);
		c->queued--;
		pthread_mutex_unlock(&c->q_lock);
		o->cb(o->arg, &o->res);
		kvt__free(o);
		n++;
		pthread_mutex_lock(&c->cq_lock);
	}
	pthread_mutex_unlock(&c->cq_lock);
	return n;
}

/* What a *_sync call waits for before its own exchange (see ran_cond). */
enum sync_order {
	SYNC_NOW,     /* nothing: stats, status */
	SYNC_REMOVES, /* the removes submitted before it: get, lookup, prefetch, put, device ops */
	SYNC_ALL,     /* everything submitted before it: flush ("everything submitted before
		       * it"), remove and clear (a put submitted before them is removed too) */
};

/* Wait until the submissions order asks for have had their exchange. The wait ends with
 * -ETIMEDOUT only when no exchange finished for store.daemon_timeout_ms (a worker stuck on
 * a daemon that does not answer): a long queue that a healthy daemon works through is
 * waited out, one exchange at a time; or with -ETIME at by (kvt__now_ns; 0: none), the
 * call's own deadline. */
static int wait_ran(struct kvt_client *c, enum sync_order order, uint64_t by)
{
	if (order == SYNC_NOW)
		return 0;
	pthread_mutex_lock(&c->q_lock);
	uint64_t target = order == SYNC_ALL ? c->tickets : c->last_remove;
	int rc = 0;
	while (c->ran < target && rc == 0) {
		uint64_t seen = c->ran;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t ms = (uint64_t)c->timeout_ms;
		uint64_t now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
		bool cut = by && by < now + ms * 1000000u; /* the call's deadline comes first */
		uint64_t until = cut ? by : now + ms * 1000000u;
		ts.tv_sec = (time_t)(until / 1000000000u);
		ts.tv_nsec = (long)(until % 1000000000u);
		while (c->ran == seen && c->ran < target && rc == 0)
			rc = -pthread_cond_timedwait(&c->ran_cond, &c->q_lock, &ts);
		if (rc == -ETIMEDOUT && cut)
			rc = -ETIME;
		else if (rc == -ETIMEDOUT && c->ran != seen)
			rc = 0; /* progress made as the time ran out: wait on */
	}
	if (c->ran >= target)
		rc = 0;
	pthread_mutex_unlock(&c->q_lock);
	return rc;
}

/* ------------------------------------------------------ tensor-parallel commit */

int kvt__client_tp_reserve(struct kvt_client *c, const struct kvt_key *key,
			   const struct kvt_key *parent, uint32_t n_tokens, uint32_t h0, uint32_t h1,
			   uint8_t *claimed, uint32_t *missing, void **obj, int32_t *slot,
			   uint64_t *gen)
{
	const struct kvt_geometry *g = &c->my_geo; /* as check_get */
	if (!key || n_tokens == 0 || n_tokens > g->chunk_tokens || h0 >= h1 || h1 > g->kv_heads)
		return -EINVAL;
	/* a store after kvt_remove is not removed by it, as a put */
	int rc = wait_ran(c, SYNC_REMOVES, 0);
	if (rc < 0)
		return rc;
	bool probe = false;
	if ((rc = admit(c, &probe)) < 0) /* the daemon is down: fail at once */
		return rc;
	pthread_mutex_lock(&c->io_lock);
	if ((rc = admit(c, &probe)) == 0)
		rc = ensure(c);
	if (rc == 0 && (!c->pool || !c->info.pool_writable))
		rc = -ENOTSUP; /* daemon.shared_writes is off, or the pool could not be mapped */
	struct kvtd_rep rep;
	struct kvtd_req req = {.op = KVTD_TP_RESERVE, .key = *key, .n_tokens = n_tokens,
			       .layer_begin = h0, .layer_end = h1, .off = 0,
			       .len = sizeof(struct kvtd_tp_claim) + g->kv_heads};
	if (parent) {
		req.parent = *parent;
		req.has_parent = 1;
	}
	if (rc == 0) {
		rc = exchange(c, &req, &rep, -1);
		if (rc < 0 && stale(c, &rc)) /* the daemon restarted: as kvt__client_pin */
			rc = c->pool && c->info.pool_writable ? exchange(c, &req, &rep, -1)
							      : -ENOTSUP;
	}
	if (rc == 0 && (rc = rep.res.status) == 0) {
		const struct kvtd_tp_claim *cl = (const struct kvtd_tp_claim *)c->shm;
		uint64_t need = kvt_object_bytes(g, n_tokens);
		if (rep.slot_off > c->pool_len || need > c->pool_len - rep.slot_off ||
		    rep.res.bytes != need) {
			rc = -EPROTO;
			disconnect(c); /* drops whatever it claimed */
		} else {
			bool any = false;
			for (uint32_t h = h0; h < h1; h++)
				any |= (claimed[h - h0] = cl->claimed[h] != 0);
			*missing = cl->missing;
			*obj = c->pool + rep.slot_off;
			*slot = rep.slot;
			*gen = c->gen;
			c->tp_writes += any;
		}
	}
	pthread_mutex_unlock(&c->io_lock);
	admit_end(c, probe);
	return rc;
}

int kvt__client_tp_written(struct kvt_client *c, const struct kvt_key *key, int32_t slot,
			   uint32_t h0, uint32_t h1, bool failed, uint64_t gen)
{
	pthread_mutex_lock(&c->io_lock);
	c->tp_writes--;
	free_retired(c);
	/* A connection dropped since the reserve took our claims with it: the daemon has
	 * cancelled the object, and a new connection must not claim to have written it. */
	int rc = c->sock < 0 || c->gen != gen ? -ECANCELED : 0;
	struct kvtd_rep rep;
	struct kvtd_req req = {.op = KVTD_TP_WRITTEN, .key = *key, .n = (uint64_t)(uint32_t)slot,
			       .layer_begin = h0, .layer_end = h1, .flags = failed};
	if (rc == 0)
		rc = exchange(c, &req, &rep, -1);
	if (rc == 0)
		rc = rep.res.status;
	pthread_mutex_unlock(&c->io_lock);
	return rc;
}

int kvt__client_pin(struct kvt_client *c, const struct kvt_key *key, struct kvt_client_pin *p)
{
	int rc = wait_ran(c, SYNC_REMOVES, 0); /* a load after kvt_remove misses, as a get */
	if (rc < 0)
		return rc;
	bool probe = false;
	if ((rc = admit(c, &probe)) < 0) /* the daemon is down: fail at once */
		return rc;
	pthread_mutex_lock(&c->io_lock);
	if ((rc = admit(c, &probe)) == 0)
		rc = ensure(c);
	if (rc == 0 && !c->pool)
		rc = -ENOTSUP; /* the pool could not be mapped */
	struct kvtd_rep rep;
	struct kvtd_req req = {.op = KVTD_GET_PIN, .key = *key};
	uint64_t sent = kvt__now_ns(); /* the lease runs at least lease_ms from here */
	if (rc == 0) {
		rc = exchange(c, &req, &rep, -1);
		/* the daemon restarted since the last call: sent again on the new connection,
		 * as a get is (until 2026-12-05 the load failed with the dead one's error) */
		if (rc < 0 && stale(c, &rc)) {
			sent = kvt__now_ns();
			rc = c->pool ? exchange(c, &req, &rep, -1) : -ENOTSUP;
		}
	}
	if (rc == 0 && (rc = rep.res.status) == 0) {
		p->slot = rep.slot;
		p->lease = rep.lease;
		p->gen = c->gen;
		p->drops = atomic_load(&c->drops);
		/* a daemon that does not say its lease: nothing is trusted before the UNPIN */
		p->held_until_ns = sent + (c->info.caps & KVTD_CAP_LEASE_MS
						   ? (uint64_t)c->info.lease_ms * 1000000u
						   : 0);
		p->tier = rep.res.tier;
		rc = -EPROTO;
		if (rep.slot_off <= c->pool_len && rep.res.bytes >= KVT_HEADER_BYTES &&
		    rep.res.bytes <= c->pool_len - rep.slot_off) {
			struct kvt_key sk;
			struct kvt_header h;
			kvt__storage_key(c->my_ns, key, &sk);
			struct kvt_expect exp = {.geometry = &c->my_geo, .ns_id = c->my_ns,
						 .key = &sk, .max_object_bytes = rep.res.bytes};
			p->obj = c->pool + rep.slot_off;
			rc = kvt__object_verify(p->obj, rep.res.bytes, &exp, &h);
			p->object_bytes = h.object_bytes;
			p->n_tokens = h.n_tokens;
		}
		if (rc == 0)
			c->pins_out++;
		if (rc < 0) { /* give the pin back: nothing will be read from it */
			struct kvtd_req un = {.op = KVTD_UNPIN, .n = (uint64_t)(uint32_t)rep.slot,
					      .lease = rep.lease};
			struct kvtd_rep urep;
			exchange(c, &un, &urep, -1);
		}
	}
	pthread_mutex_unlock(&c->io_lock);
	admit_end(c, probe);
	return rc;
}

bool kvt__client_pin_holds(struct kvt_client *c, const struct kvt_client_pin *p)
{
	/* Read after the copy ended, so a copy that ends before a drop's count is seen ended
	 * before that drop's close, hence before the daemon could let the pin go. */
	return kvt__now_ns() < p->held_until_ns && atomic_load(&c->drops) == p->drops;
}

int kvt__client_unpin(struct kvt_client *c, const struct kvt_client_pin *p)
{
	pthread_mutex_lock(&c->io_lock);
	c->pins_out--;
	free_retired(c);
	/* A connection dropped since the pin took the pin with it: the slot may be reused. */
	int rc = c->sock < 0 || c->gen != p->gen ? -ECONNRESET : 0;
	struct kvtd_rep rep;
	struct kvtd_req req = {.op = KVTD_UNPIN, .n = (uint64_t)(uint32_t)p->slot,
			       .lease = p->lease};
	if (rc == 0)
		rc = exchange(c, &req, &rep, -1);
	if (rc == 0)
		rc = rep.res.status;
	pthread_mutex_unlock(&c->io_lock);
	return rc;
}

int kvt__client_complete(struct kvt_client *c, kvt_cb cb, void *arg, const struct kvt_result *res)
{
	struct cop *o = kvt__calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->cb = cb;
	o->arg = arg;
	o->res = *res;
	pthread_mutex_lock(&c->q_lock);
	c->queued++; /* kvt__client_poll counts it off */
	pthread_mutex_unlock(&c->q_lock);
	cq_push(c, o);
	return 0;
}

/* ------------------------------------------------------------ argument checks */

static int check_put(struct kvt_client *c, uint32_t n_tokens, const void *buf, size_t len)
{
	const struct kvt_geometry *g = &c->my_geo; /* as check_get */
	if (!buf || n_tokens == 0 || n_tokens > g->chunk_tokens ||
	    len != kvt_payload_bytes(g, n_tokens) || len > c->shm_len)
		return -EINVAL;
	return 0;
}

static struct cop put_op(const struct kvt_key *key, const struct kvt_key *parent,
			 uint32_t n_tokens, const void *buf, size_t len)
{
	struct cop o = {.op = KVTD_PUT, .key = *key, .n_tokens = n_tokens, .src = buf,
			.len = len};
	if (parent) {
		o.parent = *parent;
		o.has_parent = true;
	}
	return o;
}

static struct cop get_op(const struct kvt_key *key, uint32_t lb, uint32_t le, void *buf,
			 size_t len)
{
	return (struct cop){.op = KVTD_GET, .key = *key, .layer_begin = lb, .layer_end = le,
			    .dst = buf, .len = len};
}

/* ------------------------------------------------------------------ public */

#define NEED_CB(cb)                                                                                \
	do {                                                                                       \
		if (!(cb))                                                                         \
			return -EINVAL;                                                            \
	} while (0)

int kvt__client_put(struct kvt_client *c, const struct kvt_key *key, const struct kvt_key *parent,
		    uint32_t n_tokens, const void *buf, size_t len, kvt_cb cb, void *arg)
{
	NEED_CB(cb);
	if (!key || check_put(c, n_tokens, buf, len) < 0)
		return -EINVAL;
	struct cop o = put_op(key, parent, n_tokens, buf, len);
	o.cb = cb;
	o.arg = arg;
	return submit(c, &o);
}

/* A get's layers and buffer, refused here as the engine refuses them in process: sent
 * on, a range the daemon refuses costs this process its connection (and every pin and TP
 * claim on it). */
static int check_get(const struct kvt_client *c, const struct kvt_key *key, uint32_t l0,
		     uint32_t l1, const void *buf, size_t len)
{
	/* my_geo: set at open, never written after (c->info is rewritten by a reconnect under
	 * io_lock); a daemon of another geometry is refused at attach */
	const struct kvt_geometry *g = &c->my_geo;
	if (!key || !buf)
		return -EINVAL;
	if (l1 == 0)
		l1 = g->layers;
	if (l0 >= l1 || l1 > g->layers)
		return -EINVAL;
	if (len < (uint64_t)(l1 - l0) * kvt_layer_bytes(g, 1))
		return -EINVAL;
	return 0;
}

int kvt__client_get(struct kvt_client *c, const struct kvt_key *key, const struct kvt_key *parent,
		    uint32_t layer_begin, uint32_t layer_end, void *buf, size_t len, kvt_cb cb,
		    void *arg)
{
	NEED_CB(cb);
	if (check_get(c, key, layer_begin, layer_end, buf, len) < 0)
		return -EINVAL;
	struct cop o = get_op(key, layer_begin, layer_end, buf, len);
	o.cb = cb;
	o.arg = arg;
	if (parent) { /* the daemon links its promotion there (kvt_get_linked) */
		o.parent = *parent;
		o.has_parent = true;
	}
	return submit(c, &o);
}

int kvt__client_lookup(struct kvt_client *c, const struct kvt_key *keys, size_t n, int8_t *tiers,
		       kvt_cb cb, void *arg)
{
	NEED_CB(cb);
	if (!keys && n)
		return -EINVAL;
	struct cop o = {.op = KVTD_LOOKUP, .keys = keys, .n = n, .tiers = tiers, .cb = cb,
			.arg = arg};
	return submit(c, &o);
}

int kvt__client_prefetch(struct kvt_client *c, const struct kvt_key *keys, size_t n,
			 uint64_t deadline_ns, kvt_cb cb, void *arg)
{
	NEED_CB(cb);
	if (!keys && n)
		return -EINVAL;
	struct cop o = {.op = KVTD_PREFETCH, .keys = keys, .n = n, .deadline_ns = deadline_ns,
			.cb = cb, .arg = arg};
	return submit(c, &o);
}

int kvt__client_remove(struct kvt_client *c, const struct kvt_key *key, kvt_cb cb, void *arg)
{
	NEED_CB(cb);
	if (!key)
		return -EINVAL;
	struct cop o = {.op = KVTD_REMOVE, .key = *key, .cb = cb, .arg = arg};
	return submit(c, &o);
}

int kvt__client_flush(struct kvt_client *c, kvt_cb cb, void *arg)
{
	NEED_CB(cb);
	struct cop o = {.op = KVTD_FLUSH, .cb = cb, .arg = arg};
	return submit(c, &o);
}

static int run_sync(struct kvt_client *c, struct cop *o, struct kvt_result *res,
		    enum sync_order order)
{
	int rc = wait_ran(c, order, o->by_ns);
	if (rc < 0) {
		o->res = (struct kvt_result){.status = 0, .tier = KVT_TIER_NONE};
		if (o->op == KVTD_LOOKUP && o->tiers)
			memset(o->tiers, KVT_TIER_NONE, o->n);
		failed(o, rc);
	} else {
		run_op(c, o);
	}
	if (res)
		*res = o->res;
	return o->res.status;
}

int kvt__client_stats(struct kvt_client *c, struct kvt_stats *out)
{
	if (!out)
		return -EINVAL;
	struct cop o = {.op = KVTD_STATS, .dst = out};
	int rc = run_sync(c, &o, NULL, SYNC_NOW);
	if (rc == 0) {
		/* the daemon's bytes as they came: its tier count and names are bounded and
		 * terminated here, as its metrics do (callers print them with %s) */
		if (out->n_tiers > KVT_MAX_TIERS)
			out->n_tiers = KVT_MAX_TIERS;
		for (uint32_t i = 0; i < KVT_MAX_TIERS; i++)
			out->tier[i].name[sizeof(out->tier[i].name) - 1] = 0;
	}
	return rc;
}

int kvt__client_status(struct kvt_client *c, struct kvtd_status *out)
{
	struct cop o = {.op = KVTD_STATUS, .dst = out};
	return run_sync(c, &o, NULL, SYNC_NOW);
}

int kvt__client_put_sync(struct kvt_client *c, const struct kvt_key *key,
			 const struct kvt_key *parent, uint32_t n_tokens, const void *buf,
			 size_t len, uint64_t by_ns)
{
	if (!key || check_put(c, n_tokens, buf, len) < 0)
		return -EINVAL;
	struct cop o = put_op(key, parent, n_tokens, buf, len);
	o.by_ns = by_ns;
	return run_sync(c, &o, NULL, SYNC_REMOVES);
}

int kvt__client_get_sync(struct kvt_client *c, const struct kvt_key *key,
			 const struct kvt_key *parent, uint32_t layer_begin, uint32_t layer_end,
			 void *buf, size_t len, uint64_t by_ns, struct kvt_result *res)
{
	if (check_get(c, key, layer_begin, layer_end, buf, len) < 0)
		return -EINVAL;
	struct cop o = get_op(key, layer_begin, layer_end, buf, len);
	o.by_ns = by_ns;
	if (parent) {
		o.parent = *parent;
		o.has_parent = true;
	}
	return run_sync(c, &o, res, SYNC_REMOVES);
}

int kvt__client_lookup_sync(struct kvt_client *c, const struct kvt_key *keys, size_t n,
			    int8_t *tiers, uint64_t by_ns, struct kvt_result *res)
{
	if (!keys && n)
		return -EINVAL;
	struct cop o = {.op = KVTD_LOOKUP, .keys = keys, .n = n, .tiers = tiers, .by_ns = by_ns};
	return run_sync(c, &o, res, SYNC_REMOVES);
}

int kvt__client_prefetch_sync(struct kvt_client *c, const struct kvt_key *keys, size_t n,
			      uint64_t deadline_ns)
{
	if (!keys && n)
		return -EINVAL;
	/* bounded by its deadline as in process (include/kvtier.h), not only by
	 * store.daemon_timeout_ms (until 2026-12-06: a review, 2 s past a 100 ms deadline
	 * with the daemon stopped) */
	struct cop o = {.op = KVTD_PREFETCH, .keys = keys, .n = n, .deadline_ns = deadline_ns,
			.by_ns = deadline_ns};
	return run_sync(c, &o, NULL, SYNC_REMOVES);
}

int kvt__client_remove_sync(struct kvt_client *c, const struct kvt_key *key)
{
	if (!key)
		return -EINVAL;
	struct cop o = {.op = KVTD_REMOVE, .key = *key};
	return run_sync(c, &o, NULL, SYNC_ALL);
}

int kvt__client_clear_sync(struct kvt_client *c, uint64_t *removed)
{
	uint64_t n = 0;
	int rc;
	do { /* status 1: the daemon's time for this answer ran out, objects are left */
		struct cop o = {.op = KVTD_CLEAR};
		rc = run_sync(c, &o, NULL, SYNC_ALL);
		if (rc >= 0)
			n += o.res.bytes;
	} while (rc == 1);
	if (rc == 0 && removed)
		*removed = n;
	return rc;
}

int kvt__client_flush_sync(struct kvt_client *c)
{
	struct cop o = {.op = KVTD_FLUSH};
	return run_sync(c, &o, NULL, SYNC_ALL);
}

const struct kvt_geometry *kvt__client_geometry(const struct kvt_client *c)
{
	return &c->my_geo; /* equal to the daemon's (checked at open), and never rewritten */
}

/* These three read no c->info (a reconnect rewrites it): see the file comment. */
const uint8_t *kvt__client_ns_id(const struct kvt_client *c)
{
	return c->my_ns; /* the daemon's: attach checks it */
}

int kvt__client_tier_count(const struct kvt_client *c)
{
	return (int)atomic_load_explicit(&c->tiers, memory_order_acquire)->n;
}

const char *kvt__client_tier_name(const struct kvt_client *c, int tier)
{
	/* one chain, one load: never a count from one attach with names from another */
	const struct tier_names *t = atomic_load_explicit(&c->tiers, memory_order_acquire);
	return tier >= 0 && (uint32_t)tier < t->n ? t->name[tier] : "none";
}

/* ------------------------------------------------------------- open / close */

/* The namespace this client's configuration names: the daemon refuses another. */
static int my_namespace(struct kvt_client *c, const struct kvt_config *cfg)
{
	const char *dt = kvt__cfg_str(cfg, "model.dtype");
	c->my_geo.dtype = !strcmp(dt, "bf16")   ? KVT_DTYPE_BF16
			  : !strcmp(dt, "fp16") ? KVT_DTYPE_FP16
			  : !strcmp(dt, "fp8")  ? KVT_DTYPE_FP8
						: KVT_DTYPE_FP32;
	c->my_geo.kind =
		!strcmp(kvt__cfg_str(cfg, "model.kind"), "mla") ? KVT_KIND_MLA : KVT_KIND_KV;
	c->my_geo.layers = (uint32_t)kvt__cfg_u64(cfg, "model.layers");
	c->my_geo.kv_heads = (uint32_t)kvt__cfg_u64(cfg, "model.kv_heads");
	c->my_geo.head_dim = (uint32_t)kvt__cfg_u64(cfg, "model.head_dim");
	c->my_geo.chunk_tokens = (uint32_t)kvt__cfg_u64(cfg, "model.chunk_tokens");
	if (kvt_geometry_check(&c->my_geo) < 0)
		return -EINVAL;
	struct kvt_namespace ns = {.model = kvt__cfg_str(cfg, "model.name"),
				   .revision = kvt__cfg_str(cfg, "model.revision"),
				   .tenant = kvt__cfg_str(cfg, "model.tenant"),
				   .geometry = c->my_geo};
	return kvt_namespace_id(&ns, c->my_ns);
}

/* fork() without exec: the child inherits the daemon connection (SOCK_CLOEXEC closes it at
 * exec only), and while any process holds it the daemon sees no EOF - the connection keeps
 * its thread, region, pins, quarantine and daemon.max_clients place after the parent's
 * store closes (until 2026-12-06: three open/fork/close cycles with a sleeping child each
 * and a fourth store could not attach; a review, daemon_fork_conn). So the child closes its
 * copy of every live client's socket; a call the child makes reconnects on a connection
 * (and a region) of its own. The list is locked across the fork (prepare /
 * parent / child), so the child sees it whole. A reconnect racing the fork may leave the
 * child one new socket it does not know of (rare: the parent's next disconnect ends it
 * for the daemon only once the child exits). */
static pthread_mutex_t g_clients_mu = PTHREAD_MUTEX_INITIALIZER;
static struct kvt_client *g_clients;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

static void atfork_prepare(void)
{
	pthread_mutex_lock(&g_clients_mu);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&g_clients_mu);
}

static void atfork_child(void)
{
	for (struct kvt_client *c = g_clients; c; c = c->fork_next) {
		if (c->sock >= 0)
			close(c->sock);
		c->sock = -1;
		/* The child has none of the parent's threads (the worker, callers mid-call
		 * holding io_lock) and no pool: the pool is MADV_DONTFORK, so c->pool names a
		 * hole there. Until 2026-12-06 a call in the child reconnected: its new region
		 * could be mapped in that hole, unmapped again with the stale pool, and the new
		 * pool mapped over it - the child's puts then wrote into the shared pool over
		 * other clients' objects, and its async calls queued for a worker that does not
		 * exist (a review's reproducer, daemon_fork_conn 4). The child is refused. */
		c->forked = true;
		c->pool = NULL;
		c->pool_len = 0;
		c->pins_out = 0;
		c->tp_writes = 0;
	}
	pthread_mutex_unlock(&g_clients_mu);
}

static void atfork_install(void)
{
	(void)pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

static void clients_add(struct kvt_client *c)
{
	pthread_once(&g_atfork_once, atfork_install);
	pthread_mutex_lock(&g_clients_mu);
	c->fork_next = g_clients;
	g_clients = c;
	c->listed = true;
	pthread_mutex_unlock(&g_clients_mu);
}

static void clients_remove(struct kvt_client *c)
{
	if (!c->listed)
		return;
	pthread_mutex_lock(&g_clients_mu);
	for (struct kvt_client **p = &g_clients; *p; p = &(*p)->fork_next)
		if (*p == c) {
			*p = c->fork_next;
			break;
		}
	c->listed = false;
	pthread_mutex_unlock(&g_clients_mu);
}

/* The client's locks and the client itself (its resources let go already). */
static void client_free(struct kvt_client *c)
{
	if (!c->forked) { /* a child's copies record the parent's waiters: destroy would wait */
		pthread_mutex_destroy(&c->io_lock);
		pthread_mutex_destroy(&c->q_lock);
		pthread_cond_destroy(&c->q_cond);
		pthread_cond_destroy(&c->ran_cond);
		pthread_mutex_destroy(&c->cq_lock);
		pthread_mutex_destroy(&c->down_lock);
	}
	kvt__free(c);
}

void kvt__client_close(struct kvt_client *c)
{
	if (!c)
		return;
	clients_remove(c);
	if (!c->forked) { /* a child has no worker, and its locks may be the parent's held */
		pthread_mutex_lock(&c->q_lock);
		c->stopping = true;
		pthread_cond_signal(&c->q_cond);
		pthread_mutex_unlock(&c->q_lock);
		pthread_join(c->worker, NULL); /* runs what was queued first */
		kvt__client_poll(c, 0);        /* completions not yet polled are delivered */
	}
	disconnect(c);
	unmap_pool(c);
	while (c->retired) {
		struct retired *r = c->retired;
		c->retired = r->next;
		munmap(r->p, r->len);
		kvt__free(r);
	}
	munmap(c->shm, c->shm_len);
	close(c->memfd);
	close(c->efd);
	free_tiers(c);
	client_free(c);
}

int kvt__client_open(const struct kvt_config *cfg, struct kvt_store **out)
{
	struct kvt_client *c = kvt__calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->log = *kvt__cfg_log(cfg);
	c->sock = c->memfd = c->efd = -1;
	c->timeout_ms = (int)kvt__cfg_u64(cfg, "store.daemon_timeout_ms");
	c->max_queued = kvt__cfg_u64(cfg, "store.max_inflight");
	const char *path = kvt__cfg_str(cfg, "store.daemon");
	int rc = -EINVAL;
	if (strlen(path) >= sizeof(c->path)) {
		KVT_ERR(&c->log, "store.daemon: socket path longer than %zu bytes",
			sizeof(c->path) - 1);
		kvt__free(c);
		return -EINVAL;
	}
	snprintf(c->path, sizeof(c->path), "%s", path);
	if (my_namespace(c, cfg) < 0) {
		KVT_ERR(&c->log, "invalid model geometry or namespace");
		kvt__free(c);
		return -EINVAL;
	}
	pthread_mutex_init(&c->io_lock, NULL);
	pthread_mutex_init(&c->q_lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->q_cond, &ca); /* the worker's idle wait (worker_main) */
	pthread_cond_init(&c->ran_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&c->cq_lock, NULL);
	pthread_mutex_init(&c->down_lock, NULL);
	/* The region holds the largest chunk, or a batch of keys, whichever is larger. */
	uint64_t payload = kvt_payload_bytes(&c->my_geo, c->my_geo.chunk_tokens);
	c->shm_len = KVT_ALIGN_UP(KVT_MAX(payload, (uint64_t)KVTD_SHM_MIN), 4096);
	c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->efd < 0) {
		rc = -errno;
		goto fail;
	}
	if ((rc = new_region(c)) < 0)
		goto fail;
	rc = attach(c);
	if (rc < 0) {
		KVT_ERR(&c->log, "store.daemon=%s: cannot attach: %s%s", c->path, kvt_strerror(rc),
			rc == -EINVAL ? " (the daemon serves another model, geometry or tenant)"
				      : "");
		goto fail;
	}
	if (memcmp(&c->info.geo, &c->my_geo, sizeof(c->my_geo))) {
		KVT_ERR(&c->log, "store.daemon=%s: the daemon serves another geometry", c->path);
		rc = -EINVAL;
		goto fail;
	}
	rc = pthread_create(&c->worker, NULL, worker_main, c);
	if (rc) {
		rc = -rc;
		goto fail;
	}
	clients_add(c);
	rc = kvt__store_new_client(c, &c->log, out);
	if (rc < 0) {
		kvt__client_close(c);
		return rc;
	}
	return 0;
fail:
	disconnect(c);
	unmap_pool(c); /* attached, then refused (until 2026-12-06 the pool's mapping leaked) */
	free_retired(c);
	if (c->shm)
		munmap(c->shm, c->shm_len);
	if (c->memfd >= 0)
		close(c->memfd);
	if (c->efd >= 0)
		close(c->efd);
	free_tiers(c);
	client_free(c);
	return rc;
}
