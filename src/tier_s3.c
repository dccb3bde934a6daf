/*
 * tier_s3.c - the "s3" tier: objects in any S3-compatible store (Ceph RGW, MinIO, AWS S3).
 *
 * One I/O thread per tier instance drives a libcurl multi handle. A tier call becomes one
 * operation with one or more HTTP transfers: exists is a HEAD per key (all of a batch in
 * flight at once), read is a ranged GET per segment, write a PUT, remove a HEAD then a
 * DELETE (S3 answers a DELETE of a missing key with 204, but the contract wants -ENOENT).
 *
 * Corrupt objects: each read remembers which copy of the key it was served (per key, recent
 * reads): the answer's ETag and Last-Modified. drop_corrupt deletes the object only if it is
 * still that copy and damaged: a HEAD with If-Match: <ETag> whose answer must also carry the
 * same Last-Modified, a GET of the whole copy with the same If-Match and Last-Modified whose
 * bytes must fail the object check (a read damaged on its way - a proxy, a plain-http hop -
 * leaves a good copy in place), then a DELETE with If-Match: <ETag>. Other nodes share the bucket and may
 * have written the key again with good bytes since that read (after their own report
 * dropped the bad copy, or after a remove); an unconditional DELETE would remove that good
 * copy, and every node would then miss the key. Both fields are compared because the ETag
 * of a plain PUT is the MD5 of its body: a rewrite with the same bytes as a copy damaged at
 * rest keeps the ETag, not the Last-Modified (a new write, unless in the same second). A
 * key whose recent reads served different copies, or that no remembered read served, is
 * left in place: a corrupt copy left costs a later re-read (which reports it again), a good
 * copy dropped costs every node a miss. What remains: a rewrite that lands between the GET
 * and the DELETE (one round trip) is still deleted where the DELETE's If-Match cannot tell
 * it apart: on Ceph RGW 16 (the test stack), which ignores If-Match on DELETE (measured: a
 * wrong ETag deleted the object), and on any server when the rewrite has the same bytes (a
 * copy damaged at rest kept the ETag of its good bytes). AWS refuses a DELETE whose
 * If-Match does not match (412), which covers a rewrite with other bytes.
 * Submitting threads only append transfers to a locked queue and wake the thread with
 * curl_multi_wakeup(), so a call never blocks on the network and its callback always runs
 * later, on the I/O thread. The multi handle keeps connections alive and reuses them;
 * s3.max_inflight caps transfers in flight, the rest wait in the order of their calls'
 * deadlines: new calls in submission order, a call's follow-up request (a remove's DELETE,
 * a retry) ahead of the calls submitted after it. What needs no request (an exists of no
 * keys, a read's empty segments) takes no slot: it is done as soon as the thread sees it.
 *
 * Signing is libcurl's own SigV4 (CURLOPT_AWS_SIGV4) with the x-amz-content-sha256 header
 * that RGW and AWS require: UNSIGNED-PAYLOAD, or the body's real SHA-256 when
 * s3.sign_payload is set. Credentials come from the environment or an AWS-style
 * credentials file (s3_credentials.c) and are handed only to libcurl, never logged.
 *
 * Every operation has a deadline (s3.timeout_ms from submission): transfers still queued
 * past it fail with -ETIMEDOUT at once (the I/O thread wakes for the earliest, whether or not
 * a slot is free), running ones carry the remaining time as CURLOPT_TIMEOUT_MS.
 * 5xx, 429 (SlowDown), broken connections, connections not set up within
 * s3.connect_timeout_ms (connect_timed_out: nothing was sent) and 2xx answers that do not
 * hold (a PUT's body not all sent, a GET's body not the range asked for: answer_flaw) are
 * retried up to s3.retries times with exponential backoff and jitter, as long as the
 * deadline allows; the call's own deadline running out never is. close()
 * cancels what is still queued or running with -ECANCELED.
 */
#include <errno.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "format.h"
#include "redact.h"
#include "s3_credentials.h"
#include "tier.h"

enum s3_method { M_NONE, M_HEAD, M_GET, M_PUT, M_DELETE };
enum s3_kind { OP_EXISTS, OP_READ, OP_WRITE, OP_REMOVE, OP_DROP };

#define RETRY_BASE_NS 20000000ULL  /* first backoff: 20 ms */
#define RETRY_CAP_NS 1000000000ULL /* longest backoff: 1 s */
#define ERRBODY_MAX 256
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/* Pages one listing may take: 10^9 objects at S3's 1000 a page, far more than a cache
 * holds; past it the server is taken to be cycling through tokens we cannot tell apart. */
#define SCAN_PAGES_MAX 1000000u
#define S3_SERVED 4096 /* reads remembered for drop_corrupt */
#define S3_ETAG_MAX 48 /* "<32 hex>" or a multipart "<32 hex>-<parts>", with its NUL */
#define S3_DATE_MAX 32 /* an HTTP date ("Fri, 04 Dec 2026 01:55:44 GMT"), with its NUL */
#define S3_DROP_CHECKS 4 /* drops re-reading a copy at once (drop_reread) */
#define S3_NAME_MAX 1024 /* an object name's bytes (S3's limit): prefix + 64 hex digits */
#define S3_URL_MAX 4096  /* an object's URL with its NUL (checked at open) */

/* Which copy of a key a read was served (see the note at the top): ETag and Last-Modified
 * as the server sent them; etag[0] == 0: none, or reads served more than one. */
struct s3_copy {
	char etag[S3_ETAG_MAX];
	char date[S3_DATE_MAX];
};

struct s3_served {
	struct kvt_key key;
	struct s3_copy copy;
	uint32_t reads; /* reads remembered and not yet reported (a report takes one) */
	bool used;
};

struct s3_op;

/* One HTTP request (and its retries). Owned by its operation. */
struct s3_xfer {
	struct s3_op *op;
	struct s3_xfer *next;	       /* in the submit, wait or retry list */
	struct s3_xfer *aprev, *anext; /* in the list of running transfers */
	CURL *easy;
	enum s3_method method;
	uint32_t idx; /* exists: index into present[]; read: segment index */
	const struct kvt_key *key;
	uint8_t *buf; /* read: destination */
	uint64_t off, len, got;
	uint64_t body; /* read: bytes of the response body so far (all of them, kept or not) */
	uint64_t sent; /* write: bytes handed to libcurl */
	bool cr_set;   /* read: a Content-Range "bytes first-last/total" came with the answer */
	uint64_t cr_first, cr_last, cr_total; /* cr_total UINT64_MAX: "*", unknown */
	struct s3_copy copy; /* read, drop's HEAD: the copy the answer came from */
	long status;
	bool connect_capped; /* s3.connect_timeout_ms, not the deadline, bounded the connect */
	unsigned attempt;
	uint64_t not_before_ns;
	char errbody[ERRBODY_MAX];
	size_t errlen;
	struct curl_slist *hdrs; /* per-request header list: a write with s3.sign_payload, a
				  * drop's If-Match; NULL: the tier's own */
};

/* One tier call. */
struct s3_op {
	struct s3_state *s;
	enum s3_kind kind;
	kvt_tier_cb cb;
	void *arg;
	uint64_t deadline_ns;
	uint32_t pending;
	int result;
	uint64_t total;
	uint8_t *present;
	struct kvt_key key; /* read, write, remove: a copy, so callers need not keep it */
	const void *obj;
	uint64_t len;
	uint32_t nx;
	struct kvt_key *keys; /* exists: a copy of the batch's keys, after xfers[] */
	struct s3_copy copy;  /* drop: the copy the corrupt read was served */
	uint8_t *check;       /* drop: the copy read again, to check before deleting it */
	struct s3_xfer xfers[];
};

