/*
 * tier_redis.c - the "redis" tier: objects as Redis (or Valkey) string values, reached
 * through hiredis. Key: <redis.prefix><64 hex digits>. write = SET, read = STRLEN (to tell
 * a miss from an empty range) + one GETRANGE per segment, exists = one STRLEN per key (an
 * empty value, which this tier never writes, is a miss to exists as it is to read: with
 * EXISTS a lookup found what no get could serve),
 * remove = DEL, all pipelined. scan (kvtier ls, verify) = SCAN over the prefix plus a
 * STRLEN per key, on a connection of its own, driven synchronously: a rare inspection,
 * kept off the I/O connections.
 *
 * Why this shape. A small set of connections (redis.connections), each owned by one I/O
 * thread running its own poll() loop over a non-blocking socket that hiredis connected.
 * Requests are appended to the connection's FIFO by any thread (a mutex and an eventfd
 * wake-up, nothing else) and written as soon as the socket takes them, while replies are
 * parsed as they arrive: many requests in flight per connection, continuously, not in
 * lock-step batches. hiredis connects and parses the one-line replies (status, error,
 * integer); the bytes of large objects never go through a parser buffer: a SET's value is
 * sent with sendmsg() straight from the caller's buffer (borrowed until the callback), and
 * the body of a GETRANGE reply is read from the socket straight into the caller's segment.
 * (hiredis's reader grows its buffer 1 MiB at a time past 1 MiB and copies each bulk reply
 * again into a reply object: quadratic for a 32 MiB value.) hiredis's async API would have
 * needed the same event loop plus those copies; a blocking context with
 * redisAppendCommand batches would stall new requests behind each batch and could not
 * bound the time of one request.
 *
 * Failure. Every request has its own deadline: timeout_ms from when it was queued, plus
 * the time the value bytes it and the requests ahead of it on the connection move (SET
 * values, GETRANGE lengths) take at redis.min_bytes_per_s. When any request is
 * past its deadline the connection is dropped and every request on it fails with
 * -ETIMEDOUT; a reset or refused connection fails them at once. Replies come back in
 * order, and no request's deadline is earlier than that of the request ahead of it (it is
 * raised to it if need be: it cannot be answered first), so the oldest request's deadline
 * is the one to watch. Until 2026-12-05 the clock was timeout_ms from when a request became the
 * oldest, restarted by every reply: behind a server answering each request just within
 * the timeout, the 50th of a pipeline waited 50 timeouts, long after the engine's own
 * deadline had answered its caller, holding the caller's buffers all along. The allowance
 * for bytes is what keeps a long pipeline of large values on a healthy server from timing
 * out: the 100th of a hundred 32 MiB reads legitimately waits for 3 GiB to arrive, which
 * no fixed timeout fits; a server (or link) moving values slower than that rate is
 * treated as one that does not answer. The reconnect a request waits for - name lookup,
 * connect, AUTH, SELECT - is inside its deadline, not a fresh one per step (until
 * 2026-12-05 each step restarted the clock: up to 6 x redis.timeout_ms for a host name
 * with a password and a database). Nothing
 * retries behind the caller's back: the next request reconnects. AUTH (and SELECT) are the
 * first requests of every connection, and nothing is sent behind them until they are
 * answered (send_limit): pipelined behind a refused SELECT or AUTH, the server would run
 * the caller's SETs and DELs in database 0, or as its default user, while the tier reports
 * them failed. A refused password fails the requests with -EACCES and a log line that
 * never contains it. The
 * listing is held to the same timeout for its connect and for each whole reply (a deadline
 * polled for, not a socket timeout, which a trickled reply would never trip), and as a whole
 * to RD_LIST_TIMEOUTS times it (or the caller's bound, kvt__tier_list_ns): a server answering every reply just in time would otherwise
 * keep it going for as many timeouts as it has replies. The listing's replies, and the
 * drops' (below), parsed by hiredis, are held to the size of what was asked (struct
 * sync_cap): its reader has no bound of its own. An error reply is logged at most once a second (its control characters as '?'): a
 * full server answers every put with one.
 *
 * Corrupt values. Many nodes share the server: node A reads a corrupt value, node B
 * meanwhile writes the key again with good bytes (after its own report dropped the bad one,
 * or after a remove); A's late report (drop_corrupt) must not delete B's good copy, or every
 * node misses the key. Redis keeps no version of a value that a read could remember and a
 * delete could be made conditional on (the rados tier's object version, the s3 tier's ETag).
 * The other way, a digest of each value remembered at read and compared by a Lua script at
 * drop time, would cost every read the digest (and a GETRANGE of part of a value has none
 * of the whole). So the cost is put on the drops, which are rare: a thread of their own, on
 * a connection of its own driven like the listing's (each wait bounded, the whole drop
 * within redis.timeout_ms, given up at close at its next wait - a name lookup under way
 * is waited for, at most redis.timeout_ms), WATCHes the key, reads the value and
 * checks it as the engine does (header and layer CRCs for this store's geometry and key),
 * and deletes it only if it is still corrupt, in MULTI / DEL / EXEC, which Redis refuses if
 * the key changed since the WATCH. A sound value is left, whoever wrote it.
 */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "format.h"
#include "net_resolve.h"
#include "redis_url.h"
#include "tier.h"

#define RD_MAX_CONNS 64
#define RD_RBUF (1u << 20)      /* bytes per read() */
#define RD_MAX_SEGS 4096
/* A whole listing's limit, in redis.timeout_ms (32 s by default, about the caller's own
 * store.sync_timeout_ms): room for millions of keys from a healthy server (1,000,000 took
 * 6.6 s through kvtier ls over loopback, on two busy cores); its connect and each reply
 * keep the single timeout within it. */
#define RD_LIST_TIMEOUTS 16
#define RD_READ_TURN (64ull << 20) /* bytes conn_read takes before the loop runs again */
/* Redis refuses a bulk string longer than proto-max-bulk-len (512 MiB unless configured)
 * with a protocol error and closes the connection, failing every request pipelined on it:
 * a larger object is refused before it is sent (rd_can_write, rd_write: -EFBIG). */
#define RD_MAX_BULK (512ull << 20)
#define RD_DROP_QUEUE 256       /* corruption reports waiting for the drop thread */
#define RD_DROP_PIECE (1u << 20) /* bytes of a value per GETRANGE while a drop checks it */
#define RD_SCAN_COUNT 1000      /* the COUNT hint of the listing's SCAN calls */
/* Past its bound, what hiredis may hold of a reply not yet parsed on a synchronous
 * connection (struct sync_cap): one read (16 KiB) of the next pipelined reply, with room. */
#define RD_SYNC_SLACK (64u << 10)

enum rd_kind { OP_EXISTS, OP_READ, OP_WRITE, OP_REMOVE, OP_AUTH, OP_SELECT };
enum rd_cstate { C_DOWN, C_CONNECTING, C_UP };

struct rd_op {
	struct rd_op *next;
	enum rd_kind kind;
	kvt_tier_cb cb;
	void *arg;
	/* what goes on the wire: hdr, then (SET) the borrowed value and "\r\n" */
	char *hdr;
	size_t hdr_len;
	const void *val;
	uint64_t val_len;
	uint64_t out_len;
	uint32_t ncmds, nreplies;
	int result;
	uint64_t due_ns;  /* queued at (submit), then its deadline (the I/O thread, "Failure") */
	uint64_t bytes;   /* value bytes it moves: a SET's value, a read's segment lengths */
	/* OP_READ */
	struct kvt_seg *segs;
	uint32_t nsegs;
	uint64_t total;
	uint64_t value_len; /* OP_READ: the value's length by its STRLEN */
	/* OP_EXISTS */
	uint8_t *present;
};

struct rd_conn {
	struct rd_state *s;
	int id;
	pthread_t thread;
	int efd;
	pthread_mutex_t lock;
	struct rd_op *in_head, *in_tail; /* submitted, not yet taken by the I/O thread */
	bool stop;
	/* I/O thread only */
	enum rd_cstate state;
	bool quiet; /* a failure was logged; stay quiet until the server answers again */
	struct kvt_resolver *resolver; /* a name lookup still out (net_resolve.h) */
	/* the server's addresses from the last lookup; addr_at is the one connected or being
	 * connected to, addr_next the next to try (0: look the name up again first) */
	struct kvt_addrs addrs;
	unsigned addr_at, addr_next;
	redisContext *c;
	redisReader *reader;
	struct rd_op *head, *tail; /* taken: replies go to head */
	struct rd_op *send;        /* first op not fully written */
	uint64_t send_off;
	uint64_t queued_bytes; /* sum of bytes of the requests taken and not answered */
	char *rbuf;
	/* reply framing: a line being assembled, or the body of a bulk string in transit */
	char line[512];
	size_t line_len;
	bool in_bulk;
	char *bulk_dst;       /* where the wanted part of the body goes (NULL: nowhere) */
	uint64_t bulk_want;   /* body bytes still to land at bulk_dst */
	uint64_t bulk_skip;   /* body bytes past the caller's segment, dropped */
	uint64_t bulk_len;    /* bytes delivered, for the reply */
	unsigned bulk_crlf;   /* bytes of the closing "\r\n" still to come */
};