struct s3_state {
	bool ro; /* store.read_only: inspection writes, deletes and creates nothing */
	/* drops re-reading a copy now, each holding a buffer of up to a full chunk's object
	 * (drop_reread): at most S3_DROP_CHECKS */
	atomic_uint checks;
	struct kvt_tier *t;
	/* configuration */
	char *base;	  /* URL up to and including the bucket's "/" (path or virtual style) */
	char *bucket_url; /* the bucket itself, for create/HEAD at open */
	char *shown;	  /* bucket_url for log lines: a password in the endpoint redacted */
	char *prefix;
	char *sigv4;
	struct kvt__s3_credentials cred; /* s3_credentials.c */
	char *token_hdr; /* "x-amz-security-token: ..." or NULL */
	char *ca_file;
	bool tls_verify, sign_payload;
	uint32_t max_inflight, retries;
	uint64_t timeout_ns, connect_timeout_ms;
	uint64_t list_ns; /* a whole listing's bound (kvt__tier_list_ns) */
	/* I/O thread */
	CURLM *multi;
	pthread_t thread;
	bool thread_started;
	struct curl_slist *hdr_get, *hdr_put; /* shared header lists */
	CURL **pool;			      /* idle easy handles */
	uint32_t npool;
	uint32_t active;
	/* running transfers, for cancellation at close */
	struct s3_xfer *act;
	struct s3_xfer *wait_head, *wait_tail; /* not yet started, by deadline: wait_insert() */
	struct s3_xfer *retry;		       /* waiting for their backoff to pass */
	uint64_t rng;
	/* shared with submitters */
	pthread_mutex_t lock;
	bool closing;
	struct s3_xfer *sub_head, *sub_tail;
	/* stats */
	struct kvt_io_counters cnt;
	_Atomic uint64_t retried;
	struct kvt_log_limit warn_limit;
	/* Which copy each recent read of a key was served (by key hash, direct-mapped, under
	 * served_lock): drop_corrupt deletes only that copy (see the note at the top). */
	pthread_mutex_t served_lock;
	struct s3_served served[S3_SERVED];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* Failures are logged at most once a second: a dead endpoint must not flood the log. */
static void warn_limited(struct s3_state *s, const char *fmt, const char *a, const char *b)
{
	char msg[512];
	snprintf(msg, sizeof(msg), fmt, a, b);
	kvt__logf_limited(&s->t->log, &s->warn_limit, KVT_LOG_WARN, "s3: %s", msg);
}

static uint64_t rng_next(struct s3_state *s)
{
	uint64_t x = s->rng;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return s->rng = x;
}

static int xml_field(const char **pos, const char *end, const char *tag, char *out, size_t cap);

/* A decimal number at *p, digits only (no sign, no space), advancing *p; false if there is
 * none or it does not fit 64 bits. */
static bool parse_u64(const char **p, const char *end, uint64_t *v)
{
	const char *q = *p;
	uint64_t r = 0;
	if (q >= end || *q < '0' || *q > '9')
		return false;
	for (; q < end && *q >= '0' && *q <= '9'; q++) {
		unsigned d = (unsigned)(*q - '0');
		if (r > (UINT64_MAX - d) / 10)
			return false;
		r = r * 10 + d;
	}
	*p = q;
	*v = r;
	return true;
}

/* ------------------------------------------------------------- libcurl callbacks */

static size_t on_body(char *p, size_t size, size_t n, void *u)
{
	struct s3_xfer *x = u;
	size_t len = size * n;
	if (!x->status)
		curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
	if (x->method != M_GET || x->status < 200 || x->status >= 300) {
		size_t room = sizeof(x->errbody) - 1 - x->errlen;
		size_t c = KVT_MIN(room, len);
		memcpy(x->errbody + x->errlen, p, c);
		x->errlen += c;
		x->errbody[x->errlen] = 0;
		return len;
	}
	/* Keep the part of the body that is the requested range: all of a 206 (what it holds
	 * is checked against Content-Range at the end), from the offset on of a 200 (the
	 * server ignored Range and sends the whole object). */
	uint64_t at = x->body, from = x->status == 200 ? x->off : 0;
	x->body += len;
	uint64_t lo = KVT_MAX(at, from), hi = KVT_MIN(at + len, from + x->len);
	if (lo < hi) {
		memcpy(x->buf + (lo - from), p + (lo - at), hi - lo);
		x->got = hi - from;
	}
	return len;
}

/* If the header line p[0..len) is name (with its ':'), its value without the blanks around
 * it into out; one that does not fit is taken as none (""). */
static void header_value(const char *p, size_t len, const char *name, char *out, size_t cap)
{
	size_t nl = strlen(name);
	if (len < nl || strncasecmp(p, name, nl))
		return;
	const char *q = p + nl, *end = p + len;
	while (q < end && (*q == ' ' || *q == '\t'))
		q++;
	while (end > q && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
		end--;
	size_t vl = (size_t)(end - q);
	if (vl >= cap)
		vl = 0;
	memcpy(out, q, vl);
	out[vl] = 0;
}

/* Response headers of a GET: its Content-Range, parsed (anything malformed is "none"), and
 * (of a drop's HEAD too) which copy answered: ETag and Last-Modified. */
static size_t on_header(char *p, size_t size, size_t n, void *u)
{
	struct s3_xfer *x = u;
	size_t len = size * n;
	const char *q = p, *end = p + len;
	static const char name[] = "content-range:";
	if (len >= 5 && !strncmp(p, "HTTP/", 5)) {
		/* a new response (after a 1xx): only its own headers count */
		x->cr_set = false;
		x->copy.etag[0] = x->copy.date[0] = 0;
		return len;
	}
	header_value(p, len, "etag:", x->copy.etag, sizeof(x->copy.etag));
	header_value(p, len, "last-modified:", x->copy.date, sizeof(x->copy.date));
	if (len < sizeof(name) - 1 || strncasecmp(p, name, sizeof(name) - 1))
		return len;
	q += sizeof(name) - 1;
	while (q < end && (*q == ' ' || *q == '\t'))
		q++;
	if (end - q < 6 || strncasecmp(q, "bytes ", 6))
		return len;
	q += 6;
	while (q < end && *q == ' ')
		q++;
	uint64_t a, b, total = UINT64_MAX;
	if (!parse_u64(&q, end, &a) || q >= end || *q++ != '-' || !parse_u64(&q, end, &b) ||
	    q >= end || *q++ != '/')
		return len;
	if (q < end && *q == '*')
		q++;
	else if (!parse_u64(&q, end, &total))
		return len;
	while (q < end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n'))
		q++;
	if (q != end || b < a || (total != UINT64_MAX && b >= total))
		return len;
	x->cr_set = true;
	x->cr_first = a;
	x->cr_last = b;
	x->cr_total = total;
	return len;
}

static size_t on_upload(char *p, size_t size, size_t n, void *u)
{
	struct s3_xfer *x = u;
	uint64_t c = KVT_MIN((uint64_t)(size * n), x->op->len - x->sent);
	memcpy(p, (const uint8_t *)x->op->obj + x->sent, c);
	x->sent += c;
	return (size_t)c;
}

static int on_seek(void *u, curl_off_t off, int origin)
{
	struct s3_xfer *x = u;
	if (origin != SEEK_SET || off < 0 || (uint64_t)off > x->op->len)
		return CURL_SEEKFUNC_CANTSEEK;
	x->sent = (uint64_t)off;
	return CURL_SEEKFUNC_OK;
}

/* --------------------------------------------------------------- completion */

static struct s3_served *served_slot(struct s3_state *s, const struct kvt_key *key)
{
	return &s->served[kvt__key_hash(key) % S3_SERVED];
}

static bool copy_eq(const struct s3_copy *a, const struct s3_copy *b)
{
	return !strcmp(a->etag, b->etag) && !strcmp(a->date, b->date);
}

/* A read of key was served copy c (etag "": unknown, or its GETs were served different
 * copies). A second read served another copy than the one remembered makes the key
 * ambiguous until the next drop_corrupt: a report may then be about either copy. */
static void remember_served(struct s3_state *s, const struct kvt_key *key, const struct s3_copy *c)
{
	pthread_mutex_lock(&s->served_lock);
	struct s3_served *e = served_slot(s, key);
	if (e->used && kvt__key_eq(&e->key, key)) {
		if (!copy_eq(&e->copy, c))
			e->copy.etag[0] = 0;
		e->reads += e->reads < UINT32_MAX;
	} else {
		e->key = *key;
		e->copy = *c;
		e->reads = 1;
		e->used = true;
	}
	pthread_mutex_unlock(&s->served_lock);
}

/* This node wrote or removed key: a read remembered from before was served a copy that is
 * gone, and a read after it is served another, which the answer may not tell apart (the
 * same bytes written again within the same second: the same ETag and Last-Modified). Until
 * the key's next report, its reports drop nothing. */
static void served_replaced(struct s3_state *s, const struct kvt_key *key)
{
	pthread_mutex_lock(&s->served_lock);
	struct s3_served *e = served_slot(s, key);
	if (e->used && kvt__key_eq(&e->key, key))
		e->copy.etag[0] = 0;
	pthread_mutex_unlock(&s->served_lock);
}

/* The one copy recent reads of key were served; false if none or several. A report takes
 * one read: the record is forgotten once none is left, or at once if ambiguous
 * (tier_rados.c's recall_served says why it is kept until then). */
static bool recall_served(struct s3_state *s, const struct kvt_key *key, struct s3_copy *out)
{
	bool got = false;
	pthread_mutex_lock(&s->served_lock);
	struct s3_served *e = served_slot(s, key);
	if (e->used && kvt__key_eq(&e->key, key)) {
		*out = e->copy;
		got = e->copy.etag[0] != 0;
		e->used = got && --e->reads > 0;
	}
	pthread_mutex_unlock(&s->served_lock);
	return got;
}

/* A read's GETs all ended well: the copy they were served (etag "" if they disagree or
 * one came without an ETag). */
static void read_served(struct s3_op *op)
{
	struct s3_copy c;
	bool any = false;
	for (uint32_t i = 0; i < op->nx; i++) {
		struct s3_xfer *x = &op->xfers[i];
		if (x->method != M_GET)
			continue; /* an empty segment: nothing asked */
		if (!any)
			c = x->copy;
		else if (!copy_eq(&c, &x->copy))
			c.etag[0] = 0;
		any = true;
	}
	if (any)
		remember_served(op->s, &op->key, &c);
}

static void op_finish_xfer(struct s3_xfer *x, int rc)
{
	struct s3_op *op = x->op;
	if (rc < 0 && op->result >= 0)
		op->result = rc;
	if (--op->pending)
		return;
	struct s3_state *s = op->s;
	int64_t result = op->result;
	if (result >= 0 && op->kind == OP_READ) {
		result = (int64_t)op->total; /* never clamped: objects may exceed 2 GiB */
		read_served(op); /* before the callback: the caller may report the bytes corrupt */
	}
	if (op->kind == OP_WRITE || op->kind == OP_REMOVE)
		served_replaced(s, &op->key); /* failed too: it may still land (a timeout) */
	if (result < 0 && result != -ENOENT && result != -ECANCELED)
		atomic_fetch_add(&s->cnt.errors, 1);
	for (uint32_t i = 0; i < op->nx; i++)
		curl_slist_free_all(op->xfers[i].hdrs);
	if (op->check) {
		kvt__free(op->check);
		atomic_fetch_sub(&s->checks, 1);
	}
	kvt_tier_cb cb = op->cb;
	void *arg = op->arg;
	kvt__free(op);
	if (cb)
		cb(arg, result);
}

static bool retryable(CURLcode cc, long status)
{
	if (cc == CURLE_OK) /* 507: the server is full, which a retry within s3.timeout_ms
			     * will not change (full_errno) */
		return (status >= 500 && status != 507) || status == 429;
	switch (cc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_COULDNT_RESOLVE_HOST:
		return true;
	default:
		return false;
	}
}

/* A transfer's CURLE_OPERATION_TIMEDOUT was s3.connect_timeout_ms running out before the
 * connection was set up (TCP, and TLS on https), not the call's deadline: a SYN lost or
 * dropped by a full listen queue, a server too busy to accept, a stalled TLS handshake. It
 * is retried like CURLE_COULDNT_CONNECT while the deadline leaves time: no byte of the
 * request was sent. libcurl reports both limits with the same code; they are told apart by
 * which limit was the shorter when the transfer started (CURLOPT_CONNECTTIMEOUT_MS is
 * min(left, s3.connect_timeout_ms), CURLOPT_TIMEOUT_MS the time left: when they are equal
 * the deadline is what ran out) and by the request never having been issued
 * (CURLINFO_REQUEST_SIZE 0; libcurl applies the connect limit only before it sends the
 * request, so a request sent at all timed out on the deadline). A call whose deadline ran
 * out fails -ETIMEDOUT then and is never retried: xfer_done also retries only where the
 * backoff ends before the deadline. */
static bool connect_timed_out(const struct s3_xfer *x, CURLcode cc, long request_size)
{
	return cc == CURLE_OPERATION_TIMEDOUT && x->connect_capped && request_size == 0;
}

static int curl_errno(CURLcode cc)
{
	switch (cc) {
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_COULDNT_RESOLVE_HOST:
		return -EHOSTUNREACH;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CONNECT_ERROR:
		return -EPROTO;
	default:
		return -EIO;
	}
}

static int status_errno(long status)
{
	if (status == 404)
		return -ENOENT;
	if (status == 403 || status == 401)
		return -EACCES;
	if (status == 400)
		return -EINVAL;
	if (status == 503 || status == 429)
		return -EAGAIN;
	return -EIO;
}

/* A server or bucket that is full answers in its own words: RGW and AWS 403 QuotaExceeded
 * (a bucket or user quota), MinIO and others 507 Insufficient Storage
 * (XMinioStorageFull), any of them 400 EntityTooLarge for one object above their limit.
 * These are a full tier, not a failing one: -ENOSPC (both), which the engine counts as
 * writes skipped rather than as failures that open the tier's circuit for reads too, and
 * -EFBIG. Until 2026-12-06 a quota was "access denied ... check the credentials" (-EACCES)
 * and a full MinIO was retried until -EIO. 0: not one of them. */
static int full_errno(long status, const char *code)
{
	if (status == 507)
		return -ENOSPC;
	if (!code)
		return 0;
	/* -ENOSPC, not -EDQUOT: the engine takes -EDQUOT for its NVMe write budget, a rolling
	 * day, and offers the chunk again at every hit; a full bucket stays full */
	if (status == 403 && !strcmp(code, "QuotaExceeded"))
		return -ENOSPC;
	if (status == 400 && !strcmp(code, "EntityTooLarge"))
		return -EFBIG;
	return 0;
}

static void wait_push(struct s3_state *s, struct s3_xfer *x)
{
	x->next = NULL;
	if (s->wait_tail)
		s->wait_tail->next = x;
	else
		s->wait_head = x;
	s->wait_tail = x;
}

/* A call's follow-up request (a remove's DELETE, a retry) joins the wait queue by its call's
 * deadline, ahead of the calls submitted later: behind them it would wait for their
 * transfers, stalled ones too, and answer past its own deadline. The queue stays in deadline
 * order (submit() sets deadlines under the lock, in the order it appends), so the requests
 * whose deadline has passed are always at its head. The walk passes only follow-ups of
 * older calls (their first requests all started before this one's). */
static void wait_insert(struct s3_state *s, struct s3_xfer *x)
{
	uint64_t d = x->op->deadline_ns;
	struct s3_xfer **pp = &s->wait_head;
	while (*pp && (*pp)->op->deadline_ns < d)
		pp = &(*pp)->next;
	x->next = *pp;
	*pp = x;
	if (!x->next)
		s->wait_tail = x;
}

/* Why a 2xx answer does not do what was asked (NULL: it does). Such an answer is treated
 * like a broken connection: retried, then -EIO; never a success, nor a short read. */
static const char *answer_flaw(const struct s3_xfer *x, long status, curl_off_t up, curl_off_t clen)
{
	if (x->method == M_PUT) {
		/* With "Expect: 100-continue" a server may answer a final 2xx at once, and
		 * libcurl then sends no body at all: the object was not written. */
		if (up < 0 || (uint64_t)up < x->op->len || x->sent < x->op->len)
			return "a PUT acknowledged before its whole body was sent";
		return NULL;
	}
	if (x->method != M_GET)
		return NULL;
	if (status == 206) {
		/* Exactly the range asked for, cut short only by the object's end. */
		if (!x->cr_set || x->cr_first != x->off)
			return "a 206 without the requested range's Content-Range";
		uint64_t want = x->len;
		if (x->cr_total != UINT64_MAX)
			want = x->cr_total > x->off ? KVT_MIN(x->len, x->cr_total - x->off) : 0;
		if (!want || x->cr_last - x->cr_first + 1 != want || x->body != want)
			return "a 206 whose length does not match the request";
		return NULL;
	}
	if (status == 200) {
		/* Range ignored: the whole object, provably whole (libcurl holds the body to
		 * Content-Length), of which we kept what the request covers up to its end. */
		if (clen < 0 || (uint64_t)clen != x->body)
			return "a 200 of unknown length to a ranged GET";
		uint64_t want = x->body > x->off ? KVT_MIN(x->len, x->body - x->off) : 0;
		if (x->got != want)
			return "a 200 that does not cover the request";
		return NULL;
	}
	return "a 2xx other than 200 or 206 to a GET";
}

/* The <Code> of an S3 error body, if it is one plain word; else NULL. The body itself is
 * never logged: a 400 ExpiredToken may carry the session token. */
static const char *error_code(const char *body, char *code, size_t cap)
{
	const char *p = body;
	if (xml_field(&p, NULL, "Code", code, cap) < 0 || !code[0])
		return NULL;
	for (const char *c = code; *c; c++)
		if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z')))
			return NULL;
	return code;
}

/* A drop found another copy than the one the corrupt read was served, or found the copy
 * sound: not an error. */
static void drop_left_why(struct s3_state *s, struct s3_xfer *x, const char *why)
{
	char hex[2 * KVT_KEY_BYTES + 1];
	kvt_key_to_hex(x->key, hex);
	KVT_INFO(&s->t->log, "s3: %s %s; left in place", hex, why);
	op_finish_xfer(x, 0);
}

static void drop_left(struct s3_state *s, struct s3_xfer *x)
{
	drop_left_why(s, x, "was rewritten since the corrupt read");
}

/* A drop's HEAD found the copy the corrupt read was served (clen bytes): read it again,
 * whole, with the same If-Match, and delete it only if it is damaged (drop_checked). The
 * read may have been damaged on its way (a proxy, a plain-http hop, a bad NIC) while the
 * stored copy is good, and a delete then costs every node sharing the bucket a miss. A copy
 * too short for a header, or longer than a full chunk's object, is damaged as it stands. */
static void drop_reread(struct s3_state *s, struct s3_xfer *x, curl_off_t clen)
{
	struct s3_op *op = x->op;
	/* Each re-read holds up to a full chunk's object for up to s3.timeout_ms, and anyone
	 * who can write the bucket can plant corrupt objects: past S3_DROP_CHECKS at once the
	 * copy is left (reads of it keep failing their checks, so it is never served, and a
	 * later read reports it again). Until 2026-12-06 their number had no bound. */
	/* A HEAD without a length (a proxy that strips it) says nothing about the copy: it
	 * is left, as one no memory is left for checking is (until 2026-12-06 both were
	 * deleted unchecked, a sound copy among them - a review). */
	if (clen < 0) {
		drop_left_why(s, x, "was not checked again: the HEAD gave no length");
		return;
	}
	bool checkable = s->t->geometry && clen >= (curl_off_t)KVT_HEADER_BYTES &&
			 (uint64_t)clen <= s->t->object_max;
	if (checkable && atomic_load(&s->checks) >= S3_DROP_CHECKS) {
		drop_left_why(s, x, "was not checked again: too many drops are checking copies");
		return;
	}
	if (checkable && !(op->check = kvt__malloc((size_t)clen))) {
		drop_left_why(s, x, "was not checked again: no memory to read it");
		return;
	}
	if (checkable) {
		atomic_fetch_add(&s->checks, 1); /* given back where op->check is freed */
		x->method = M_GET;
		x->buf = op->check;
		x->off = 0;
		x->len = (uint64_t)clen;
	} else {
		/* damaged as it stands (too short for a header, longer than any object) - or no
		 * geometry to check it with (a tier opened outside a store): as before the
		 * check existed */
		x->method = M_DELETE;
	}
	x->attempt = 0;
	wait_insert(s, x);
}

/* A drop's re-read answered: delete the copy only if it is still the one read and damaged. */
static void drop_checked(struct s3_state *s, struct s3_xfer *x)
{
	struct s3_op *op = x->op;
	if (!copy_eq(&x->copy, &op->copy)) {
		drop_left(s, x);
		return;
	}
	struct kvt_expect exp = {.geometry = s->t->geometry, .key = x->key,
				 .max_object_bytes = s->t->object_max};
	if (x->got == x->len && kvt__object_verify(x->buf, x->len, &exp, NULL) == 0) {
		/* A copy whose CRCs hold but whose MAC the engine refused (store.protection)
		 * is left too: the tier has no key to check a MAC with. */
		drop_left_why(s, x, "is sound when read again (the corrupt read was damaged on "
				    "its way)");
		return;
	}
	x->method = M_DELETE;
	x->attempt = 0;
	wait_insert(s, x);
}

/* A transfer's HTTP exchange ended (cc, status): finish it, retry it or chain the next step. */
static void xfer_done(struct s3_state *s, struct s3_xfer *x, CURLcode cc)
{
	struct s3_op *op = x->op;
	long status = 0, request_size = -1;
	curl_off_t up = -1, clen = -1;
	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(x->easy, CURLINFO_REQUEST_SIZE, &request_size);
	curl_easy_getinfo(x->easy, CURLINFO_SIZE_UPLOAD_T, &up);
	curl_easy_getinfo(x->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &clen);
	curl_multi_remove_handle(s->multi, x->easy);
	if (s->npool < s->max_inflight)
		s->pool[s->npool++] = x->easy;
	else
		curl_easy_cleanup(x->easy);
	x->easy = NULL;
	s->active--;
	if (x->aprev)
		x->aprev->anext = x->anext;
	else
		s->act = x->anext;
	if (x->anext)
		x->anext->aprev = x->aprev;

	const char *flaw = NULL;
	if (cc == CURLE_OK && status >= 200 && status < 300 &&
	    !(flaw = answer_flaw(x, status, up, clen))) {
		switch (x->method) {
		case M_HEAD:
			if (op->kind == OP_EXISTS) {
				/* an empty object (this tier never writes one: a broken gateway,
				 * another writer) is a miss to exists as it is to read (416) */
				op->present[x->idx] = clen != 0;
				break;
			}
			/* A drop's HEAD answered by another copy than the one the corrupt read
			 * was served (same ETag, other Last-Modified: the same bytes written
			 * again): that copy stays. */
			if (op->kind == OP_DROP && !copy_eq(&x->copy, &op->copy)) {
				drop_left(s, x);
				return;
			}
			if (op->kind == OP_DROP) {
				drop_reread(s, x, clen);
				return;
			}
			/* remove: it exists, now delete it */
			x->method = M_DELETE;
			x->attempt = 0;
			wait_insert(s, x);
			return;
		case M_GET:
			op->total += x->got;
			atomic_fetch_add(&s->cnt.read_bytes, x->got);
			if (op->kind == OP_DROP) {
				drop_checked(s, x);
				return;
			}
			break;
		case M_PUT:
			atomic_fetch_add(&s->cnt.write_bytes, op->len);
			break;
		case M_DELETE:
		case M_NONE:
			break;
		}
		op_finish_xfer(x, 0);
		return;
	}
	if (cc == CURLE_OK && status == 404 && x->method == M_HEAD && op->kind == OP_EXISTS) {
		op->present[x->idx] = 0;
		op_finish_xfer(x, 0);
		return;
	}
	if (cc == CURLE_OK && status == 416 && x->method == M_GET) {
		/* the range starts past the end: a short (empty) read; from offset 0, an empty
		 * object, which is none (exists says so too) */
		op_finish_xfer(x, x->off == 0 && op->kind == OP_READ ? -ENOENT : 0);
		return;
	}
	if (cc == CURLE_OK && status == 404 && x->method == M_DELETE) {
		op_finish_xfer(x, -ENOENT); /* gone between our HEAD and DELETE */
		return;
	}
	if (cc == CURLE_OK && status == 412 && op->kind == OP_DROP) {
		drop_left(s, x); /* If-Match: the object has another ETag now */
		return;
	}
	uint64_t now = kvt__now_ns();
	if ((flaw || retryable(cc, status) || connect_timed_out(x, cc, request_size)) &&
	    x->attempt < s->retries) {
		uint64_t cap = RETRY_BASE_NS << KVT_MIN(x->attempt, 20u);
		cap = KVT_MIN(cap, RETRY_CAP_NS);
		uint64_t delay = cap / 2 + rng_next(s) % (cap / 2 + 1);
		if (now + delay < op->deadline_ns) {
			x->attempt++;
			x->not_before_ns = now + delay;
			x->next = s->retry;
			s->retry = x;
			atomic_fetch_add(&s->retried, 1);
			return;
		}
	}
	int rc = flaw ? -EIO : cc != CURLE_OK ? curl_errno(cc) : status_errno(status);
	char code[64];
	const char *ec = !flaw && cc == CURLE_OK ? error_code(x->errbody, code, sizeof(code)) : NULL;
	/* A 404 is an absent object - but not to a PUT, nor with NoSuchBucket: the bucket is
	 * gone (a lifecycle rule, an operator, a recreated MinIO bucket). Taken for an absent
	 * object, every write was lost without a line and the tier looked healthy and empty
	 * (until 2026-12-06); now a failure, said once a while. (A HEAD has no body: an
	 * exists of a deleted bucket still reads as absent.) */
	bool no_bucket = rc == -ENOENT && ((ec && !strcmp(ec, "NoSuchBucket")) ||
					   op->kind == OP_WRITE);
	if (rc == -ENOENT && !no_bucket) {
		op_finish_xfer(x, rc);
		return;
	}
	if (no_bucket) {
		warn_limited(s, "HTTP 404 %s: the bucket does not exist (deleted since the tier "
				"opened?): writes fail%s", ec ? ec : "to a PUT", "");
		op_finish_xfer(x, -EIO);
		return;
	}
	int full = !flaw && cc == CURLE_OK ? full_errno(status, ec) : 0;
	if (full) {
		rc = full;
		char why[96];
		snprintf(why, sizeof(why), "%s (HTTP %ld",
			 full == -EFBIG	   ? "object larger than the server accepts"
			 : status == 403   ? "bucket or user quota exceeded"
					   : "server full",
			 status);
		warn_limited(s, "%s %s): writes to the bucket are refused until it has room", why,
			     ec ? ec : "Insufficient Storage");
	} else if (flaw) {
		warn_limited(s, "request failed: %s%s", flaw, "");
	} else if (cc != CURLE_OK) {
		warn_limited(s, "request failed: %s%s", curl_easy_strerror(cc), "");
	} else if (status == 403 || status == 401) {
		warn_limited(s,
			     "access denied (HTTP %s): check the credentials and the bucket's "
			     "permissions%s",
			     status == 403 ? "403" : "401", "");
	} else {
		char st[16];
		snprintf(st, sizeof(st), "%ld", status);
		warn_limited(s, "HTTP %s: %s", st, ec ? ec : "(no S3 error code)");
	}
	op_finish_xfer(x, rc);
}

/* ------------------------------------------------------------------ I/O thread */

/* A transfer that times out while libcurl's resolver thread is still looking its name up
 * returns at once instead of joining that thread (the lookup finishes on its own, detached):
 * without it every call on the tier's one I/O thread, and its close, waited for the name
 * server's timeout - 10 s and more with a default resolv.conf - whatever s3.timeout_ms
 * said (integ.s3_dns_stall; until 2026-12-06). libcurl 7.87 and later. */
static void no_lookup_wait(CURL *e)
{
#if LIBCURL_VERSION_NUM >= 0x075700
	curl_easy_setopt(e, CURLOPT_QUICK_EXIT, 1L);
#else
	(void)e;
#endif
}

static int xfer_start(struct s3_state *s, struct s3_xfer *x, uint64_t now)
{
	struct s3_op *op = x->op;
	CURL *e = s->npool ? s->pool[--s->npool] : curl_easy_init();
	if (!e)
		return -ENOMEM;
	curl_easy_reset(e);
	x->easy = e;
	x->status = 0;
	x->errlen = 0;
	x->errbody[0] = 0;
	x->got = 0;
	x->body = 0;
	x->sent = 0;
	x->cr_set = false;
	x->copy.etag[0] = x->copy.date[0] = 0;

	char hex[2 * KVT_KEY_BYTES + 1], url[S3_URL_MAX], range[64];
	kvt_key_to_hex(x->key, hex);
	snprintf(url, sizeof(url), "%s%s%s", s->base, s->prefix, hex);
	uint64_t left_ms = (op->deadline_ns - now) / 1000000 + 1;

	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_PRIVATE, x);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	no_lookup_wait(e);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_AWS_SIGV4, s->sigv4);
	curl_easy_setopt(e, CURLOPT_USERNAME, s->cred.access_key);
	curl_easy_setopt(e, CURLOPT_PASSWORD, s->cred.secret_key);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)left_ms);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)KVT_MIN(left_ms, s->connect_timeout_ms));
	x->connect_capped = s->connect_timeout_ms < left_ms; /* connect_timed_out() */
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, s->tls_verify ? 1L : 0L);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, s->tls_verify ? 2L : 0L);
	if (s->ca_file)
		curl_easy_setopt(e, CURLOPT_CAINFO, s->ca_file);
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 512L * 1024);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
	/* x->hdrs: a drop's If-Match (a PUT's own list is set below) */
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->hdrs ? x->hdrs : s->hdr_get);
	switch (x->method) {
	case M_HEAD:
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
		if (op->kind == OP_DROP) { /* which copy answers: compared in xfer_done */
			curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
			curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
		}
		break;
	case M_GET:
		snprintf(range, sizeof(range), "%llu-%llu", (unsigned long long)x->off,
			 (unsigned long long)(x->off + x->len - 1));
		curl_easy_setopt(e, CURLOPT_RANGE, range);
		curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
		break;
	case M_PUT:
		curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
		curl_easy_setopt(e, CURLOPT_READFUNCTION, on_upload);
		curl_easy_setopt(e, CURLOPT_READDATA, x);
		curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek);
		curl_easy_setopt(e, CURLOPT_SEEKDATA, x);
		curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)op->len);
		curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->hdrs ? x->hdrs : s->hdr_put);
		break;
	case M_DELETE:
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
		break;
	case M_NONE:
		break;
	}
	if (curl_multi_add_handle(s->multi, e) != CURLM_OK) {
		curl_easy_cleanup(e);
		x->easy = NULL;
		return -EIO;
	}
	s->active++;
	x->aprev = NULL;
	x->anext = s->act;
	if (s->act)
		s->act->aprev = x;
	s->act = x;
	if (x->method == M_GET)
		atomic_fetch_add(&s->cnt.reads, 1);
	else if (x->method == M_PUT)
		atomic_fetch_add(&s->cnt.writes, 1);
	else if (x->method == M_DELETE)
		atomic_fetch_add(&s->cnt.removes, 1);
	return 0;
}

/* The body's SHA-256 as hex, computed on the I/O thread so submitters stay cheap. */
static int put_headers(struct s3_state *s, struct s3_xfer *x)
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	char line[128];
	static const char d[] = "0123456789abcdef";
	SHA256(x->op->obj, x->op->len, md);
	int o = snprintf(line, sizeof(line), "x-amz-content-sha256: ");
	for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
		line[o++] = d[md[i] >> 4];
		line[o++] = d[md[i] & 15];
	}
	line[o] = 0;
	struct curl_slist *l = curl_slist_append(NULL, line);
	if (l && s->token_hdr && !curl_slist_append(l, s->token_hdr)) {
		curl_slist_free_all(l);
		l = NULL;
	}
	if (!l)
		return -ENOMEM;
	x->hdrs = l;
	return 0;
}

static void cancel_list(struct s3_xfer *x)
{
	while (x) {
		struct s3_xfer *next = x->next;
		op_finish_xfer(x, -ECANCELED);
		x = next;
	}
}

static void *io_thread(void *arg)
{
	struct s3_state *s = arg;
	for (;;) {
		pthread_mutex_lock(&s->lock);
		struct s3_xfer *got = s->sub_head;
		s->sub_head = s->sub_tail = NULL;
		bool closing = s->closing;
		pthread_mutex_unlock(&s->lock);
		while (got) {
			struct s3_xfer *next = got->next;
			/* Nothing to send (an exists of no keys, a read's empty segment): done
			 * now. In the wait queue it would wait for a transfer slot it never
			 * uses, answering only when one frees or at its deadline. (An op's
			 * transfers all come in this one batch, none started: finishing this one
			 * frees the op only if it was its last, and next is already read.) */
			if (got->method == M_NONE)
				op_finish_xfer(got, 0);
			else
				wait_push(s, got);
			got = next;
		}
		if (closing)
			break;

		uint64_t now = kvt__now_ns();
		uint64_t next_retry = UINT64_MAX;
		for (struct s3_xfer **pp = &s->retry; *pp;) {
			struct s3_xfer *x = *pp;
			if (x->not_before_ns <= now) {
				*pp = x->next;
				wait_insert(s, x);
			} else {
				next_retry = KVT_MIN(next_retry, x->not_before_ns);
				pp = &x->next;
			}
		}
		/* Requests not started by their deadline fail now, not when a slot frees: every
		 * slot may be held by a stalled transfer of a later call, for its whole timeout. */
		while (s->wait_head && now >= s->wait_head->op->deadline_ns) {
			struct s3_xfer *x = s->wait_head;
			s->wait_head = x->next;
			if (!s->wait_head)
				s->wait_tail = NULL;
			op_finish_xfer(x, -ETIMEDOUT);
		}
		bool hashed = false;
		while (s->active < s->max_inflight && s->wait_head) {
			struct s3_xfer *x = s->wait_head;
			bool hash = x->method == M_PUT && s->sign_payload && !x->hdrs;
			if (hash && hashed)
				break; /* the next turn, after curl has run (it polls at once) */
			s->wait_head = x->next;
			if (!s->wait_head)
				s->wait_tail = NULL;
			if (now >= x->op->deadline_ns) {
				op_finish_xfer(x, -ETIMEDOUT);
				continue;
			}
			int rc = 0;
			if (hash) {
				/* A SHA-256 over the whole object (~10 ms per 16 MiB with SHA-NI): one
				 * per loop turn, and the clock read again after it. curl counts a
				 * transfer's timeout from its first perform, so every PUT added while
				 * a turn hashed the others got their hashing on top of its time: 24
				 * signed 16 MiB PUTs to a stalled endpoint answered up to 543 ms after
				 * a 300 ms deadline (until 2026-12-05). */
				rc = put_headers(s, x);
				hashed = true;
				now = kvt__now_ns();
				if (rc == 0 && now >= x->op->deadline_ns)
					rc = -ETIMEDOUT;
			}
			if (rc == 0)
				rc = xfer_start(s, x, now);
			if (rc < 0)
				op_finish_xfer(x, rc);
		}

		int running;
		curl_multi_perform(s->multi, &running);
		CURLMsg *m;
		int left;
		bool progressed = false;
		while ((m = curl_multi_info_read(s->multi, &left))) {
			if (m->msg != CURLMSG_DONE)
				continue;
			struct s3_xfer *x;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
			xfer_done(s, x, m->data.result);
			progressed = true;
		}
		if (progressed)
			continue; /* freed slots: start waiting transfers before sleeping */
		/* Wake for the next retry and for the first queued deadline (the head's). */
		uint64_t wake = next_retry;
		if (s->wait_head)
			wake = KVT_MIN(wake, s->wait_head->op->deadline_ns);
		int wait_ms = 1000;
		if (wake != UINT64_MAX) {
			uint64_t now2 = kvt__now_ns();
			wait_ms =
			    wake <= now2 ? 0 : (int)KVT_MIN(1000, (wake - now2) / 1000000 + 1);
		}
		if (s->wait_head && s->active < s->max_inflight)
			wait_ms = 0;
		curl_multi_poll(s->multi, NULL, 0, wait_ms, NULL);
	}

	/* closing: everything still here ends with -ECANCELED */
	while (s->act) {
		struct s3_xfer *x = s->act;
		s->act = x->anext;
		curl_multi_remove_handle(s->multi, x->easy);
		curl_easy_cleanup(x->easy);
		x->easy = NULL;
		s->active--;
		op_finish_xfer(x, -ECANCELED);
	}
	cancel_list(s->retry);
	s->retry = NULL;
	cancel_list(s->wait_head);
	s->wait_head = s->wait_tail = NULL;
	return NULL;
}