struct rd_state {
	bool ro; /* store.read_only: inspection writes and deletes nothing */
	struct kvt_tier *t;
	struct kvt_redis_url url; /* redis.url, parsed */
	char prefix[256];
	size_t prefix_len;
	uint64_t timeout_ns;
	/* redis.min_bytes_per_s: the slowest a connection may move value bytes (a SET's value
	 * out, a GETRANGE's body in) and still be taken for a healthy server; each request's
	 * deadline allows its own value bytes and those ahead of it at this rate, on top of
	 * redis.timeout_ms (see "Failure" above). The default, 64 MiB/s, is about half a 1 GbE
	 * link: a busy but working 1 GbE connection keeps its requests, a server that trickles
	 * values does not keep them for ever. */
	uint64_t min_bps;
	uint64_t list_ns; /* a whole listing's bound (kvt__tier_list_ns) */
	unsigned nconns;
	atomic_uint rr;
	struct rd_conn conns[RD_MAX_CONNS];
	struct kvt_io_counters cnt;
	/* error replies (OOM from a full server, ...) come one per request: logged at most
	 * once a second, or a full server floods the log with a line per put */
	struct kvt_log_limit reply_err_log;
	struct kvt_log_limit list_log; /* listings given up on at their overall deadline */
	struct kvt_log_limit sync_log; /* replies too large refused (sync_reply) */
	/* Corruption reports, checked and carried out by drop_thread on a connection of its
	 * own (see rd_drop_corrupt). The thread and its eventfd are made by the first report
	 * (most opens never see one), never on a read-only open. */
	pthread_t drop_thread;
	enum { DROP_NONE, DROP_RUNNING, DROP_CLOSED } drop_state; /* under drop_lock */
	bool drop_stop;
	int drop_efd; /* wakes drop_thread's waits at close */
	pthread_mutex_t drop_lock; /* initialised at open, read-only opens too */
	pthread_cond_t drop_cond;
	struct kvt_key drop_q[RD_DROP_QUEUE];
	unsigned drop_head, drop_n;
	/* one limiter per message: "(N more like it not logged)" counts only its own kind */
	struct kvt_log_limit drop_start_log, drop_full_log, drop_fail_log;
};

/* ------------------------------------------------------------ requests */

static size_t cmd_bound(int argc, const size_t *lens)
{
	size_t n = 16;
	for (int i = 0; i < argc; i++)
		n += lens[i] + 32;
	return n;
}

/* Append one RESP command; the last argument's bytes are left out if val_follows (the
 * caller sends them, then "\r\n"). Returns the bytes written. */
static size_t cmd_put(char *p, int argc, const char *const *argv, const size_t *lens,
		      bool val_follows)
{
	size_t o = (size_t)sprintf(p, "*%d\r\n", argc);
	for (int i = 0; i < argc; i++) {
		o += (size_t)sprintf(p + o, "$%zu\r\n", lens[i]);
		if (val_follows && i == argc - 1)
			break;
		memcpy(p + o, argv[i], lens[i]);
		o += lens[i];
		p[o++] = '\r';
		p[o++] = '\n';
	}
	return o;
}

static size_t key_name(const struct rd_state *s, const struct kvt_key *key, char *out)
{
	static const char digits[] = "0123456789abcdef";
	memcpy(out, s->prefix, s->prefix_len);
	char *h = out + s->prefix_len;
	for (int i = 0; i < KVT_KEY_BYTES; i++) {
		h[2 * i] = digits[key->bytes[i] >> 4];
		h[2 * i + 1] = digits[key->bytes[i] & 15];
	}
	return s->prefix_len + 2 * KVT_KEY_BYTES;
}

static struct rd_op *op_new(enum rd_kind kind, size_t hdr_cap, size_t extra, kvt_tier_cb cb,
			    void *arg)
{
	struct rd_op *op = kvt__calloc(1, sizeof(*op) + extra + hdr_cap);
	if (!op)
		return NULL;
	op->kind = kind;
	op->cb = cb;
	op->arg = arg;
	op->hdr = (char *)(op + 1) + extra;
	return op;
}

static void op_finish_out(struct rd_op *op)
{
	op->out_len = op->hdr_len + (op->val ? op->val_len + 2 : 0);
}

/* ------------------------------------------------------------ reply parsing */

/* Replies are built by our own hiredis object functions: a GETRANGE result goes straight
 * into the segment it was asked for; everything else becomes a small rd_reply. */
struct rd_reply {
	int type;
	long long integer;
	size_t len;
	char msg[160];
};
static struct rd_reply nested_reply = {REDIS_REPLY_NIL, 0, 0, ""};

static void *mk_reply(const redisReadTask *task, int type)
{
	if (task->parent)
		return &nested_reply; /* elements of arrays: no command of ours returns one */
	struct rd_reply *r = kvt__calloc(1, sizeof(*r));
	if (r)
		r->type = type;
	return r;
}

static void *rf_string(const redisReadTask *task, char *str, size_t len)
{
	struct rd_reply *r = mk_reply(task, task->type);
	if (r && r != &nested_reply) {
		r->len = len;
		/* the text goes to the log (an error reply's): control characters from the
		 * server (a terminal escape, a newline forging a line) shown as '?' */
		size_t n = KVT_MIN(len, sizeof(r->msg) - 1);
		for (size_t i = 0; i < n; i++)
			r->msg[i] = str[i] >= 0x20 && str[i] < 0x7f ? str[i] : '?';
		r->msg[n] = 0;
	}
	return r;
}

static void *rf_array(const redisReadTask *task, int n)
{
	(void)n;
	return mk_reply(task, REDIS_REPLY_ARRAY);
}

static void *rf_integer(const redisReadTask *task, long long v)
{
	struct rd_reply *r = mk_reply(task, REDIS_REPLY_INTEGER);
	if (r && r != &nested_reply)
		r->integer = v;
	return r;
}

static void *rf_nil(const redisReadTask *task)
{
	return mk_reply(task, REDIS_REPLY_NIL);
}

static void rf_free(void *p)
{
	if (p != &nested_reply)
		kvt__free(p);
}

static redisReplyObjectFunctions rd_fns = {rf_string, rf_array, rf_integer, rf_nil, rf_free};

static int error_code(const char *msg)
{
	if (!strncmp(msg, "NOAUTH", 6) || !strncmp(msg, "WRONGPASS", 9) ||
	    strstr(msg, "invalid password") || strstr(msg, "invalid username"))
		return -EACCES;
	/* maxmemory reached; or MISCONF: the server cannot persist (its disk is full,
	 * stop-writes-on-bgsave-error) and refuses writes while reads go on - a full tier, not
	 * a failing one (until 2026-12-06 MISCONF was -EIO, which opened the tier's circuit
	 * for reads too) */
	if (!strncmp(msg, "OOM", 3) || !strncmp(msg, "MISCONF", 7))
		return -ENOSPC;
	return -EIO;
}

/* ------------------------------------------------------------ connection */

static void complete(struct rd_state *s, struct rd_op *op, int64_t result)
{
	if (op->cb) {
		if (result < 0 && result != -ENOENT && result != -ECANCELED)
			atomic_fetch_add(&s->cnt.errors, 1);
		op->cb(op->arg, result);
	}
	kvt__free(op);
}

static void conn_drop(struct rd_conn *c)
{
	if (c->c)
		redisFree(c->c);
	c->c = NULL;
	if (c->reader)
		redisReaderFree(c->reader);
	c->reader = NULL;
	c->state = C_DOWN;
	c->line_len = 0;
	c->in_bulk = false;
}

/* The connection failed: every request taken so far fails with err. */
static void conn_fail(struct rd_conn *c, int err, const char *why)
{
	struct rd_state *s = c->s;
	if (c->head && err != -ECANCELED && !c->quiet)
		KVT_WARN(&s->t->log, "redis %s:%d: %s: %s (failing requests until it answers)",
			 s->url.host, s->url.port, why, kvt_strerror(err));
	c->quiet = c->head && err != -ECANCELED;
	conn_drop(c);
	struct rd_op *op = c->head;
	c->head = c->tail = c->send = NULL;
	c->send_off = 0;
	c->queued_bytes = 0;
	while (op) {
		struct rd_op *next = op->next;
		complete(s, op, err);
		op = next;
	}
}

static struct rd_op *handshake_op(struct rd_state *s, enum rd_kind kind)
{
	char dbs[16];
	const char *argv[3];
	size_t lens[3];
	int argc = 0;
	if (kind == OP_AUTH) {
		argv[argc++] = "AUTH";
		if (s->url.user[0])
			argv[argc++] = s->url.user;
		argv[argc++] = s->url.pass;
	} else {
		snprintf(dbs, sizeof(dbs), "%d", s->url.db);
		argv[argc++] = "SELECT";
		argv[argc++] = dbs;
	}
	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	struct rd_op *op = op_new(kind, cmd_bound(argc, lens), 0, NULL, NULL);
	if (!op)
		return NULL;
	op->hdr_len = cmd_put(op->hdr, argc, argv, lens, false);
	op->ncmds = 1;
	op_finish_out(op);
	return op;
}

/* A connect to addrs.ip[addr_at] failed: true if the name has another address to try now
 * (the connection is down, the requests kept), false if that was the last (the next
 * connect looks the name up again). */
static bool conn_next_addr(struct rd_conn *c)
{
	c->addr_next = c->addr_at + 1 < c->addrs.n ? c->addr_at + 1 : 0;
	if (!c->addr_next)
		return false;
	conn_drop(c);
	return true;
}

/* Connect (non-blocking) to the server's address. The name is looked up first within
 * budget_ns (what is left of the oldest request's deadline): hiredis would call
 * getaddrinfo() on this thread, which a DNS server that does not answer holds for many
 * seconds. Each of its addresses is tried in turn while connects fail at once (refused,
 * unreachable; conn_next_addr for those that fail later). *why names the step that failed.
 * The oldest request's deadline stays: the connect is part of its wait. */