/* ------------------------------------------------------------------ submission */

static struct s3_op *op_new(struct s3_state *s, enum s3_kind kind, uint32_t nx, size_t extra,
			    kvt_tier_cb cb, void *arg)
{
	struct s3_op *op = kvt__calloc(1, sizeof(*op) + nx * sizeof(struct s3_xfer) + extra);
	if (!op)
		return NULL;
	op->s = s;
	op->kind = kind;
	op->cb = cb;
	op->arg = arg;
	op->nx = nx;
	op->pending = nx;
	for (uint32_t i = 0; i < nx; i++)
		op->xfers[i].op = op;
	return op;
}

static int submit(struct s3_state *s, struct s3_op *op)
{
	pthread_mutex_lock(&s->lock);
	if (s->closing) {
		pthread_mutex_unlock(&s->lock);
		for (uint32_t i = 0; i < op->nx; i++) /* a signed write's or a drop's headers */
			curl_slist_free_all(op->xfers[i].hdrs);
		kvt__free(op);
		return -ECANCELED;
	}
	/* Set under the lock: calls join the queue in the order of their deadlines. */
	op->deadline_ns = kvt__now_ns() + s->timeout_ns;
	for (uint32_t i = 0; i < op->nx; i++) {
		struct s3_xfer *x = &op->xfers[i];
		x->next = NULL;
		if (s->sub_tail)
			s->sub_tail->next = x;
		else
			s->sub_head = x;
		s->sub_tail = x;
	}
	/* Under the lock: close() cannot free the multi handle between append and wakeup. */
	curl_multi_wakeup(s->multi);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

static int s3_exists(struct kvt_tier *t, const struct kvt_key *keys, uint32_t n, uint8_t *present,
		     kvt_tier_cb cb, void *arg)
{
	struct s3_state *s = t->state;
	if (!cb || (n && (!keys || !present)))
		return -EINVAL;
	uint32_t nx = n ? n : 1;
	struct s3_op *op = op_new(s, OP_EXISTS, nx, (size_t)n * sizeof(struct kvt_key), cb, arg);
	if (!op)
		return -ENOMEM;
	op->present = present;
	op->keys = (struct kvt_key *)&op->xfers[nx];
	if (n)
		memcpy(op->keys, keys, (size_t)n * sizeof(*keys));
	for (uint32_t i = 0; i < nx; i++) {
		struct s3_xfer *x = &op->xfers[i];
		x->method = n ? M_HEAD : M_NONE;
		x->idx = i;
		x->key = &op->keys[i];
	}
	return submit(s, op);
}

static int s3_read(struct kvt_tier *t, const struct kvt_key *key, const struct kvt_seg *segs,
		   uint32_t nsegs, kvt_tier_cb cb, void *arg)
{
	struct s3_state *s = t->state;
	if (!cb || !key || (nsegs && !segs))
		return -EINVAL;
	uint32_t nx = nsegs ? nsegs : 1;
	struct s3_op *op = op_new(s, OP_READ, nx, 0, cb, arg);
	if (!op)
		return -ENOMEM;
	op->key = *key;
	for (uint32_t i = 0; i < nx; i++) {
		struct s3_xfer *x = &op->xfers[i];
		x->key = &op->key;
		x->idx = i;
		if (!nsegs || !segs[i].len) {
			x->method = M_NONE;
			continue;
		}
		if (!segs[i].buf || segs[i].off + segs[i].len < segs[i].off) {
			kvt__free(op);
			return -EINVAL;
		}
		x->method = M_GET;
		x->buf = segs[i].buf;
		x->off = segs[i].off;
		x->len = segs[i].len;
	}
	return submit(s, op);
}

static int s3_write(struct kvt_tier *t, const struct kvt_key *key, const void *obj, uint64_t len,
		    kvt_tier_cb cb, void *arg)
{
	struct s3_state *s = t->state;
	if (!cb || !key || (len && !obj))
		return -EINVAL;
	if (s->ro)
		return -EROFS;
	struct s3_op *op = op_new(s, OP_WRITE, 1, 0, cb, arg);
	if (!op)
		return -ENOMEM;
	op->key = *key;
	op->obj = obj;
	op->len = len;
	op->xfers[0].method = M_PUT;
	op->xfers[0].key = &op->key;
	return submit(s, op);
}

static int s3_remove(struct kvt_tier *t, const struct kvt_key *key, kvt_tier_cb cb, void *arg)
{
	struct s3_state *s = t->state;
	if (!cb || !key)
		return -EINVAL;
	if (s->ro)
		return -EROFS;
	struct s3_op *op = op_new(s, OP_REMOVE, 1, 0, cb, arg);
	if (!op)
		return -ENOMEM;
	op->key = *key;
	op->xfers[0].method = M_HEAD;
	op->xfers[0].key = &op->key;
	return submit(s, op);
}

/* Fire and forget: the engine found the object corrupt. Deletes the copy the read was
 * served and no other (see the note at the top): a HEAD with If-Match, its Last-Modified
 * compared too, then a DELETE with If-Match, both under the operation's deadline like any
 * other call. A failed drop only costs a later re-read, which reports the copy again. */
static void s3_drop_corrupt(struct kvt_tier *t, const struct kvt_key *key)
{
	struct s3_state *s = t->state;
	atomic_fetch_add(&s->cnt.checksum_failures, 1);
	if (s->ro)
		return; /* inspection never deletes */
	struct s3_copy c;
	if (!recall_served(s, key, &c)) {
		char hex[2 * KVT_KEY_BYTES + 1];
		kvt_key_to_hex(key, hex);
		KVT_DEBUG(&s->t->log, "s3: %s: recent reads served no single copy; not dropped",
			  hex);
		return;
	}
	struct s3_op *op = op_new(s, OP_DROP, 1, 0, NULL, NULL);
	if (!op)
		return;
	op->key = *key;
	op->copy = c;
	struct s3_xfer *x = &op->xfers[0];
	x->method = M_HEAD;
	x->key = &op->key;
	/* the shared GET headers, then If-Match; freed with the op (op_finish_xfer) */
	char line[sizeof(c.etag) + 16];
	snprintf(line, sizeof(line), "If-Match: %s", c.etag);
	struct curl_slist *l = NULL;
	for (const struct curl_slist *h = s->hdr_get; h; h = h->next) {
		struct curl_slist *m = curl_slist_append(l, h->data);
		if (!m)
			goto nomem;
		l = m;
	}
	if (!(x->hdrs = curl_slist_append(l, line)))
		goto nomem;
	submit(s, op);
	return;
nomem:
	curl_slist_free_all(l);
	kvt__free(op);
}

static void s3_stats(struct kvt_tier *t, struct kvt_tier_stats *out)
{
	struct s3_state *s = t->state;
	kvt__io_counters_read(&s->cnt, out);
}

/* ------------------------------------------------------------------ open / close */

static char *str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *str_printf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return NULL;
	char *p = kvt__malloc((size_t)n + 1);
	if (!p)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(p, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return p;
}

/* Base URLs for path-style (endpoint/bucket/key) or virtual-hosted (bucket.host/key). */
static int build_urls(struct s3_state *s, const char *endpoint, const char *bucket,
		      bool virtual_hosted)
{
	const struct kvt_log *log = &s->t->log;
	size_t sl = !strncmp(endpoint, "https://", 8)  ? 8
		    : !strncmp(endpoint, "http://", 7) ? 7
						       : 0;
	if (!sl || !endpoint[sl]) {
		char shown[512];
		KVT_ERR(log, "s3: endpoint '%s' must start with http:// or https://",
			kvt__redact_url(endpoint, shown, sizeof(shown)));
		return -EINVAL;
	}
	if (strlen(bucket) < 3 || strpbrk(bucket, "/?#% ")) {
		KVT_ERR(log, "s3: bucket name '%s' is invalid (3+ characters, no '/')", bucket);
		return -EINVAL;
	}
	size_t el = strlen(endpoint);
	while (el > sl && endpoint[el - 1] == '/')
		el--;
	if (virtual_hosted) {
		s->bucket_url = str_printf("%.*s%s.%.*s/", (int)sl, endpoint, bucket,
					   (int)(el - sl), endpoint + sl);
		s->base = str_printf("%s", s->bucket_url ? s->bucket_url : "");
	} else {
		s->bucket_url = str_printf("%.*s/%s", (int)el, endpoint, bucket);
		s->base = str_printf("%.*s/%s/", (int)el, endpoint, bucket);
	}
	if (s->bucket_url) {
		char shown[4200];
		s->shown = kvt__strdup(kvt__redact_url(s->bucket_url, shown, sizeof(shown)));
	}
	return s->bucket_url && s->base && s->shown ? 0 : -ENOMEM;
}

static size_t discard_body(char *p, size_t size, size_t n, void *u)
{
	(void)p;
	(void)u;
	return size * n;
}

/* A blocking request at open (bucket check and creation), before the I/O thread exists. */
static int blocking_request(struct s3_state *s, const char *method, const char *url, long *status)
{
	CURL *e = curl_easy_init();
	if (!e)
		return -ENOMEM;
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	no_lookup_wait(e);
	curl_easy_setopt(e, CURLOPT_AWS_SIGV4, s->sigv4);
	curl_easy_setopt(e, CURLOPT_USERNAME, s->cred.access_key);
	curl_easy_setopt(e, CURLOPT_PASSWORD, s->cred.secret_key);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, s->hdr_put); /* UNSIGNED-PAYLOAD */
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(s->timeout_ns / 1000000));
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)s->connect_timeout_ms);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, s->tls_verify ? 1L : 0L);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, s->tls_verify ? 2L : 0L);
	if (s->ca_file)
		curl_easy_setopt(e, CURLOPT_CAINFO, s->ca_file);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, discard_body);
	if (!strcmp(method, "HEAD")) {
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	} else {
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, 0L);
	}
	CURLcode cc = curl_easy_perform(e);
	*status = 0;
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
	curl_easy_cleanup(e);
	if (cc != CURLE_OK) {
		KVT_WARN(&s->t->log, "s3: %s %s: %s", method, s->shown,
			 curl_easy_strerror(cc));
		return curl_errno(cc);
	}
	return 0;
}

/* ---------------------------------------------------------------------- scan */

struct membuf {
	char *p;
	size_t len, cap;
};

static size_t on_mem(char *p, size_t size, size_t n, void *u)
{
	struct membuf *m = u;
	size_t len = size * n;
	if (m->len + len + 1 > m->cap) {
		size_t cap = KVT_MAX(m->cap * 2, m->len + len + 1);
		if (cap > (64u << 20))
			return 0; /* a listing page is far smaller: refuse, the transfer fails */
		char *q = kvt__realloc(m->p, cap);
		if (!q)
			return 0;
		m->p = q;
		m->cap = cap;
	}
	memcpy(m->p + m->len, p, len);
	m->len += len;
	m->p[m->len] = 0;
	return len;
}

/* Text between <tag> and </tag> starting at *pos, XML entities decoded into out. Advances
 * *pos past it. 0 if found; -E2BIG if found but longer than out (cut to fit: no caller may
 * take it as the value); -1 if not there. */
static int xml_field(const char **pos, const char *end, const char *tag, char *out, size_t cap)
{
	char open[64], close[64];
	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	const char *a = strstr(*pos, open);
	if (!a || (end && a > end))
		return -1;
	a += strlen(open);
	const char *b = strstr(a, close);
	if (!b || (end && b > end))
		return -1;
	size_t o = 0;
	static const struct {
		const char *ent;
		char c;
	} ents[] = {
	    {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
	const char *p = a;
	while (p < b && o + 1 < cap) {
		size_t i = 0;
		for (; *p == '&' && i < KVT_ARRAY_SIZE(ents); i++)
			if (!strncmp(p, ents[i].ent, strlen(ents[i].ent)))
				break;
		if (*p == '&' && i < KVT_ARRAY_SIZE(ents)) {
			out[o++] = ents[i].c;
			p += strlen(ents[i].ent);
		} else {
			out[o++] = *p++;
		}
	}
	out[o] = 0;
	*pos = b + strlen(close);
	return p < b ? -E2BIG : 0;
}

/* The continuation tokens one listing was given, to tell a server that hands back any
 * earlier one (A, B, A, B, ...: page 1 for ever) from one that moves on. Only a 64-bit
 * FNV-1a hash of each token is kept, in an open-addressing table at most half full (8 bytes
 * a slot): the tokens themselves may run to S3_MAX_LIST_TOKEN bytes each, and a server
 * handing out a new long one per empty page made the set grow by 16 KiB a page. Two
 * different tokens with the same hash (odds about 3 x 10^-8 over 10^6 pages; a server could
 * craft them, FNV is not keyed, but it could as well repeat a token) only make the second
 * look repeated: the listing ends early with -EPROTO, never silently shorter. */
struct tokset {
	uint64_t *slot; /* 0: free */
	size_t cap, n;
};

static uint64_t fnv1a(const char *p)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	for (; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	return h;
}

/* 1 if tok was seen before (or one with its hash), 0 if it is new (now remembered),
 * -ENOMEM. */
static int tokset_add(struct tokset *ts, const char *tok)
{
	if (2 * (ts->n + 1) > ts->cap) {
		size_t cap = ts->cap ? 2 * ts->cap : 64;
		uint64_t *slot = kvt__calloc(cap, sizeof(*slot));
		if (!slot)
			return -ENOMEM;
		for (size_t i = 0; i < ts->cap; i++) {
			if (!ts->slot[i])
				continue;
			size_t j = ts->slot[i] & (cap - 1);
			while (slot[j])
				j = (j + 1) & (cap - 1);
			slot[j] = ts->slot[i];
		}
		kvt__free(ts->slot);
		ts->slot = slot;
		ts->cap = cap;
	}
	uint64_t h = fnv1a(tok);
	h += !h; /* 0 marks a free slot */
	size_t j = h & (ts->cap - 1);
	for (; ts->slot[j]; j = (j + 1) & (ts->cap - 1))
		if (ts->slot[j] == h)
			return 1;
	ts->slot[j] = h;
	ts->n++;
	return 0;
}

static void tokset_free(struct tokset *ts)
{
	kvt__free(ts->slot);
}

/* s3.prefix goes into every object's URL as it is, so it may hold only characters a URL
 * path and a SigV4 canonical URI both take unescaped: letters, digits, '-', '_', '.', '~'
 * and '/', and no "." or ".." segment (libcurl removes those). A '#' cut the URL there (a
 * fragment) and a '?' began its query, so every key of such a store was one object:
 * reads served another key's bytes, and two tenants' prefixes could share it. */
static int check_prefix(const struct kvt_log *log, const char *p)
{
	if (strlen(p) + 2 * KVT_KEY_BYTES > S3_NAME_MAX) {
		KVT_ERR(log, "s3.prefix: %zu characters; with the 64 hex digits of a key an object "
			     "name would pass S3's %d-byte limit",
			strlen(p), S3_NAME_MAX);
		return -EINVAL;
	}
	const char *seg = p;
	for (const char *c = p;; c++) {
		if (*c == '/' || !*c) {
			size_t n = (size_t)(c - seg);
			if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.')) {
				KVT_ERR(log, "s3.prefix: a '.' or '..' segment (a URL would lose it)");
				return -EINVAL;
			}
			if (!*c)
				return 0;
			seg = c + 1;
			continue;
		}
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || strchr("-_.~", *c))) {
			KVT_ERR(log, "s3.prefix: character 0x%02x at %zu is not allowed (letters, "
				     "digits, '-', '_', '.', '~' and '/' only)",
				(unsigned)(unsigned char)*c, (size_t)(c - p));
			return -EINVAL;
		}
	}
}