static int conn_start(struct rd_conn *c, uint64_t budget_ns, const char **why)
{
	struct rd_state *s = c->s;
	*why = "name lookup";
	if (!c->addr_next) {
		int rc = kvt__resolve(&c->resolver, s->url.host, s->url.port, budget_ns,
				      &c->addrs);
		if (rc < 0)
			return rc;
	}
	*why = "connect";
	for (;;) {
		c->addr_at = c->addr_next;
		c->c = redisConnectNonBlock(c->addrs.ip[c->addr_at], s->url.port);
		if (!c->c)
			return -ENOMEM;
		if (!c->c->err)
			break;
		int e = errno ? -errno : -ECONNREFUSED;
		if (c->c->err != REDIS_ERR_IO)
			e = -EHOSTUNREACH;
		if (!c->quiet)
			KVT_WARN(&s->t->log, "redis %s:%d: connect to %s: %s", s->url.host,
				 s->url.port, c->addrs.ip[c->addr_at], c->c->errstr);
		if (!conn_next_addr(c)) {
			conn_drop(c);
			return e;
		}
	}
	c->reader = redisReaderCreateWithFunctions(&rd_fns);
	if (!c->reader) {
		conn_drop(c);
		return -ENOMEM;
	}
	c->reader->privdata = c;
	c->state = C_CONNECTING;
	return 0;
}

/* The socket is connected: put AUTH / SELECT in front of everything waiting. */
static int conn_up(struct rd_conn *c)
{
	struct rd_state *s = c->s;
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(c->c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err)
		return -err;
	struct rd_op *pre[2];
	int n = 0;
	if (s->url.db && !(pre[n++] = handshake_op(s, OP_SELECT)))
		return -ENOMEM;
	/* A user without a password (redis://user:@host, an ACL nopass user) authenticates too:
	 * until 2026-12-06 it was skipped and every command ran as the default user. */
	if ((s->url.user[0] || s->url.pass[0]) && !(pre[n++] = handshake_op(s, OP_AUTH))) {
		if (n > 1)
			kvt__free(pre[0]);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++) { /* AUTH ends up first */
		/* inside the deadline of the request that caused the connect */
		pre[i]->due_ns = c->head ? c->head->due_ns : kvt__now_ns() + s->timeout_ns;
		pre[i]->next = c->head;
		c->head = pre[i];
		if (!c->tail)
			c->tail = pre[i];
	}
	c->send = c->head;
	c->send_off = 0;
	c->state = C_UP;
	return 0;
}

static bool is_handshake(const struct rd_op *op)
{
	return op->kind == OP_AUTH || op->kind == OP_SELECT;
}

/* The first request that must not be sent yet, or NULL for none: while AUTH or SELECT is
 * unanswered at the head, the requests behind them wait (one round trip per connect). A
 * server reads a pipeline to its end whatever it answers: behind a refused SELECT (a
 * database it does not have, an ACL without +select, Redis Cluster) it would store the
 * caller's values in database 0 and delete database 0's keys of the same names, another
 * tenant's under the shared prefix. */
static const struct rd_op *send_limit(const struct rd_conn *c)
{
	const struct rd_op *op = c->head;
	if (!op || !is_handshake(op))
		return NULL;
	while (op && is_handshake(op))
		op = op->next;
	return op;
}

/* Something may be written now (the poll asks for POLLOUT only then, or it would spin). */
static bool conn_can_send(const struct rd_conn *c)
{
	return c->send && c->send != send_limit(c);
}