/* Synchronous ListObjectsV2 under the prefix, page by page (recovery, `kvtier ls`). Runs
 * on the caller's thread with its own connection; the I/O thread is not involved. A page
 * we cannot read entry by entry, a 200 whose body is not a ListBucketResult with an
 * IsTruncated (an HTML page of a proxy, an <Error>: no <Contents> in it, so it read as the
 * last, empty page), or a listing that does not end (a token seen before, more than
 * SCAN_PAGES_MAX pages), is -EPROTO: never a silently shorter listing. Each page within
 * s3.timeout_ms and the whole listing within S3_LIST_TIMEOUTS times it, or the caller's
 * bound where that is longer (kvt__tier_list_ns), else -ETIMEDOUT:
 * past the caller's bound (store.sync_timeout_ms, src/tier_bounded.c) a listing left
 * running keeps the tier busy and its close waiting, so it must end by itself, also
 * against a server that answers every page in time with a new token and no entries. */
/* Longest continuation token followed (an opaque string of the server's: RGW's carry a key
 * name, up to 1 KiB, encoded; some servers' are longer). */
#define S3_MAX_LIST_TOKEN 16384
/* A whole listing's limit, in s3.timeout_ms (30 s by default, the caller's own
 * store.sync_timeout_ms, which raises it where longer); each page keeps the single
 * timeout within it. */