static int conn_write(struct rd_conn *c)
{
	const struct rd_op *limit = send_limit(c);
	while (c->send && c->send != limit) {
		struct iovec iov[64];
		int n = 0;
		uint64_t skip = c->send_off;
		for (struct rd_op *op = c->send; op && op != limit && n < 62; op = op->next) {
			struct iovec parts[3] = {{op->hdr, op->hdr_len},
						 {(void *)op->val, op->val ? op->val_len : 0},
						 {(void *)"\r\n", op->val ? 2 : 0}};
			for (int i = 0; i < 3; i++) {
				if (skip >= parts[i].iov_len) {
					skip -= parts[i].iov_len;
					continue;
				}
				iov[n].iov_base = (char *)parts[i].iov_base + skip;
				iov[n].iov_len = parts[i].iov_len - skip;
				skip = 0;
				n++;
			}
		}
		/* MSG_NOSIGNAL: a server that went away must not SIGPIPE the process */
		struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
		ssize_t w = sendmsg(c->c->fd, &msg, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		uint64_t left = (uint64_t)w;
		while (c->send && left) {
			uint64_t rest = c->send->out_len - c->send_off;
			if (left < rest) {
				c->send_off += left;
				left = 0;
			} else {
				left -= rest;
				c->send = c->send->next;
				c->send_off = 0;
			}
		}
	}
	return 0;
}

/* One reply for the oldest request. Returns 0, or -errno to drop the connection. */
static int on_reply(struct rd_conn *c, struct rd_reply *r)
{
	struct rd_state *s = c->s;
	struct rd_op *op = c->head;
	/* A reply nobody asked for. The oldest request may still be being sent (a large
	 * pipelined batch: the server answers its first commands before it has the rest),
	 * but its last reply cannot come before its last command has gone. */
	if (!op || (op == c->send && op->nreplies + 1 >= op->ncmds))
		return -EPROTO;
	uint32_t i = op->nreplies++;
	int err = 0;
	if (r->type != REDIS_REPLY_ERROR)
		c->quiet = false;
	if (r->type == REDIS_REPLY_ERROR) {
		err = error_code(r->msg);
		if (op->kind == OP_AUTH || op->kind == OP_SELECT || err == -EACCES) {
			/* An AUTH refusal is shown by its error code only: a server may echo the
			 * command's arguments in its text ("unknown command 'AUTH', with args
			 * beginning with: '<password>'" where AUTH is renamed away). */
			int shown = (int)strcspn(r->msg, " ");
			if (op->kind != OP_AUTH || shown > 32)
				shown = op->kind == OP_AUTH ? 0 : (int)strlen(r->msg);
			if (!c->quiet)
				KVT_ERR(&s->t->log, "redis %s:%d: %s refused: %.*s%s", s->url.host,
					s->url.port,
					op->kind == OP_SELECT ? "SELECT" : "authentication", shown,
					r->msg, op->kind == OP_AUTH ? " (the server's text not shown)" : "");
			return err;
		}
		kvt__logf_limited(&s->t->log, &s->reply_err_log, KVT_LOG_WARN, "redis %s:%d: %s",
				  s->url.host, s->url.port, r->msg);
		/* a value of another type under an object's name (STRLEN: WRONGTYPE) exists,
		 * as EXISTS said: that key's read fails, not the whole batch's lookup */
		if (op->kind == OP_EXISTS && !strncmp(r->msg, "WRONGTYPE", 9)) {
			op->present[i] = 1;
			err = 0;
			goto counted;
		}
	}
	if (!err) {
		switch (op->kind) {
		case OP_EXISTS:
			if (r->type != REDIS_REPLY_INTEGER)
				return -EPROTO;
			op->present[i] = r->integer > 0;
			break;
		case OP_READ:
			if (i == 0) {
				if (r->type != REDIS_REPLY_INTEGER)
					return -EPROTO;
				if (r->integer == 0)
					err = -ENOENT; /* objects are never empty */
				op->value_len = r->integer > 0 ? (uint64_t)r->integer : 0;
			} else {
				if (r->type != REDIS_REPLY_STRING)
					return -EPROTO;
				op->total += r->len;
				/* Shorter than the STRLEN before it says: the value was removed (or
				 * replaced) between the two commands - another node's remove, an
				 * eviction. A miss, as it now is; until 2026-12-05 the read succeeded
				 * short and the engine took it for a corrupt object. */
				const struct kvt_seg *g = &op->segs[i - 1];
				uint64_t want = !g->len || g->off >= op->value_len
						    ? 0
						    : KVT_MIN(g->len, op->value_len - g->off);
				if ((uint64_t)r->len < want)
					err = -ENOENT;
			}
			break;
		case OP_REMOVE:
			if (r->type != REDIS_REPLY_INTEGER)
				return -EPROTO;
			err = r->integer > 0 ? 0 : -ENOENT;
			break;
		case OP_WRITE:
		case OP_AUTH:
		case OP_SELECT:
			if (r->type != REDIS_REPLY_STATUS)
				return -EPROTO;
			break;
		}
	}
	if (err && !op->result)
		op->result = err;
counted:
	if (op->nreplies < op->ncmds)
		return 0;
	c->head = op->next;
	if (!c->head)
		c->tail = NULL;
	c->queued_bytes -= op->bytes;
	int64_t res = op->result;
	switch (op->kind) {
	case OP_READ:
		if (res == -ENOENT) {
			atomic_fetch_add(&s->cnt.misses, 1);
		} else if (!res) {
			atomic_fetch_add(&s->cnt.hits, 1);
			atomic_fetch_add(&s->cnt.reads, 1);
			atomic_fetch_add(&s->cnt.read_bytes, op->total);
			res = (int64_t)op->total; /* never clamped: objects may exceed 2 GiB */
		}
		break;
	case OP_WRITE:
		if (!res) {
			atomic_fetch_add(&s->cnt.writes, 1);
			atomic_fetch_add(&s->cnt.write_bytes, op->val_len);
		}
		break;
	case OP_REMOVE:
		if (!res)
			atomic_fetch_add(&s->cnt.removes, 1);
		break;
	default:
		break;
	}
	complete(s, op, res);
	return 0;
}

/* Start a bulk string reply "$<len>\r\n": its body goes straight into the segment the oldest
 * request asked for (no copy through a parser buffer, nothing proportional to the object
 * allocated), or is counted and dropped. */
static int bulk_start(struct rd_conn *c, const char *line, size_t len)
{
	char *end;
	errno = 0;
	long long n = strtoll(line + 1, &end, 10);
	if (errno || end != line + len - 2 || n < -1)
		return -EPROTO;
	if (n == -1) { /* nil: no command of ours returns one, let on_reply judge */
		struct rd_reply nil = {REDIS_REPLY_NIL, 0, 0, ""};
		return on_reply(c, &nil);
	}
	struct rd_op *op = c->head;
	c->in_bulk = true;
	c->bulk_dst = NULL;
	c->bulk_want = 0;
	c->bulk_skip = (uint64_t)n;
	c->bulk_crlf = 2;
	if (op && op->kind == OP_READ && op->nreplies >= 1 &&
	    op->nreplies - 1 < op->nsegs) {
		struct kvt_seg *seg = &op->segs[op->nreplies - 1];
		c->bulk_dst = seg->buf;
		c->bulk_want = KVT_MIN((uint64_t)n, seg->len);
		c->bulk_skip = (uint64_t)n - c->bulk_want;
	}
	c->bulk_len = c->bulk_want;
	return 0;
}

static int bulk_end(struct rd_conn *c)
{
	c->in_bulk = false;
	struct rd_reply r = {REDIS_REPLY_STRING, 0, c->bulk_len, ""};
	return on_reply(c, &r);
}

/* One line reply (status, error, integer): hiredis's parser makes the reply. */
static int line_reply(struct rd_conn *c)
{
	if (c->line[0] == '$')
		return bulk_start(c, c->line, c->line_len);
	if (c->line[0] != '+' && c->line[0] != '-' && c->line[0] != ':')
		return -EPROTO; /* arrays and the like: no command of ours returns one */
	if (redisReaderFeed(c->reader, c->line, c->line_len) != REDIS_OK)
		return -ENOMEM;
	void *reply = NULL;
	if (redisReaderGetReply(c->reader, &reply) != REDIS_OK || !reply)
		return c->reader->err == REDIS_ERR_OOM ? -ENOMEM : -EPROTO;
	int rc = on_reply(c, reply);
	rf_free(reply);
	return rc;
}

/* Frame the bytes of one read() into replies. */
static int consume(struct rd_conn *c, const char *p, size_t left)
{
	while (left) {
		if (c->in_bulk) {
			size_t k;
			if (c->bulk_want) {
				k = (size_t)KVT_MIN(left, c->bulk_want);
				memcpy(c->bulk_dst, p, k);
				c->bulk_dst += k;
				c->bulk_want -= k;
			} else if (c->bulk_skip) {
				k = (size_t)KVT_MIN(left, c->bulk_skip);
				c->bulk_skip -= k;
			} else {
				/* the body's closing "\r\n": anything else, and the bytes that
				 * follow are not where the next reply starts */
				k = KVT_MIN(left, (size_t)c->bulk_crlf);
				for (size_t i = 0; i < k; i++)
					if (p[i] != "\r\n"[2 - c->bulk_crlf + i])
						return -EPROTO;
				c->bulk_crlf -= (unsigned)k;
			}
			p += k;
			left -= k;
			if (!c->bulk_want && !c->bulk_skip && !c->bulk_crlf) {
				int rc = bulk_end(c);
				if (rc < 0)
					return rc;
			}
			continue;
		}
		const char *nl = memchr(p, '\n', left);
		size_t k = nl ? (size_t)(nl - p) + 1 : left;
		if (c->line_len + k > sizeof(c->line))
			return -EPROTO; /* no reply line of ours is that long */
		memcpy(c->line + c->line_len, p, k);
		c->line_len += k;
		p += k;
		left -= k;
		if (!nl)
			break;
		if (c->line_len < 3 || c->line[c->line_len - 2] != '\r')
			return -EPROTO;
		int rc = line_reply(c);
		c->line_len = 0;
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Read what the socket has and hand every complete reply out. The body of a large bulk
 * reply is read from the socket directly into the caller's segment. */
static int conn_read(struct rd_conn *c)
{
	/* At most RD_READ_TURN bytes per call: the thread goes back to its loop, which checks
	 * the requests' deadlines and close, even while a server (or anyone between) streams
	 * bytes faster than they are taken (until 2026-12-06 a reply of 2^62 bytes held it
	 * here for as long as they came). Poll is level-triggered: the rest is read next. */
	uint64_t taken = 0;
	for (;;) {
		bool direct = c->in_bulk && c->bulk_want;
		size_t want = direct ? (size_t)KVT_MIN(c->bulk_want, (uint64_t)1 << 30) : RD_RBUF;
		ssize_t n = read(c->c->fd, direct ? c->bulk_dst : c->rbuf, want);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -errno;
		}
		if (direct) {
			c->bulk_dst += n;
			c->bulk_want -= (uint64_t)n;
			if (!c->bulk_want && !c->bulk_skip && !c->bulk_crlf) {
				int rc = bulk_end(c);
				if (rc < 0)
					return rc;
			}
		} else {
			int rc = consume(c, c->rbuf, (size_t)n);
			if (rc < 0)
				return rc;
		}
		if ((size_t)n < want || (taken += (uint64_t)n) >= RD_READ_TURN)
			return 0;
	}
}

static void *io_thread(void *arg)
{
	struct rd_conn *c = arg;
	struct rd_state *s = c->s;
	for (;;) {
		pthread_mutex_lock(&c->lock);
		struct rd_op *in = c->in_head;
		c->in_head = c->in_tail = NULL;
		bool stop = c->stop;
		pthread_mutex_unlock(&c->lock);
		if (in) {
			/* each request's deadline (see "Failure" above), never before that of the
			 * request ahead of it, which is answered first */
			uint64_t floor = c->tail ? c->tail->due_ns : 0;
			for (struct rd_op *op = in; op; op = op->next) {
				c->queued_bytes += op->bytes;
				double allow = (double)c->queued_bytes * 1e9 / (double)s->min_bps;
				/* from when it was queued (submit), not taken: time it waited for this
				 * thread (a long reply read, a name lookup) is its wait too */
				op->due_ns = op->due_ns + s->timeout_ns +
					     (allow < 1e18 ? (uint64_t)allow : (uint64_t)1e18);
				if (op->due_ns < floor)
					op->due_ns = floor;
				floor = op->due_ns;
			}
			if (c->tail)
				c->tail->next = in;
			else
				c->head = in;
			/* no send cursor means everything before was written: start at in */
			if (!c->send) {
				c->send = in;
				c->send_off = 0;
			}
			while (in->next)
				in = in->next;
			c->tail = in;
		}
		if (stop) {
			conn_fail(c, -ECANCELED, "closing");
			break;
		}
		uint64_t now = kvt__now_ns();
		if (c->head && c->state == C_DOWN) {
			uint64_t end = c->head->due_ns;
			if (now >= end) {
				conn_fail(c, -ETIMEDOUT, "connect timed out");
				continue;
			}
			const char *why;
			int rc = conn_start(c, end - now, &why);
			if (rc < 0) {
				conn_fail(c, rc, why);
				continue;
			}
			now = kvt__now_ns(); /* the lookup may have taken most of it */
		}
		struct pollfd pfd[2] = {{c->efd, POLLIN, 0}, {-1, 0, 0}};
		int timeout = -1;
		if (c->state != C_DOWN) {
			pfd[1].fd = c->c->fd;
			pfd[1].events = c->state == C_CONNECTING ? POLLOUT
								 : (short)(POLLIN |
									   (conn_can_send(c) ? POLLOUT : 0));
			if (c->head) {
				uint64_t end = c->head->due_ns;
				if (now >= end) {
					/* a connect that timed out: the next attempt tries the
					 * next address (the requests have had their time) */
					if (c->state == C_CONNECTING)
						c->addr_next = c->addr_at + 1 < c->addrs.n
								       ? c->addr_at + 1
								       : 0;
					conn_fail(c, -ETIMEDOUT,
						  c->state == C_CONNECTING ? "connect timed out"
									   : "request timed out");
					continue;
				}
				timeout = (int)KVT_MIN((end - now + 999999) / 1000000,
						       (uint64_t)1 << 30);
			}
		}
		int n = poll(pfd, 2, timeout);
		if (n < 0 && errno != EINTR) {
			conn_fail(c, -errno, "poll");
			continue;
		}
		if (pfd[0].revents & POLLIN) {
			uint64_t v;
			if (read(c->efd, &v, sizeof(v)) < 0) {
				/* nothing to do: the counter is only a wake-up */
			}
		}
		if (pfd[1].fd < 0 || !pfd[1].revents)
			continue;
		/* past the oldest request's deadline while poll slept: the top of the loop fails
		 * it (a connect that completes late is not taken up) */
		if (c->head && kvt__now_ns() >= c->head->due_ns)
			continue;
		int rc = 0;
		if (c->state == C_CONNECTING) {
			rc = conn_up(c);
			if (rc < 0) {
				if (!conn_next_addr(c))
					conn_fail(c, rc, "connect");
				continue;
			}
			c->addr_next = 0; /* a later reconnect looks the name up again */
		}
		if (pfd[1].revents & (POLLIN | POLLHUP | POLLERR)) {
			rc = conn_read(c);
			if (rc < 0) {
				if (!c->head) {
					conn_drop(c); /* idle connection closed by the server */
					continue;
				}
				conn_fail(c, rc, rc == -EACCES ? "authentication" : "connection lost");
				continue;
			}
		}
		if (c->state == C_UP && conn_can_send(c)) {
			rc = conn_write(c);
			if (rc < 0)
				conn_fail(c, rc, "send");
		}
	}
	return NULL;
}

/* ------------------------------------------------------------ vtable */

static void stop_conns(struct rd_state *s, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct rd_conn *c = &s->conns[i];
		pthread_mutex_lock(&c->lock);
		c->stop = true;
		pthread_mutex_unlock(&c->lock);
		uint64_t one = 1;
		if (write(c->efd, &one, sizeof(one)) < 0) {
			/* the eventfd cannot overflow with 1s; ignore */
		}
	}
	for (unsigned i = 0; i < n; i++) {
		struct rd_conn *c = &s->conns[i];
		pthread_join(c->thread, NULL);
		kvt__resolve_abandon(c->resolver);
		c->resolver = NULL;
		/* ops submitted between the last loop and stop: cancel them here, after the
		 * thread is gone, so no one else can touch the queue */
		struct rd_op *op = c->in_head;
		while (op) {
			struct rd_op *next = op->next;
			complete(s, op, -ECANCELED);
			op = next;
		}
		close(c->efd);
		kvt__free(c->rbuf);
		pthread_mutex_destroy(&c->lock);
	}
}

static int drop_start(struct rd_state *s);
static void drop_stop(struct rd_state *s);

static int rd_open(struct kvt_tier *t, const struct kvt_config *cfg)
{
	struct rd_state *s = t->state;
	s->t = t;
	s->ro = kvt__cfg_bool(cfg, "store.read_only");
	const char *url = kvt__cfg_str(cfg, "redis.url");
	if (kvt__redis_url_parse(url, &s->url) < 0) {
		KVT_ERR(&t->log, "redis: redis.url is not redis://[[user]:password@]host[:port][/db]");
		return -EINVAL;
	}
	const char *prefix = kvt__cfg_str(cfg, "redis.prefix");
	s->prefix_len = strlen(prefix);
	if (s->prefix_len >= sizeof(s->prefix)) {
		KVT_ERR(&t->log, "redis: redis.prefix is longer than %zu bytes",
			sizeof(s->prefix) - 1);
		explicit_bzero(s->url.pass, sizeof(s->url.pass)); /* as rd_close does */
		return -EINVAL;
	}
	memcpy(s->prefix, prefix, s->prefix_len + 1);
	s->timeout_ns = kvt__cfg_u64(cfg, "redis.timeout_ms") * 1000000ull;
	s->min_bps = kvt__cfg_u64(cfg, "redis.min_bytes_per_s");
	s->list_ns = kvt__tier_list_ns(cfg, s->timeout_ns, RD_LIST_TIMEOUTS);
	s->nconns = (unsigned)KVT_MIN(kvt__cfg_u64(cfg, "redis.connections"), RD_MAX_CONNS);
	if (!s->nconns)
		s->nconns = 1;
	unsigned i;
	int rc = 0;
	for (i = 0; i < s->nconns; i++) {
		struct rd_conn *c = &s->conns[i];
		c->s = s;
		c->id = (int)i;
		c->state = C_DOWN;
		c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		c->rbuf = kvt__malloc(RD_RBUF);
		if (c->efd < 0 || !c->rbuf) {
			rc = c->efd < 0 ? -errno : -ENOMEM;
			goto undo;
		}
		pthread_mutex_init(&c->lock, NULL);
		rc = -pthread_create(&c->thread, NULL, io_thread, c);
		if (rc < 0) {
			pthread_mutex_destroy(&c->lock);
			goto undo;
		}
	}
	/* Corruption reports are carried out by a thread of their own, started by the first
	 * of them (drop_start); nothing here can fail. */
	pthread_mutex_init(&s->drop_lock, NULL);
	pthread_cond_init(&s->drop_cond, NULL);
	/* Connections open on first use; the tier works once the server comes up. */
	KVT_INFO(&t->log, "redis: %s:%d db %d%s, prefix '%s', %u connections, timeout %llu ms",
		 s->url.host, s->url.port, s->url.db, s->url.user[0] || s->url.pass[0] ? " (auth)" : "", s->prefix, s->nconns,
		 (unsigned long long)(s->timeout_ns / 1000000));
	return 0;
undo:
	KVT_ERR(&t->log, "redis: cannot set up connection %u: %s", i, strerror(-rc));
	if (s->conns[i].efd >= 0)
		close(s->conns[i].efd);
	kvt__free(s->conns[i].rbuf);
	stop_conns(s, i);
	explicit_bzero(s->url.pass, sizeof(s->url.pass));
	return rc;
}

static void rd_close(struct kvt_tier *t)
{
	struct rd_state *s = t->state;
	drop_stop(s);
	pthread_cond_destroy(&s->drop_cond);
	pthread_mutex_destroy(&s->drop_lock);
	stop_conns(s, s->nconns);
	explicit_bzero(s->url.pass, sizeof(s->url.pass)); /* a memset may be optimised away */
}

static int submit(struct rd_state *s, struct rd_op *op)
{
	struct rd_conn *c = &s->conns[atomic_fetch_add(&s->rr, 1) % s->nconns];
	op_finish_out(op);
	pthread_mutex_lock(&c->lock);
	if (c->stop) {
		pthread_mutex_unlock(&c->lock);
		kvt__free(op);
		return -ECANCELED;
	}
	bool was_empty = !c->in_head;
	op->next = NULL;
	op->due_ns = kvt__now_ns(); /* queued now: the I/O thread adds the allowance to it */
	if (c->in_tail)
		c->in_tail->next = op;
	else
		c->in_head = op;
	c->in_tail = op;
	pthread_mutex_unlock(&c->lock);
	if (was_empty) {
		uint64_t one = 1;
		if (write(c->efd, &one, sizeof(one)) < 0) {
			/* cannot fail short of a full counter, which 1s never reach */
		}
	}
	return 0;
}

static int rd_exists(struct kvt_tier *t, const struct kvt_key *keys, uint32_t n, uint8_t *present,
		     kvt_tier_cb cb, void *arg)
{
	struct rd_state *s = t->state;
	if (!cb || (n && (!keys || !present)))
		return -EINVAL;
	size_t klen = s->prefix_len + 2 * KVT_KEY_BYTES;
	size_t lens[2] = {6, klen};
	/* An empty batch still needs one reply to complete on the I/O thread: it asks about
	 * a name no object has and writes the answer to a scratch byte. */
	uint32_t ncmds = n ? n : 1;
	struct rd_op *op = op_new(OP_EXISTS, (size_t)ncmds * cmd_bound(2, lens), n ? 0 : 1, cb,
				  arg);
	if (!op)
		return -ENOMEM;
	op->present = n ? present : (uint8_t *)(op + 1);
	op->ncmds = ncmds;
	char name[512];
	const char *argv[2] = {"STRLEN", name};
	for (uint32_t i = 0; i < ncmds; i++) {
		if (n)
			key_name(s, &keys[i], name);
		else
			memset(name, '-', klen);
		op->hdr_len += cmd_put(op->hdr + op->hdr_len, 2, argv, lens, false);
	}
	return submit(s, op);
}

static int rd_read(struct kvt_tier *t, const struct kvt_key *key, const struct kvt_seg *segs,
		   uint32_t nsegs, kvt_tier_cb cb, void *arg)
{
	struct rd_state *s = t->state;
	if (!cb || !key || (nsegs && !segs) || nsegs > RD_MAX_SEGS)
		return -EINVAL;
	char name[512], a[32], b[32];
	size_t klen = key_name(s, key, name);
	size_t lens[4] = {8, klen, 20, 20};
	struct rd_op *op = op_new(OP_READ, (nsegs + 1) * cmd_bound(4, lens),
				  (size_t)nsegs * sizeof(*segs), cb, arg);
	if (!op)
		return -ENOMEM;
	op->segs = (struct kvt_seg *)(op + 1);
	op->nsegs = nsegs;
	if (nsegs)
		memcpy(op->segs, segs, (size_t)nsegs * sizeof(*segs));
	op->ncmds = nsegs + 1;
	const char *sl[2] = {"STRLEN", name};
	size_t sll[2] = {6, klen};
	op->hdr_len = cmd_put(op->hdr, 2, sl, sll, false);
	for (uint32_t i = 0; i < nsegs; i++) {
		/* GETRANGE's end is inclusive; an empty segment asks for nothing real */
		uint64_t off = segs[i].off, end = segs[i].len ? off + segs[i].len - 1 : 0;
		const char *argv[4] = {"GETRANGE", name, a, b};
		lens[2] = (size_t)snprintf(a, sizeof(a), "%llu",
					   (unsigned long long)(segs[i].len ? off : 1));
		lens[3] = (size_t)snprintf(b, sizeof(b), "%llu", (unsigned long long)end);
		op->hdr_len += cmd_put(op->hdr + op->hdr_len, 4, argv, lens, false);
		op->bytes += segs[i].len;
	}
	return submit(s, op);
}

static int rd_write(struct kvt_tier *t, const struct kvt_key *key, const void *obj, uint64_t len,
		    kvt_tier_cb cb, void *arg)
{
	struct rd_state *s = t->state;
	if (!cb || !key || !obj || !len)
		return -EINVAL;
	if (s->ro)
		return -EROFS;
	if (len > RD_MAX_BULK)
		return -EFBIG;
	char name[512];
	size_t klen = key_name(s, key, name);
	const char *argv[3] = {"SET", name, obj};
	size_t lens[3] = {3, klen, (size_t)len};
	struct rd_op *op = op_new(OP_WRITE, 3 * 32 + klen + 16, 0, cb, arg);
	if (!op)
		return -ENOMEM;
	op->hdr_len = cmd_put(op->hdr, 3, argv, lens, true);
	op->val = obj;
	op->val_len = len;
	op->bytes = len;
	op->ncmds = 1;
	return submit(s, op);
}

static int rd_can_write(struct kvt_tier *t, uint64_t len)
{
	struct rd_state *s = t->state;
	if (s->ro)
		return -EROFS;
	return len > RD_MAX_BULK ? -EFBIG : 0;
}

static int rd_remove(struct kvt_tier *t, const struct kvt_key *key, kvt_tier_cb cb, void *arg)
{
	struct rd_state *s = t->state;
	if (!cb || !key)
		return -EINVAL;
	if (s->ro)
		return -EROFS;
	char name[512];
	size_t klen = key_name(s, key, name);
	const char *argv[2] = {"DEL", name};
	size_t lens[2] = {3, klen};
	struct rd_op *op = op_new(OP_REMOVE, cmd_bound(2, lens), 0, cb, arg);
	if (!op)
		return -ENOMEM;
	op->hdr_len = cmd_put(op->hdr, 2, argv, lens, false);
	op->ncmds = 1;
	return submit(s, op);
}

/* The engine found the value it read under key corrupt. Other nodes share the server and
 * may have written key again with good bytes since that read; deleting whatever is there
 * now would delete that good copy, and every node would then miss the key. So the report is
 * queued for drop_thread, which deletes the value only if it is still corrupt (drop_one);
 * this call never waits for I/O (src/tier.h). A report that finds the queue full, or the
 * key already queued, is not queued again: a corrupt copy left is reported again by the
 * next read of it. The first report starts drop_thread (drop_start). */
static void rd_drop_corrupt(struct kvt_tier *t, const struct kvt_key *key)
{
	struct rd_state *s = t->state;
	atomic_fetch_add(&s->cnt.checksum_failures, 1);
	if (s->ro)
		return; /* inspection never deletes */
	pthread_mutex_lock(&s->drop_lock);
	int rc = s->drop_state == DROP_NONE ? drop_start(s) : 0;
	if (s->drop_state != DROP_RUNNING) {
		/* closing, or no thread to carry the report out: not queued, and the next read
		 * of the key reports it again */
		pthread_mutex_unlock(&s->drop_lock);
		if (rc < 0)
			kvt__logf_limited(&t->log, &s->drop_start_log, KVT_LOG_WARN,
					  "redis: cannot start the drop thread: %s; corrupt value "
					  "left in place",
					  strerror(-rc));
		return;
	}
	bool queued = false, full = s->drop_n == RD_DROP_QUEUE;
	for (unsigned i = 0; i < s->drop_n && !queued; i++)
		queued = kvt__key_eq(&s->drop_q[(s->drop_head + i) % RD_DROP_QUEUE], key);
	if (!queued && !full) {
		s->drop_q[(s->drop_head + s->drop_n++) % RD_DROP_QUEUE] = *key;
		pthread_cond_signal(&s->drop_cond);
	}
	pthread_mutex_unlock(&s->drop_lock);
	if (full && !queued) {
		char hex[2 * KVT_KEY_BYTES + 1];
		kvt_key_to_hex(key, hex);
		kvt__logf_limited(&t->log, &s->drop_full_log, KVT_LOG_WARN,
				  "redis: %u corruption reports waiting; %s not dropped (its next "
				  "read reports it again)",
				  RD_DROP_QUEUE, hex);
	}
}

/* ------------------------------------------------------------ scan */

/* The listing's connection is a non-blocking hiredis context driven here by poll(), so that
 * each wait has a deadline for the whole of it. (A blocking context under redisSetTimeout
 * bounds each recv(), not the reply: a server that trickled a reply a byte at a time kept
 * the listing - and the tier's close, which waits for it - going indefinitely.) */

/* The context's failure as -errno. */
static int sync_fail(const redisContext *c)
{
	switch (c->err) {
	case REDIS_ERR_EOF:
		return -ECONNRESET;
	case REDIS_ERR_OOM:
		return -ENOMEM;
	case REDIS_ERR_PROTOCOL:
		return -EPROTO;
	default:
		return -EIO;
	}
}

/* Until the socket has one of events or end_ns passes: 0 (*revents set) or -ETIMEDOUT;
 * -ECANCELED as soon as stop_fd (an eventfd; -1: none) is readable (the tier closing). */
static int sync_wait(const redisContext *c, int stop_fd, short events, uint64_t end_ns,
		     short *revents)
{
	for (;;) {
		uint64_t now = kvt__now_ns();
		if (now >= end_ns)
			return -ETIMEDOUT;
		struct pollfd pfd[2] = {{c->fd, events, 0}, {stop_fd, POLLIN, 0}};
		int n = poll(pfd, stop_fd >= 0 ? 2 : 1,
			     (int)KVT_MIN((end_ns - now + 999999) / 1000000, 1u << 30));
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0 && pfd[1].revents)
			return -ECANCELED;
		if (n > 0) {
			*revents = pfd[0].revents;
			return 0;
		}
	}
}

/* The most one reply may hold on a synchronous connection, by what was asked. hiredis's
 * reader has no bound of its own: it buffers a bulk string whole before it looks at it and
 * makes an object for every element an array announces, so a server (or anyone on the
 * path: there is no TLS) answering "$4000000000" or "*100000000" and streaming would have
 * it take memory until the timeout - gigabytes on a fast link. */
struct sync_cap {
	size_t bytes; /* string bytes in the reply; what is buffered unparsed, RD_SYNC_SLACK more */
	long elems;   /* array elements, nested ones counted */
};
/* AUTH, SELECT, DBSIZE, WATCH, STRLEN, MULTI, DEL, EXEC, and any error reply's text */
static const struct sync_cap cap_small = {4096, 16};
/* SCAN: COUNT is a hint Redis overshoots by a hash bucket or so; our keys are at most
 * 255 + 64 bytes, though others under the prefix may be longer */
static const struct sync_cap cap_scan = {8u << 20, 2 + 10 * RD_SCAN_COUNT};
static const struct sync_cap cap_header = {KVT_HEADER_BYTES, 0}; /* a drop's header read */
static const struct sync_cap cap_piece = {RD_DROP_PIECE, 0};	 /* and its pieces */

/* What one sync_reply call lets hiredis build: its object functions, wrapped for the call
 * (the reader's privdata), count the reply's strings and elements against cap. */