#define S3_LIST_TIMEOUTS 6

static int s3_scan(struct kvt_tier *t, kvt_scan_fn fn, void *arg)
{
	struct s3_state *s = t->state;
	CURL *e = curl_easy_init();
	if (!e)
		return -ENOMEM;
	struct membuf m = {0};
	struct tokset seen = {0};
	/* a name of ours is at most S3_NAME_MAX bytes; one that does not fit here (-E2BIG) is
	 * not ours (until 2026-12-06 the buffer held 1,023: with a prefix of the longest length
	 * check_prefix allows, every name of ours was skipped and the listing was empty) */
	char name[S3_NAME_MAX + 1], size[32];
	char *token = kvt__calloc(1, S3_MAX_LIST_TOKEN + 1);
	char *eprefix = curl_easy_escape(e, s->prefix, 0);
	size_t plen = strlen(s->prefix);
	int rc = eprefix && token ? 0 : -ENOMEM;
	bool stop = false;
	uint64_t list_end = kvt__now_ns() + s->list_ns;
	uint32_t page = 1;
	bool over = false; /* the whole listing's limit reached */
	for (; rc == 0 && !stop; page++) {
		uint64_t now = kvt__now_ns();
		/* under a millisecond left is none: CURLOPT_TIMEOUT_MS 0 would mean no limit */
		if (now + 1000000 > list_end) {
			rc = -ETIMEDOUT;
			over = true;
			break;
		}
		if (page > SCAN_PAGES_MAX) {
			KVT_WARN(&t->log,
				 "s3: listing %s: more than %u pages; taken as a server that does "
				 "not end the listing",
				 s->shown, SCAN_PAGES_MAX);
			rc = -EPROTO;
			break;
		}
		/* The query already in SigV4's canonical form: sorted, RFC 3986-encoded. */
		char *etok = token[0] ? curl_easy_escape(e, token, 0) : NULL;
		char *url = str_printf("%s?%s%s%slist-type=2&max-keys=1000&prefix=%s",
				       s->bucket_url, etok ? "continuation-token=" : "",
				       etok ? etok : "", etok ? "&" : "", eprefix);
		if (etok)
			curl_free(etok);
		if (!url) {
			rc = -ENOMEM;
			break;
		}
		m.len = 0;
		if (m.p) /* an empty 200 must not be parsed as the page before it */
			m.p[0] = 0;
		curl_easy_reset(e);
		curl_easy_setopt(e, CURLOPT_URL, url);
		curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
		no_lookup_wait(e);
		curl_easy_setopt(e, CURLOPT_AWS_SIGV4, s->sigv4);
		curl_easy_setopt(e, CURLOPT_USERNAME, s->cred.access_key);
		curl_easy_setopt(e, CURLOPT_PASSWORD, s->cred.secret_key);
		curl_easy_setopt(e, CURLOPT_HTTPHEADER, s->hdr_get);
		curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
				 (long)(KVT_MIN(s->timeout_ns, list_end - now) / 1000000));
		curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)s->connect_timeout_ms);
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, s->tls_verify ? 1L : 0L);
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, s->tls_verify ? 2L : 0L);
		if (s->ca_file)
			curl_easy_setopt(e, CURLOPT_CAINFO, s->ca_file);
		curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_mem);
		curl_easy_setopt(e, CURLOPT_WRITEDATA, &m);
		CURLcode cc = curl_easy_perform(e);
		kvt__free(url);
		long st = 0;
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &st);
		if (cc != CURLE_OK || st != 200 || !m.p) {
			rc = cc != CURLE_OK ? curl_errno(cc) : status_errno(st);
			if (rc == -ETIMEDOUT && kvt__now_ns() + 1000000 > list_end) {
				over = true; /* the whole listing's limit: logged below */
				break;
			}
			KVT_WARN(&t->log, "s3: listing %s: %s", s->shown,
				 cc != CURLE_OK ? curl_easy_strerror(cc) : "HTTP error");
			break;
		}
		/* Only a ListBucketResult that says whether it is the last page, and ends, is
		 * a page: anything else has no <Contents> and would end the listing as if
		 * complete. The end: a 200 whose connection closes early (HTTP/1.0, or no
		 * Content-Length) reaches here as a success, cut between entries - until
		 * 2026-12-06 a last page cut so lost its remaining entries without a word, and
		 * verify said "checked, 0 bad" over half the bucket (a review). */
		const char *p = m.p;
		char trunc[16] = "";
		if (!strstr(m.p, "<ListBucketResult") || !strstr(m.p, "</ListBucketResult>") ||
		    xml_field(&p, NULL, "IsTruncated", trunc, sizeof(trunc)) != 0 ||
		    (strcmp(trunc, "true") && strcmp(trunc, "false"))) {
			KVT_WARN(&t->log,
				 "s3: listing %s: page %u is not a whole ListBucketResult with "
				 "IsTruncated true or false",
				 s->shown, page);
			rc = -EPROTO;
			break;
		}
		const char *pos = m.p;
		for (;;) {
			const char *c = strstr(pos, "<Contents>");
			if (!c)
				break;
			const char *ce = strstr(c, "</Contents>");
			const char *sp = size;
			uint64_t bytes = 0;
			pos = c;
			int key_rc = ce ? xml_field(&pos, ce, "Key", name, sizeof(name)) : -1;
			bool ok = key_rc == 0 || key_rc == -E2BIG;
			pos = c;
			/* Every entry has a Key and a plain, non-negative Size: skipping one we
			 * cannot read would drop objects from the listing without a word. */
			if (!ok || xml_field(&pos, ce, "Size", size, sizeof(size)) < 0 ||
			    !parse_u64(&sp, size + strlen(size), &bytes) || *sp) {
				KVT_WARN(&t->log,
					 "s3: listing %s: page %u has an entry without a readable "
					 "Key and Size",
					 s->shown, page);
				rc = -EPROTO;
				break;
			}
			pos = ce;
			struct kvt_key key;
			const char *hex = name + plen;
			ok = key_rc == 0 && strlen(name) == plen + 2 * KVT_KEY_BYTES &&
			     !strncmp(name, s->prefix, plen) &&
			     kvt__key_from_lowerhex(hex, &key) == 0;
			if (ok && fn(arg, &key, bytes)) {
				stop = true;
				break;
			}
		}
		if (rc < 0 || stop)
			break;
		p = m.p;
		if (strcmp(trunc, "true"))
			break; /* the last page */
		/* "More to come" with no token, or with any token given before (A, B, A, ...),
		 * would end the listing short or list the same pages for ever: a server that
		 * cannot be followed is an error. */
		int seen_rc = -1;
		int tok_rc = xml_field(&p, NULL, "NextContinuationToken", token, S3_MAX_LIST_TOKEN + 1);
		if (tok_rc == -E2BIG) { /* sent cut, it would fail or, worse, list other pages */
			KVT_WARN(&t->log,
				 "s3: listing %s: continuation token longer than %d bytes (page %u)",
				 s->shown, S3_MAX_LIST_TOKEN, page);
			rc = -EPROTO;
			break;
		}
		if (tok_rc < 0 ||
		    !token[0] || (seen_rc = tokset_add(&seen, token)) != 0) {
			if (seen_rc == -ENOMEM) {
				rc = -ENOMEM;
				break;
			}
			KVT_WARN(&t->log,
				 "s3: listing %s: the server says there is more but gives no new "
				 "continuation token (page %u)",
				 s->shown, page);
			rc = -EPROTO;
			break;
		}
	}
	/* A single page's timeout was logged above; the whole listing's here, one line */
	if (over)
		KVT_WARN(&t->log,
			 "s3: listing %s: not done within %llu ms (the longer of %d x s3.timeout_ms "
			 "and store.sync_timeout_ms), given up after %u pages",
			 s->shown, (unsigned long long)(s->list_ns / 1000000), S3_LIST_TIMEOUTS,
			 page - 1);
	if (eprefix)
		curl_free(eprefix);
	kvt__free(token);
	tokset_free(&seen);
	kvt__free(m.p);
	curl_easy_cleanup(e);
	return rc;
}