struct sync_count {
	redisReplyObjectFunctions fn;
	const redisReplyObjectFunctions *base; /* hiredis's own */
	const struct sync_cap *cap;
	size_t bytes;
	long elems;
	bool over;
};

static void *sync_string(const redisReadTask *task, char *str, size_t len)
{
	struct sync_count *n = task->privdata;
	n->bytes += len;
	if (n->bytes > n->cap->bytes) {
		n->over = true;
		return NULL; /* hiredis fails the reply (as out of memory) and frees its part */
	}
	return n->base->createString(task, str, len);
}

static void *sync_array(const redisReadTask *task, int elems)
{
	struct sync_count *n = task->privdata;
	n->elems += elems;
	if (elems < 0 || n->elems > n->cap->elems) {
		n->over = true;
		return NULL;
	}
	return n->base->createArray(task, elems);
}

static int sync_reply_in(redisContext *c, int stop_fd, uint64_t end, struct sync_count *n,
			 redisReply **out)
{
	for (;;) {
		void *r = NULL;
		if (redisGetReplyFromReader(c, &r) != REDIS_OK)
			return n->over ? -EPROTO : sync_fail(c);
		if (r) {
			*out = r;
			return (*out)->type == REDIS_REPLY_ERROR ? error_code((*out)->str) : 0;
		}
		int done = 0;
		if (redisBufferWrite(c, &done) != REDIS_OK) /* what the socket takes, no more */
			return sync_fail(c);
		short rev = 0;
		int rc = sync_wait(c, stop_fd, (short)(POLLIN | (done ? 0 : POLLOUT)), end, &rev);
		if (rc < 0)
			return rc;
		if ((rev & (POLLIN | POLLHUP | POLLERR)) && redisBufferRead(c) != REDIS_OK)
			return sync_fail(c);
		/* parsed only once whole: a bulk string, or a line, longer than the cap */
		if (c->reader->len - c->reader->pos > n->cap->bytes + RD_SYNC_SLACK) {
			n->over = true;
			return -EPROTO;
		}
	}
}

/* The next reply, after sending what is queued before it: all within redis.timeout_ms of
 * this call and before list_end (the listing's own deadline), else -ETIMEDOUT; no larger
 * than cap, else -EPROTO (logged). 0 and *out (the caller frees it), an error reply's
 * -errno (*out set too), or the connection's failure. After a failure the connection is
 * out of step with its replies (a reply may be left half read, its objects counted
 * against this call's cap): the caller ends it. */
static int sync_reply(struct rd_state *s, redisContext *c, int stop_fd, uint64_t list_end,
		      const struct sync_cap *cap, redisReply **out)
{
	uint64_t end = KVT_MIN(kvt__now_ns() + s->timeout_ns, list_end);
	*out = NULL;
	struct sync_count n = {.base = c->reader->fn, .cap = cap};
	n.fn = *n.base;
	n.fn.createString = sync_string;
	n.fn.createArray = sync_array;
	c->reader->fn = &n.fn;
	c->reader->privdata = &n;
	int rc = sync_reply_in(c, stop_fd, end, &n, out);
	c->reader->fn = (redisReplyObjectFunctions *)n.base;
	c->reader->privdata = NULL;
	if (n.over)
		kvt__logf_limited(&s->t->log, &s->sync_log, KVT_LOG_WARN,
				  "redis %s:%d: a reply of more than %zu bytes or %ld array "
				  "elements, where no more is asked for: refused, connection "
				  "dropped",
				  s->url.host, s->url.port, cap->bytes, cap->elems);
	return rc;
}

/* One command and its reply (sync_reply); out NULL: the reply is only checked. */
static int sync_cmd(struct rd_state *s, redisContext *c, int stop_fd, uint64_t list_end,
		    const struct sync_cap *cap, redisReply **out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int ok = redisvAppendCommand(c, fmt, ap);
	va_end(ap);
	if (ok != REDIS_OK)
		return sync_fail(c);
	redisReply *r;
	int rc = sync_reply(s, c, stop_fd, list_end, cap, &r);
	if (out && rc == 0)
		*out = r;
	else
		freeReplyObject(r);
	return rc;
}