static int check_bucket(struct s3_state *s, bool create)
{
	const struct kvt_log *log = &s->t->log;
	long st;
	int rc = blocking_request(s, "HEAD", s->bucket_url, &st);
	if (rc < 0) {
		/* Unreachable now: open anyway, every operation fails (a miss) until it is back. */
		KVT_WARN(log, "s3: endpoint not reachable at open; operations will fail until it "
			      "is");
		return 0;
	}
	if (st == 404 && create) {
		rc = blocking_request(s, "PUT", s->bucket_url, &st);
		if (rc < 0)
			return rc;
		if (st == 409) /* created meanwhile by someone else */
			st = 200;
		if (st >= 200 && st < 300)
			KVT_INFO(log, "s3: created bucket %s", s->shown);
	}
	if (st >= 200 && st < 300)
		return 0;
	if (st == 403 || st == 401) {
		KVT_ERR(log,
			"s3: access denied to bucket %s (HTTP %ld): wrong access key or "
			"secret, wrong region, or no permission",
			s->shown, st);
		return -EACCES;
	}
	if (st == 404) {
		KVT_ERR(log, "s3: bucket %s does not exist (%s)", s->shown,
			s->ro ? "a read-only open creates nothing" : "s3.create_bucket is off");
		return -ENOENT;
	}
	KVT_ERR(log, "s3: bucket %s: HTTP %ld", s->shown, st);
	return -EIO;
}

static void free_state(struct s3_state *s)
{
	if (s->multi)
		curl_multi_cleanup(s->multi);
	s->multi = NULL;
	for (uint32_t i = 0; i < s->npool; i++)
		curl_easy_cleanup(s->pool[i]);
	kvt__free(s->pool);
	curl_slist_free_all(s->hdr_get);
	curl_slist_free_all(s->hdr_put);
	kvt__free(s->base);
	kvt__free(s->bucket_url);
	kvt__free(s->shown);
	kvt__free(s->prefix);
	kvt__free(s->sigv4);
	kvt__s3_credentials_free(&s->cred);
	if (s->token_hdr) /* a session token is a credential too, while it lasts */
		explicit_bzero(s->token_hdr, strlen(s->token_hdr));
	kvt__free(s->token_hdr);
	kvt__free(s->ca_file);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->served_lock);
}

static int s3_open(struct kvt_tier *t, const struct kvt_config *cfg)
{
	struct s3_state *s = t->state;
	const struct kvt_log *log = &t->log;
	int rc;
	s->t = t;
	s->ro = kvt__cfg_bool(cfg, "store.read_only");
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK) {
		KVT_ERR(log, "s3: curl_global_init failed: %s", curl_easy_strerror(curl_init_rc));
		return -EIO;
	}
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->served_lock, NULL);

	const char *endpoint = kvt__cfg_str(cfg, "s3.endpoint");
	if (!*endpoint && getenv("KVTIER_S3_ENDPOINT"))
		endpoint = getenv("KVTIER_S3_ENDPOINT");
	const char *bucket = kvt__cfg_str(cfg, "s3.bucket");
	if (!*bucket && getenv("KVTIER_S3_BUCKET"))
		bucket = getenv("KVTIER_S3_BUCKET");
	const char *region = kvt__cfg_str(cfg, "s3.region");
	if (!*region)
		region = getenv("AWS_DEFAULT_REGION") ? getenv("AWS_DEFAULT_REGION")
			 : getenv("AWS_REGION")	      ? getenv("AWS_REGION")
						      : "us-east-1";
	if (!*endpoint || !*bucket) {
		KVT_ERR(log, "s3: no %s: set s3.%s (or KVTIER_S3_%s)",
			*endpoint ? "bucket" : "endpoint", *endpoint ? "bucket" : "endpoint",
			*endpoint ? "BUCKET" : "ENDPOINT");
		rc = -EINVAL;
		goto fail;
	}
	s->tls_verify = kvt__cfg_bool(cfg, "s3.tls_verify");
	s->sign_payload = kvt__cfg_bool(cfg, "s3.sign_payload");
	s->max_inflight = (uint32_t)kvt__cfg_u64(cfg, "s3.max_inflight");
	s->retries = (uint32_t)kvt__cfg_u64(cfg, "s3.retries");
	s->timeout_ns = kvt__cfg_u64(cfg, "s3.timeout_ms") * 1000000ULL;
	s->list_ns = kvt__tier_list_ns(cfg, s->timeout_ns, S3_LIST_TIMEOUTS);
	s->connect_timeout_ms = kvt__cfg_u64(cfg, "s3.connect_timeout_ms");
	s->rng = kvt__now_ns() | 1;
	if (!s->tls_verify)
		KVT_WARN(log, "s3: TLS certificate verification is off (s3.tls_verify = false)");
	const char *ca = kvt__cfg_str(cfg, "s3.ca_file");
	rc = -ENOMEM;
	if (*ca && !(s->ca_file = kvt__strdup(ca)))
		goto fail;
	if (!(s->prefix = kvt__strdup(kvt__cfg_str(cfg, "s3.prefix"))))
		goto fail;
	if ((rc = check_prefix(&t->log, s->prefix)) < 0)
		goto fail;
	rc = -ENOMEM;
	if (!(s->sigv4 = str_printf("aws:amz:%s:s3", region)))
		goto fail;
	rc =
	    build_urls(s, endpoint, bucket, !strcmp(kvt__cfg_str(cfg, "s3.addressing"), "virtual"));
	if (rc < 0)
		goto fail;
	if (strlen(s->base) + strlen(s->prefix) + 2 * KVT_KEY_BYTES >= S3_URL_MAX) {
		KVT_ERR(log, "s3: endpoint and bucket make object URLs of %zu bytes, more than %d",
			strlen(s->base) + strlen(s->prefix) + 2 * KVT_KEY_BYTES, S3_URL_MAX - 1);
		rc = -EINVAL;
		goto fail;
	}
	rc = kvt__s3_credentials_load(&t->log, cfg, &s->cred);
	if (rc < 0)
		goto fail;

	/* Headers shared by every request of a kind. curl_slist_append copies the strings. */
	rc = -ENOMEM;
	if (s->cred.session_token &&
	    !(s->token_hdr = str_printf("x-amz-security-token: %s", s->cred.session_token)))
		goto fail;
	const char *tok = s->token_hdr ? s->token_hdr : "";
	const char *get_hash = s->sign_payload ? "x-amz-content-sha256: " EMPTY_SHA256
					       : "x-amz-content-sha256: UNSIGNED-PAYLOAD";
	if (!(s->hdr_get = curl_slist_append(NULL, get_hash)) ||
	    (*tok && !curl_slist_append(s->hdr_get, tok)))
		goto fail;
	/* No "Expect:" override here: libcurl 7.88's SigV4 signs an emptied header it then
	 * does not send, and the signature no longer matches. */
	if (!(s->hdr_put = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD")) ||
	    (*tok && !curl_slist_append(s->hdr_put, tok)))
		goto fail;

	/* an inspection creates nothing: a missing bucket is "not a store" */
	rc = check_bucket(s, kvt__cfg_bool(cfg, "s3.create_bucket") && !s->ro);
	if (rc < 0)
		goto fail;

	rc = -ENOMEM;
	if (!(s->pool = kvt__calloc(s->max_inflight, sizeof(*s->pool))))
		goto fail;
	if (!(s->multi = curl_multi_init()))
		goto fail;
	curl_multi_setopt(s->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)s->max_inflight);
	curl_multi_setopt(s->multi, CURLMOPT_MAXCONNECTS, (long)s->max_inflight);
	rc = -pthread_create(&s->thread, NULL, io_thread, s);
	if (rc < 0) {
		KVT_ERR(log, "s3: cannot start the I/O thread: %s", strerror(-rc));
		goto fail;
	}
	s->thread_started = true;
	KVT_INFO(log, "s3: %s, prefix %s (region %s, up to %u requests in flight)", s->shown, s->prefix,
		 region, s->max_inflight);
	return 0;
fail:
	free_state(s);
	return rc;
}

static void s3_close(struct kvt_tier *t)
{
	struct s3_state *s = t->state;
	pthread_mutex_lock(&s->lock);
	s->closing = true;
	curl_multi_wakeup(s->multi);
	pthread_mutex_unlock(&s->lock);
	if (s->thread_started)
		pthread_join(s->thread, NULL);
	free_state(s);
}

const struct kvt_tier_ops kvt__tier_s3_ops = {
    .name = "s3",
    .version = 1,
    .state_size = sizeof(struct s3_state),
    .open = s3_open,
    .close = s3_close,
    .exists = s3_exists,
    .read = s3_read,
    .write = s3_write,
    .remove = s3_remove,
    .stats = s3_stats,
    .drop_corrupt = s3_drop_corrupt,
    .scan = s3_scan,
};