/* A connection of its own for a synchronous caller (the listing, a drop): the name looked
 * up, the socket connected, AUTH and SELECT answered, each within redis.timeout_ms and all
 * before end. 0 and *out (the caller frees it), or -errno (*out NULL; a failure to reach
 * the server is logged). */
static int sync_connect(struct rd_state *s, int stop_fd, uint64_t end, redisContext **out)
{
	const struct kvt_log *log = &s->t->log;
	struct kvt_resolver *lookup = NULL;
	struct kvt_addrs addrs;
	uint64_t now = kvt__now_ns();
	*out = NULL;
	int rc = now >= end ? -ETIMEDOUT
			    : kvt__resolve(&lookup, s->url.host, s->url.port,
					   KVT_MIN(s->timeout_ns, end - now), &addrs);
	if (rc < 0) {
		kvt__resolve_abandon(lookup);
		KVT_WARN(log, "redis %s:%d: name lookup: %s", s->url.host, s->url.port, kvt_strerror(rc));
		return rc;
	}
	redisContext *c = NULL;
	/* each address in turn while the connects are refused; a timeout or a cancel ends it */
	for (unsigned i = 0; i < addrs.n; i++) {
		if (c)
			redisFree(c);
		c = redisConnectNonBlock(addrs.ip[i], s->url.port);
		if (!c)
			return -ENOMEM;
		if (c->err) {
			rc = c->err == REDIS_ERR_IO && errno ? -errno : -ECONNREFUSED;
			if (i + 1 == addrs.n)
				KVT_WARN(log, "redis %s:%d: connect to %s: %s", s->url.host,
					 s->url.port, addrs.ip[i], c->errstr);
			continue;
		}
		short rev = 0;
		rc = sync_wait(c, stop_fd, POLLOUT, KVT_MIN(kvt__now_ns() + s->timeout_ns, end), &rev);
		if (rc == 0) {
			int err = 0;
			socklen_t len = sizeof(err);
			if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
				err = errno;
			rc = -err;
		}
		if (rc == 0)
			break;
		bool last = rc == -ECANCELED || rc == -ETIMEDOUT || i + 1 == addrs.n ||
			    kvt__now_ns() >= end;
		if (rc != -ECANCELED && last)
			KVT_WARN(log, "redis %s:%d: connect to %s: %s", s->url.host, s->url.port,
				 addrs.ip[i], kvt_strerror(rc));
		if (last)
			break;
	}
	if (rc < 0)
		goto fail;
	if ((s->url.user[0] || s->url.pass[0]) &&
	    (rc = s->url.user[0]
		      ? sync_cmd(s, c, stop_fd, end, &cap_small, NULL, "AUTH %s %s", s->url.user,
				 s->url.pass)
		      : sync_cmd(s, c, stop_fd, end, &cap_small, NULL, "AUTH %s", s->url.pass)) < 0)
		goto fail;
	if (s->url.db &&
	    (rc = sync_cmd(s, c, stop_fd, end, &cap_small, NULL, "SELECT %d", s->url.db)) < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	redisFree(c);
	return rc;
}

/* List the objects under redis.prefix (kvtier ls, verify), on a connection of its own:
 * SCAN with the prefix as pattern, then the sizes (STRLEN) pipelined per batch. The
 * connect and every reply within redis.timeout_ms, and the whole listing within
 * RD_LIST_TIMEOUTS times it or store.sync_timeout_ms (kvt__tier_list_ns), else -ETIMEDOUT: past the caller's bound
 * (store.sync_timeout_ms, src/tier_bounded.c) a listing left running keeps the tier busy
 * and its close waiting, so it must end by itself. */
static int rd_scan(struct kvt_tier *t, kvt_scan_fn fn, void *arg)
{
	struct rd_state *s = t->state;
	uint64_t list_end = kvt__now_ns() + s->list_ns;
	uint64_t calls = 0; /* SCAN calls sent */
	redisContext *c;
	int rc = sync_connect(s, -1, list_end, &c);
	if (rc < 0)
		goto out;
	/* the prefix as a glob pattern: its special characters escaped */
	char pat[2 * sizeof(s->prefix) + 2];
	size_t pl = 0;
	for (size_t i = 0; i < s->prefix_len; i++) {
		if (strchr("*?[]\\", s->prefix[i]))
			pat[pl++] = '\\';
		pat[pl++] = s->prefix[i];
	}
	pat[pl++] = '*';
	/* A full SCAN takes about DBSIZE / COUNT calls (more while the server rehashes, and
	 * keys come and go): a server that keeps sending new cursors past several times that
	 * cannot be followed to the end, e.g. one cycling between two. */
	redisReply *size = NULL;
	if ((rc = sync_cmd(s, c, -1, list_end, &cap_small, &size, "DBSIZE")) < 0 ||
	    size->type != REDIS_REPLY_INTEGER || size->integer < 0) {
		rc = rc < 0 ? rc : -EPROTO;
		freeReplyObject(size);
		goto out;
	}
	uint64_t max_calls = 4 * ((uint64_t)size->integer / 1000 + 1) + 64;
	freeReplyObject(size);
	char cursor[32] = "0";
	bool stop = false;
	do {
		if (++calls > max_calls) {
			rc = -EPROTO;
			KVT_WARN(&t->log, "redis %s:%d: listing: SCAN went on past %llu calls without "
					  "ending (the keyspace holds fewer keys than that covers)",
				 s->url.host, s->url.port, (unsigned long long)max_calls);
			goto out;
		}
		redisReply *r = NULL;
		if ((rc = sync_cmd(s, c, -1, list_end, &cap_scan, &r, "SCAN %s MATCH %b COUNT %d",
				   cursor, pat, pl, RD_SCAN_COUNT)) < 0 ||
		    r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		    r->element[0]->type != REDIS_REPLY_STRING ||
		    r->element[1]->type != REDIS_REPLY_ARRAY) {
			rc = rc < 0 ? rc : -EPROTO;
			freeReplyObject(r);
			goto out;
		}
		/* A cursor that comes back unchanged never ends (Redis always moves it on): a
		 * server that cannot be followed is an error, not a listing for ever. */
		if (strcmp(cursor, "0") && !strcmp(cursor, r->element[0]->str)) {
			freeReplyObject(r);
			rc = -EPROTO;
			goto out;
		}
		snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
		redisReply *keys = r->element[1];
		struct kvt_key *k = kvt__calloc(keys->elements + 1, sizeof(*k));
		bool *ours = kvt__calloc(keys->elements + 1, sizeof(*ours));
		if (!k || !ours) {
			kvt__free(k);
			kvt__free(ours);
			freeReplyObject(r);
			rc = -ENOMEM;
			goto out;
		}
		for (size_t i = 0; i < keys->elements; i++) {
			redisReply *e = keys->element[i];
			char hex[2 * KVT_KEY_BYTES + 1];
			if (e->type != REDIS_REPLY_STRING || e->len != s->prefix_len + 2 * KVT_KEY_BYTES)
				continue;
			memcpy(hex, e->str + s->prefix_len, 2 * KVT_KEY_BYTES);
			hex[2 * KVT_KEY_BYTES] = 0;
			/* lower case only, as the tier names objects: "<prefix>AB.." is another
			 * value, which a get of the key it would parse to never reads */
			if (kvt__key_from_lowerhex(hex, &k[i]) < 0)
				continue;
			if (redisAppendCommand(c, "STRLEN %b", e->str, e->len) != REDIS_OK) {
				rc = sync_fail(c);
				break;
			}
			ours[i] = true;
		}
		/* each reply within the timeout of the one before it, as on the I/O path */
		for (size_t i = 0; rc == 0 && i < keys->elements; i++) {
			if (!ours[i])
				continue;
			redisReply *n = NULL;
			if ((rc = sync_reply(s, c, -1, list_end, &cap_small, &n)) < 0) {
				/* a list, set, ... under an object's name (another writer): not
				 * an object; the rest of the listing stands */
				bool other = n && n->type == REDIS_REPLY_ERROR &&
					     !strncmp(n->str, "WRONGTYPE", 9);
				freeReplyObject(n);
				if (other) {
					rc = 0;
					continue;
				}
				break;
			}
			/* 0: removed since SCAN listed it */
			if (!stop && n->type == REDIS_REPLY_INTEGER && n->integer > 0)
				stop = fn(arg, &k[i], (uint64_t)n->integer) != 0;
			freeReplyObject(n);
		}
		kvt__free(k);
		kvt__free(ours);
		freeReplyObject(r);
	} while (rc == 0 && !stop && strcmp(cursor, "0"));
out:
	/* A single reply's timeout is the caller's to report; the whole listing's is ours:
	 * the caller sees the same -ETIMEDOUT and could not tell a slow server from a dead one. */
	if (rc == -ETIMEDOUT && kvt__now_ns() >= list_end)
		kvt__logf_limited(
		    &t->log, &s->list_log, KVT_LOG_WARN,
		    "redis %s:%d: listing: not done within %llu ms (the longer of %d x "
		    "redis.timeout_ms and store.sync_timeout_ms), given up after %llu SCAN calls",
		    s->url.host, s->url.port, (unsigned long long)(s->list_ns / 1000000),
		    RD_LIST_TIMEOUTS, (unsigned long long)calls);
	else if (rc < 0 && rc != -ETIMEDOUT)
		KVT_WARN(&t->log, "redis %s:%d: listing: %s", s->url.host, s->url.port, strerror(-rc));
	redisFree(c);
	return rc;
}

/* ------------------------------------------------------------ drops */

/* Whether the value stored under name (n bytes, by STRLEN) is a sound object for key: 1 yes,
 * 0 no (damaged, or no object at all), -errno if it could not be read. The header first;
 * the rest only if the header holds, and only as many bytes as it says, in pieces (one
 * GETRANGE each, pipelined) so that hiredis never holds a large reply whole. Sound means the
 * header and every layer CRC check out for this store's geometry and key, as the engine's
 * first check (kvt__object_verify). A copy whose CRCs hold but whose MAC the engine refused
 * (store.protection) passes here and is left: the tier has no key to check a MAC with. */
static int drop_check(struct rd_state *s, redisContext *c, uint64_t end,
		      const struct kvt_key *key, const char *name, size_t klen, uint64_t n)
{
	struct kvt_expect exp = {.geometry = s->t->geometry, .key = key,
				 .max_object_bytes = s->t->object_max};
	struct kvt_header h;
	redisReply *r = NULL;
	if (n < KVT_HEADER_BYTES)
		return 0;
	int rc = sync_cmd(s, c, s->drop_efd, end, &cap_header, &r, "GETRANGE %b 0 %u", name,
			  klen, KVT_HEADER_BYTES - 1);
	if (rc < 0)
		return rc;
	uint8_t *obj = NULL;
	if (r->type != REDIS_REPLY_STRING)
		rc = -EPROTO;
	else if (r->len != KVT_HEADER_BYTES || kvt__header_decode(r->str, &h, &exp) < 0 ||
		 h.object_bytes > n)
		rc = 0; /* a damaged header, or a value shorter than its header says */
	else if (!(obj = kvt__malloc(h.object_bytes)))
		rc = -ENOMEM;
	else
		memcpy(obj, r->str, KVT_HEADER_BYTES);
	freeReplyObject(r);
	if (!obj)
		return rc;
	uint64_t pieces = 0;
	for (uint64_t off = KVT_HEADER_BYTES; off < h.object_bytes; off += RD_DROP_PIECE) {
		uint64_t last = KVT_MIN(off + RD_DROP_PIECE, h.object_bytes) - 1;
		if (redisAppendCommand(c, "GETRANGE %b %llu %llu", name, klen,
				       (unsigned long long)off, (unsigned long long)last) != REDIS_OK) {
			kvt__free(obj);
			return sync_fail(c);
		}
		pieces++;
	}
	bool whole = true;
	for (uint64_t i = 0; i < pieces; i++) {
		uint64_t off = KVT_HEADER_BYTES + i * RD_DROP_PIECE;
		uint64_t want = KVT_MIN(RD_DROP_PIECE, h.object_bytes - off);
		if ((rc = sync_reply(s, c, s->drop_efd, end, &cap_piece, &r)) < 0) {
			freeReplyObject(r);
			kvt__free(obj);
			return rc;
		}
		if (r->type == REDIS_REPLY_STRING && r->len == want)
			memcpy(obj + off, r->str, want);
		else
			whole = false; /* changed under us: EXEC will tell */
		freeReplyObject(r);
	}
	rc = whole && kvt__object_verify(obj, h.object_bytes, &exp, NULL) == 0;
	kvt__free(obj);
	return rc;
}

/* Carry out one corruption report of key, on a connection of its own, everything (connect
 * included) within redis.timeout_ms, and given up when the tier closes at its next wait (a
 * name lookup under way is not interrupted: close waits for it, at most that). Redis keeps
 * no version of a value that a read could remember (as the rados tier's object version or
 * the s3 tier's ETag), so the check is made on the value itself, at drop time: WATCH the
 * key, read the value and check it (drop_check), and only if it is still corrupt delete it
 * in MULTI / DEL / EXEC, which Redis refuses (a nil reply) if the key was written or
 * deleted since the WATCH. A good copy written by another node since the corrupt read is
 * thus never deleted, even one written while the check runs. The cost falls on the drops
 * (one more read of the value), none on the reads. */
static void drop_one(struct rd_state *s, const struct kvt_key *key)
{
	const struct kvt_log *log = &s->t->log;
	uint64_t end = kvt__now_ns() + s->timeout_ns;
	char name[512], hex[2 * KVT_KEY_BYTES + 1];
	size_t klen = key_name(s, key, name);
	kvt_key_to_hex(key, hex);
	const char *left = NULL; /* why nothing was deleted */
	redisReply *r = NULL;
	redisContext *c;
	int rc = sync_connect(s, s->drop_efd, end, &c);
	if (rc < 0)
		goto out;
	/* WATCH first: any write of the key from here on makes the EXEC below fail */
	if ((rc = sync_cmd(s, c, s->drop_efd, end, &cap_small, NULL, "WATCH %b", name, klen)) < 0 ||
	    (rc = sync_cmd(s, c, s->drop_efd, end, &cap_small, &r, "STRLEN %b", name, klen)) < 0)
		goto out;
	if (r->type != REDIS_REPLY_INTEGER || r->integer < 0) {
		rc = -EPROTO;
		goto out;
	}
	if (r->integer == 0) {
		left = "was gone already";
		goto out;
	}
	rc = drop_check(s, c, end, key, name, klen, (uint64_t)r->integer);
	if (rc != 0) {
		if (rc > 0) {
			left = "was rewritten since the corrupt read and is sound; left in place";
			rc = 0;
		}
		goto out;
	}
	freeReplyObject(r);
	r = NULL;
	/* MULTI first, alone: pipelined behind a MULTI the server refuses (an ACL that allows
	 * WATCH and DEL but not MULTI), the DEL would run at once, unguarded by the WATCH, and
	 * could delete a good copy written since (until 2026-12-06) */
	if (redisAppendCommand(c, "MULTI") != REDIS_OK) {
		rc = sync_fail(c);
		goto out;
	}
	if ((rc = sync_reply(s, c, s->drop_efd, end, &cap_small, &r)) < 0)
		goto out;
	if (r->type != REDIS_REPLY_STATUS) {
		rc = -EPROTO;
		goto out;
	}
	if (redisAppendCommand(c, "DEL %b", name, klen) != REDIS_OK ||
	    redisAppendCommand(c, "EXEC") != REDIS_OK) {
		rc = sync_fail(c);
		goto out;
	}
	for (int i = 0; i < 2; i++) {
		freeReplyObject(r);
		if ((rc = sync_reply(s, c, s->drop_efd, end, &cap_small, &r)) < 0)
			goto out;
	}
	if (r->type == REDIS_REPLY_NIL) {
		left = "was written while it was checked; left in place";
	} else if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
		   r->element[0]->type == REDIS_REPLY_INTEGER) {
		if (r->element[0]->integer > 0)
			atomic_fetch_add(&s->cnt.removes, 1);
	} else {
		rc = -EPROTO;
	}
out:
	freeReplyObject(r);
	redisFree(c); /* its WATCH ends with it */
	if (left) {
		KVT_INFO(log, "redis: %s %s", hex, left);
	} else if (rc < 0 && rc != -ECANCELED) {
		atomic_fetch_add(&s->cnt.errors, 1);
		kvt__logf_limited(log, &s->drop_fail_log, KVT_LOG_WARN,
				  "redis %s:%d: dropping corrupt %s: %s; left in place", s->url.host,
				  s->url.port, hex, kvt_strerror(rc));
	}
}

static void *drop_thread(void *arg)
{
	struct rd_state *s = arg;
	pthread_mutex_lock(&s->drop_lock);
	for (;;) {
		while (!s->drop_n && !s->drop_stop)
			pthread_cond_wait(&s->drop_cond, &s->drop_lock);
		if (s->drop_stop)
			break; /* reports still queued are forgotten: later reads make them again */
		struct kvt_key key = s->drop_q[s->drop_head];
		s->drop_head = (s->drop_head + 1) % RD_DROP_QUEUE;
		s->drop_n--;
		pthread_mutex_unlock(&s->drop_lock);
		drop_one(s, &key);
		pthread_mutex_lock(&s->drop_lock);
	}
	pthread_mutex_unlock(&s->drop_lock);
	return NULL;
}

/* Make drop_thread and its eventfd, under drop_lock (the new thread waits for it to be let
 * go). On failure nothing is left made and drop_state stays DROP_NONE: a later report
 * tries again. */
static int drop_start(struct rd_state *s)
{
	s->drop_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->drop_efd < 0)
		return -errno;
	int rc = -pthread_create(&s->drop_thread, NULL, drop_thread, s);
	if (rc < 0) {
		close(s->drop_efd);
		return rc;
	}
	s->drop_state = DROP_RUNNING;
	return 0;
}

/* At close: later reports are refused, and drop_thread, if a report started it, is stopped;
 * a drop under way is given up at its next wait (-ECANCELED). */
static void drop_stop(struct rd_state *s)
{
	pthread_mutex_lock(&s->drop_lock);
	bool running = s->drop_state == DROP_RUNNING;
	s->drop_state = DROP_CLOSED;
	s->drop_stop = true;
	pthread_cond_signal(&s->drop_cond);
	pthread_mutex_unlock(&s->drop_lock);
	if (!running)
		return;
	uint64_t one = 1;
	if (write(s->drop_efd, &one, sizeof(one)) < 0) {
		/* the eventfd cannot overflow with one 1 */
	}
	pthread_join(s->drop_thread, NULL);
	close(s->drop_efd);
}

static void rd_stats(struct kvt_tier *t, struct kvt_tier_stats *out)
{
	struct rd_state *s = t->state;
	kvt__io_counters_read(&s->cnt, out);
}

const struct kvt_tier_ops kvt__tier_redis_ops = {
	.name = "redis",
	.version = 1,
	.state_size = sizeof(struct rd_state),
	.open = rd_open,
	.close = rd_close,
	.exists = rd_exists,
	.read = rd_read,
	.write = rd_write,
	.remove = rd_remove,
	.stats = rd_stats,
	.scan = rd_scan,
	.flush = NULL,
	.can_write = rd_can_write,
	.drop_corrupt = rd_drop_corrupt,
};
