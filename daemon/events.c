/*
 * events.c - kvtierd's KV event stream (docs/DAEMON.md, "KV events"): the store's events
 * (kvt_store_set_events) published on a ZeroMQ PUB socket as msgpack, in the envelope and
 * schema vLLM's own publisher uses, so a KV-aware router that follows vLLM can follow
 * kvtier: frames [topic, 8-byte big-endian batch sequence, payload], payload a map
 * {ts, events: [{type: "BlockStored"|"BlockRemoved", block_hashes, medium, ...}]} (and
 * {type: "AllBlocksCleared", medium} once per tier a CLEAR emptied), plus
 * kvtier's own keys (tier, bytes, reason, namespace) that vLLM's decoder ignores. A
 * ROUTER socket (daemon.events_replay) answers "from sequence N" with the batches still
 * buffered, then an end marker (sequence -1), as vLLM's does (pump_replays: a few at a
 * time, one replay per peer, a bounded number at once and the rest queued). Both endpoints are loopback or ipc:// unless
 * daemon.events_allow_remote: the stream names the blocks every tenant has cached.
 *
 * Why a queue and a thread: the store calls back with its locks held (the DRAM pool's), so
 * the callback only copies the event into a bounded ring; this thread encodes and sends.
 * A full ring drops the event and counts it (kvtier_events_dropped_total), so a stalled
 * publisher can never stall the store.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "config.h"
#include "engine.h"
#include "kvtierd.h"

#define EV_BATCH_MAX 256 /* events per published batch at most */
#define EV_ENDPOINT_MAX 256
#define EV_REPLAY_REQS_PER_PASS 4    /* replay requests read per pass of the thread */
#define EV_REPLAY_SENDS_PER_PASS 128 /* messages one replay sends per pass at most */
#define EV_REPLAY_HWM 256            /* messages queued for one replay peer at most */
#define EV_REPLAYS_MAX 16            /* replays in flight at once */
#define EV_REPLAY_WAIT_MAX 64        /* requests queued behind them at most */
#define EV_REPLAY_STALL_NS (5ull * 1000 * 1000 * 1000) /* unread this long: dropped */
#define EV_SEQ_END UINT64_MAX        /* -1: the replay is complete */
#define EV_SEQ_BUSY (UINT64_MAX - 1) /* -2: request refused (its peer's replay is running
				      * or queued, or the queue is full) */

struct replay_ent {
	uint64_t seq;
	size_t len;
	char *buf;
};

/* A replay in flight: the peer (its ROUTER routing id, at most 255 bytes) and where it is. */
struct replay_peer {
	uint8_t id[255];
	size_t id_len;
	uint64_t next;     /* the next batch it is sent */
	uint64_t end;      /* the first batch it is not sent: the stream's next when it started */
	uint64_t moved_ns; /* when it last took a message */
};

struct kvtd_events {
	struct kvtd_state *st;
	struct kvt_store *store;
	uint8_t ns_id[KVT_NS_ID_BYTES];
	char topic[80];
	char tier_name[KVT_MAX_TIERS][16]; /* copied: the store closes before this stops */
	void *zctx, *pub, *replay;
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	bool stop;
	struct kvt_event *ring;
	uint64_t cap, head, n; /* events waiting: ring[head .. head+n) mod cap */
	uint64_t seq;          /* next batch's sequence number */
	struct replay_ent *hist; /* the last hist_cap batches sent, for replay */
	uint64_t hist_cap;
	uint64_t hist_lo;             /* oldest batch still kept */
	uint64_t hist_bytes, hist_max; /* their bytes, and the bound on them */
	struct replay_peer peers[EV_REPLAYS_MAX]; /* replays in flight (events thread only) */
	int n_peers;
	struct replay_peer waiting[EV_REPLAY_WAIT_MAX]; /* requests queued, oldest first */
	int n_waiting;
	bool reqs_waiting; /* the last pass read as many requests as it may: more may wait */
};

/* Is the host of a tcp:// endpoint (ep + 6, up to its last ':') a loopback address,
 * 127.x.x.x or [::1]? Anything else ("*", 0.0.0.0, an interface name) may listen on the
 * network. No host names: ZeroMQ binds addresses and interface names only (tcp://localhost
 * fails to bind, "No such device"). */
static bool tcp_is_loopback(const char *ep)
{
	const char *host = ep + 6, *colon = strrchr(host, ':');
	char h[EV_ENDPOINT_MAX];
	if (!colon || colon == host)
		return false;
	snprintf(h, sizeof(h), "%.*s", (int)(colon - host), host);
	struct in_addr a4;
	if (inet_pton(AF_INET, h, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	return !strcmp(h, "[::1]");
}

int kvtd_events_check_endpoint(const char *ep, const char *what, bool allow_remote, char *err,
			       size_t errlen)
{
	size_t n = strlen(ep);
	if (n >= EV_ENDPOINT_MAX) {
		snprintf(err, errlen, "%s is %zu bytes long, at most %d", what, n,
			 EV_ENDPOINT_MAX - 1);
		return -EINVAL;
	}
	if (strncmp(ep, "tcp://", 6) && strncmp(ep, "ipc://", 6)) {
		snprintf(err, errlen, "%s '%.64s' is not tcp://ADDR:PORT or ipc://PATH", what, ep);
		return -EINVAL;
	}
	if (n == 6) {
		snprintf(err, errlen, "%s '%s' names no address", what, ep);
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)ep[i] <= ' ' || ep[i] == 0x7f) {
			snprintf(err, errlen, "%s contains a space or control character", what);
			return -EINVAL;
		}
	if (!allow_remote && !strncmp(ep, "tcp://", 6) && !tcp_is_loopback(ep)) {
		snprintf(err, errlen,
			 "%s '%.64s' is not loopback (127.x.x.x, [::1]) or ipc://: the events "
			 "name every tenant's cached blocks; daemon.events_allow_remote=true "
			 "allows it", what, ep);
		return -EINVAL;
	}
	return 0;
}

/* The store's callback: copy and return (its locks may be held). */
static void on_event(void *arg, const struct kvt_event *ev)
{
	struct kvtd_events *e = arg;
	pthread_mutex_lock(&e->mu);
	if (e->n == e->cap) {
		atomic_fetch_add(&e->st->events_dropped, 1);
	} else {
		e->ring[(e->head + e->n) % e->cap] = *ev;
		if (e->n++ == 0)
			pthread_cond_signal(&e->cond);
	}
	pthread_mutex_unlock(&e->mu);
}

static void pack_cstr(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str_with_body(pk, s, strlen(s));
}

static void pack_key(msgpack_packer *pk, const struct kvt_key *k)
{
	msgpack_pack_bin_with_body(pk, k->bytes, KVT_KEY_BYTES);
}

static const char *reason_name(uint32_t r)
{
	switch (r) {
	case KVT_REASON_REMOVED:
		return "removed";
	case KVT_REASON_EVICTED:
		return "evicted";
	case KVT_REASON_CORRUPT:
		return "corrupt";
	default:
		return "";
	}
}

static void pack_event(struct kvtd_events *e, msgpack_packer *pk, const struct kvt_event *ev)
{
	const char *medium = ev->tier >= 0 && ev->tier < KVT_MAX_TIERS ? e->tier_name[ev->tier] : "";
	if (ev->type == KVT__EVENT_CLEARED) { /* the tier holds nothing any more */
		msgpack_pack_map(pk, 4);
		pack_cstr(pk, "type");
		pack_cstr(pk, "AllBlocksCleared");
		pack_cstr(pk, "medium");
		pack_cstr(pk, medium);
		pack_cstr(pk, "tier");
		msgpack_pack_int(pk, ev->tier);
		pack_cstr(pk, "namespace");
		msgpack_pack_bin_with_body(pk, e->ns_id, KVT_NS_ID_BYTES);
		return;
	}
	bool stored = ev->type == KVT_EVENT_STORED;
	msgpack_pack_map(pk, stored ? 11 : 7);
	pack_cstr(pk, "type");
	pack_cstr(pk, stored ? "BlockStored" : "BlockRemoved");
	pack_cstr(pk, "block_hashes");
	msgpack_pack_array(pk, 1);
	pack_key(pk, &ev->key);
	if (stored) {
		pack_cstr(pk, "parent_block_hash");
		if (ev->has_parent)
			pack_key(pk, &ev->parent);
		else
			msgpack_pack_nil(pk);
		pack_cstr(pk, "token_ids"); /* a tier does not know them; the key stands for them */
		msgpack_pack_array(pk, 0);
		pack_cstr(pk, "block_size");
		msgpack_pack_uint32(pk, ev->n_tokens);
		pack_cstr(pk, "lora_id");
		msgpack_pack_nil(pk);
		pack_cstr(pk, "lora_name");
		msgpack_pack_nil(pk);
	}
	pack_cstr(pk, "medium");
	pack_cstr(pk, medium);
	/* kvtier's own keys */
	pack_cstr(pk, "tier");
	msgpack_pack_int(pk, ev->tier);
	pack_cstr(pk, "bytes");
	msgpack_pack_uint64(pk, ev->bytes);
	pack_cstr(pk, "namespace");
	msgpack_pack_bin_with_body(pk, e->ns_id, KVT_NS_ID_BYTES);
	if (!stored) {
		pack_cstr(pk, "reason");
		pack_cstr(pk, reason_name(ev->reason));
	}
}

static void seq_be(uint64_t seq, uint8_t out[8])
{
	for (int i = 0; i < 8; i++)
		out[i] = (uint8_t)(seq >> (56 - 8 * i));
}

static void publish(struct kvtd_events *e, const struct kvt_event *evs, size_t n)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	msgpack_pack_map(&pk, 2);
	pack_cstr(&pk, "ts");
	msgpack_pack_double(&pk, (double)ts.tv_sec + ts.tv_nsec / 1e9);
	pack_cstr(&pk, "events");
	msgpack_pack_array(&pk, (uint32_t)n);
	for (size_t i = 0; i < n; i++)
		pack_event(e, &pk, &evs[i]);
	uint64_t seq = e->seq++;
	uint8_t sq[8];
	seq_be(seq, sq);
	/* PUB never blocks: past its high-water mark a subscriber that cannot keep up loses
	 * messages and sees a gap in the sequence (it may ask for a replay). */
	zmq_send(e->pub, e->topic, strlen(e->topic), ZMQ_SNDMORE);
	zmq_send(e->pub, sq, 8, ZMQ_SNDMORE);
	zmq_send(e->pub, sb.data, sb.size, 0);
	atomic_fetch_add(&e->st->events_published, n);
	atomic_fetch_add(&e->st->event_batches, 1);
	if (e->hist_cap) {
		/* keep at most hist_cap batches and hist_max bytes: the oldest go first */
		while (e->hist_lo < seq &&
		       (seq - e->hist_lo >= e->hist_cap || e->hist_bytes + sb.size > e->hist_max)) {
			struct replay_ent *o = &e->hist[e->hist_lo % e->hist_cap];
			e->hist_bytes -= o->len;
			free(o->buf);
			o->buf = NULL;
			o->len = 0;
			e->hist_lo++;
		}
		struct replay_ent *r = &e->hist[seq % e->hist_cap];
		r->seq = seq;
		r->len = sb.size;
		r->buf = msgpack_sbuffer_release(&sb);
		e->hist_bytes += r->len;
	}
	msgpack_sbuffer_destroy(&sb);
}

/* Sends [id, "", seq, payload] to a replay peer without waiting: 0, or -1 with errno
 * EAGAIN (its queue is full) or EHOSTUNREACH (it is gone), nothing queued then. With
 * ZMQ_ROUTER_MANDATORY the ROUTER decides on the first frame, for the whole message (its
 * high-water mark counts messages), so a message is never cut. */
static int send_to_peer(struct kvtd_events *e, const void *id, size_t id_len, uint64_t seq,
			const void *buf, size_t len)
{
	uint8_t sq[8];
	seq_be(seq, sq);
	if (zmq_send(e->replay, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
		return -1;
	zmq_send(e->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(e->replay, sq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
	zmq_send(e->replay, buf, len, ZMQ_DONTWAIT);
	return 0;
}

/* Is the peer with routing id (id, id_len) among the n replays at r? */
static bool peer_in(const struct replay_peer *r, int n, const void *id, size_t id_len)
{
	for (int i = 0; i < n; i++)
		if (r[i].id_len == id_len && !memcmp(r[i].id, id, id_len))
			return true;
	return false;
}

/* Reads one replay request, [identity, "", start sequence (8 bytes, big-endian)], if one
 * waits (false if none): starts that peer's replay (pump_replays sends it), or queues it
 * while EV_REPLAYS_MAX run (pump_replays starts it when one ends). It is refused with the
 * busy marker (-2, best effort: a peer whose queue is full does not get it) only when the
 * peer already has a replay running or queued, or EV_REPLAY_WAIT_MAX wait: vLLM's
 * subscribers know -1 and batches, not -2, so a peer that asks once is served, only
 * later. Until 2026-12-04 the 17th peer to ask while 16 ran was refused. */
static bool take_request(struct kvtd_events *e, uint64_t now)
{
	zmq_msg_t part[3];
	int np = 0, more = 1;
	bool got = false;
	while (more) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, e->replay, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			break;
		}
		got = true;
		more = zmq_msg_more(&m);
		if (np < 3)
			part[np++] = m;
		else
			zmq_msg_close(&m);
	}
	if (np == 3 && zmq_msg_size(&part[2]) == 8 &&
	    zmq_msg_size(&part[0]) <= sizeof(e->peers[0].id)) {
		const uint8_t *p = zmq_msg_data(&part[2]);
		const void *id = zmq_msg_data(&part[0]);
		size_t id_len = zmq_msg_size(&part[0]);
		uint64_t from = 0;
		for (int i = 0; i < 8; i++)
			from = from << 8 | p[i];
		struct replay_peer *r = NULL;
		if (peer_in(e->peers, e->n_peers, id, id_len) ||
		    peer_in(e->waiting, e->n_waiting, id, id_len))
			r = NULL;
		else if (e->n_peers < EV_REPLAYS_MAX)
			r = &e->peers[e->n_peers++];
		else if (e->n_waiting < EV_REPLAY_WAIT_MAX)
			r = &e->waiting[e->n_waiting++];
		if (r) {
			memcpy(r->id, id, id_len);
			r->id_len = id_len;
			r->next = from;
			r->end = e->seq; /* a queued one's is set again when it starts */
			r->moved_ns = now;
		} else {
			send_to_peer(e, id, id_len, EV_SEQ_BUSY, "", 0);
		}
	}
	for (int i = 0; i < np; i++)
		zmq_msg_close(&part[i]);
	return got;
}

/*
 * Sends each replay in flight its next batches, EV_REPLAY_SENDS_PER_PASS at most per pass,
 * then its end marker once it has sent what the buffer held when it started (later
 * batches reach the peer on the live stream). That end keeps every replay finite: one that
 * followed the stream's head, to a peer reading slower than batches were published, never
 * ended and held its place for good, and with queued requests behind it (found by review).
 *
 * Why this way: a replay used to be queued whole, at once, for each request, into a ROUTER
 * whose high-water mark held four whole buffers per peer (it counts messages, not
 * frames), and every waiting request was served before the next batch was published. A
 * peer that asked often and never read held several copies of the buffer in the daemon,
 * and a flood of requests stopped the stream. Now the ROUTER is ZMQ_ROUTER_MANDATORY with
 * a small high-water mark (EV_REPLAY_HWM) and every send is ZMQ_DONTWAIT: a peer that
 * does not read makes the send fail with EAGAIN, and its replay waits at that batch
 * (resumed on a later pass), so what the daemon holds for a peer is bounded by the mark,
 * and a replay longer than the mark still arrives whole. One replay per peer (routing id):
 * a request while its replay runs or waits is refused (take_request), not served again,
 * and one that finds EV_REPLAYS_MAX running waits for a place, oldest first. A replay
 * ends at its end marker, when its peer is gone (EHOSTUNREACH), or when its peer took
 * nothing for EV_REPLAY_STALL_NS (no end marker then: the peer may ask again), so a peer
 * that never reads cannot hold one of the EV_REPLAYS_MAX places for good. Batches dropped
 * from the buffer meanwhile are skipped (a gap the peer sees).
 */
static void pump_replays(struct kvtd_events *e, uint64_t now)
{
	for (int i = 0; i < e->n_peers;) {
		struct replay_peer *p = &e->peers[i];
		bool done = false;
		for (int k = 0; k < EV_REPLAY_SENDS_PER_PASS && !done; k++) {
			if (p->next < e->hist_lo)
				p->next = e->hist_lo;
			bool end = p->next >= p->end;
			const struct replay_ent *r = end ? NULL : &e->hist[p->next % e->hist_cap];
			if (send_to_peer(e, p->id, p->id_len, end ? EV_SEQ_END : p->next,
					 end ? "" : r->buf, end ? 0 : r->len) < 0) {
				done = errno != EAGAIN || now - p->moved_ns > EV_REPLAY_STALL_NS;
				break;
			}
			p->moved_ns = now;
			if (end)
				done = true;
			else
				p->next++;
		}
		if (done)
			*p = e->peers[--e->n_peers];
		else
			i++;
	}
	/* places freed: the oldest queued requests start, their stall clock with them */
	int k = 0;
	for (; k < e->n_waiting && e->n_peers < EV_REPLAYS_MAX; k++) {
		e->peers[e->n_peers] = e->waiting[k];
		e->peers[e->n_peers].end = e->seq;
		e->peers[e->n_peers++].moved_ns = now;
	}
	if (k) {
		memmove(e->waiting, e->waiting + k, (size_t)(e->n_waiting - k) * sizeof(*e->waiting));
		e->n_waiting -= k;
	}
}

static void *events_main(void *arg)
{
	struct kvtd_events *e = arg;
	struct kvt_event *batch = malloc(EV_BATCH_MAX * sizeof(*batch));
	for (;;) {
		pthread_mutex_lock(&e->mu);
		if (e->n == 0 && !e->stop) {
			struct timespec dl;
			clock_gettime(CLOCK_REALTIME, &dl);
			/* wake to serve replay requests; soon while replays are in flight (a
			 * peer's queue drains without a signal here) or requests may wait */
			bool soon = e->n_peers || e->n_waiting || e->reqs_waiting;
			dl.tv_nsec += (soon ? 1 : 20) * 1000 * 1000;
			if (dl.tv_nsec >= 1000000000) {
				dl.tv_sec++;
				dl.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&e->cond, &e->mu, &dl);
		}
		size_t n = 0;
		while (e->n && n < EV_BATCH_MAX && batch) {
			batch[n++] = e->ring[e->head];
			e->head = (e->head + 1) % e->cap;
			e->n--;
		}
		bool stop = e->stop && e->n == 0;
		pthread_mutex_unlock(&e->mu);
		if (n)
			publish(e, batch, n);
		if (e->replay) {
			/* a bounded amount of replay work per pass: publishing never waits
			 * behind a flood of requests (pump_replays) */
			uint64_t now = kvt__now_ns();
			int k = 0;
			while (k < EV_REPLAY_REQS_PER_PASS && take_request(e, now))
				k++;
			e->reqs_waiting = k == EV_REPLAY_REQS_PER_PASS;
			pump_replays(e, now);
		}
		if (stop || !batch)
			break;
	}
	free(batch);
	return NULL;
}

static int bind_ep(void *sock, const char *ep, const char *what)
{
	int one = 1;
	if (!strncmp(ep, "tcp://[", 7)) /* an IPv6 address: ZeroMQ binds IPv4 ones only else */
		zmq_setsockopt(sock, ZMQ_IPV6, &one, sizeof(one));
	if (zmq_bind(sock, ep) == 0) {
		/* ZeroMQ has no access control of its own: on a loopback port every local user
		 * can subscribe (or ask for the replay) and learn which blocks are cached - the
		 * probe the socket's 0600 mode keeps other users from. An ipc:// path has the
		 * file's mode. */
		if (!strncmp(ep, "tcp://", 6))
			fprintf(stderr, "kvtierd: %s %s is open to every local user (tcp://); "
					"ipc://PATH keeps it to this one\n",
				what, ep);
		return 0;
	}
	fprintf(stderr, "kvtierd: cannot bind %s %s: %s\n", what, ep, zmq_strerror(zmq_errno()));
	return -EINVAL;
}

int kvtd_events_start(const struct kvt_config *cfg, struct kvtd_state *st,
		      struct kvtd_events **out)
{
	const char *ep = kvt__cfg_str(cfg, "daemon.events");
	const char *rep = kvt__cfg_str(cfg, "daemon.events_replay");
	char err[300];
	bool remote = kvt__cfg_bool(cfg, "daemon.events_allow_remote");
	*out = NULL;
	const char *topic = kvt__cfg_str(cfg, "daemon.events_topic");
	if (strlen(topic) >= sizeof(((struct kvtd_events *)0)->topic)) {
		fprintf(stderr, "kvtierd: daemon.events_topic is %zu bytes long, at most %zu\n",
			strlen(topic), sizeof(((struct kvtd_events *)0)->topic) - 1);
		return -EINVAL;
	}
	if (!ep[0]) {
		if (rep[0]) {
			fprintf(stderr, "kvtierd: daemon.events_replay is set but daemon.events is "
					"not\n");
			return -EINVAL;
		}
		return 0;
	}
	if (kvtd_events_check_endpoint(ep, "daemon.events", remote, err, sizeof(err)) < 0 ||
	    (rep[0] && kvtd_events_check_endpoint(rep, "daemon.events_replay", remote, err,
						  sizeof(err)) < 0)) {
		fprintf(stderr, "kvtierd: %s\n", err);
		return -EINVAL;
	}
	struct kvtd_events *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->st = st;
	e->store = st->store;
	memcpy(e->ns_id, kvt_store_ns_id(st->store), KVT_NS_ID_BYTES);
	for (int i = 0; i < kvt_store_tier_count(st->store) && i < KVT_MAX_TIERS; i++)
		snprintf(e->tier_name[i], sizeof(e->tier_name[i]), "%s",
			 kvt_store_tier_name(st->store, i));
	snprintf(e->topic, sizeof(e->topic), "%s", topic);
	e->cap = kvt__cfg_u64(cfg, "daemon.events_queue");
	e->hist_cap = rep[0] ? kvt__cfg_u64(cfg, "daemon.events_buffer") : 0;
	e->hist_max = kvt__cfg_u64(cfg, "daemon.events_buffer_bytes");
	e->ring = calloc(e->cap, sizeof(*e->ring));
	e->hist = e->hist_cap ? calloc(e->hist_cap, sizeof(*e->hist)) : NULL;
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cond, NULL);
	e->zctx = zmq_ctx_new();
	int rc = -ENOMEM;
	if (!e->ring || (e->hist_cap && !e->hist) || !e->zctx)
		goto fail;
	e->pub = zmq_socket(e->zctx, ZMQ_PUB);
	int linger = 1000, hwm = 100000;
	zmq_setsockopt(e->pub, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(e->pub, ZMQ_SNDHWM, &hwm, sizeof(hwm));
	if ((rc = bind_ep(e->pub, ep, "daemon.events")) < 0)
		goto fail;
	if (rep[0]) {
		e->replay = zmq_socket(e->zctx, ZMQ_ROUTER);
		zmq_setsockopt(e->replay, ZMQ_LINGER, &linger, sizeof(linger));
		/* A plain ROUTER drops what it cannot queue for a peer, silently; a mandatory
		 * one fails the send (EAGAIN), never blocking (timeout 0), so pump_replays
		 * resumes there: a replay longer than the mark arrives whole, and a peer that
		 * does not read holds EV_REPLAY_HWM messages at most. */
		int one = 1, zero = 0, rhwm = EV_REPLAY_HWM;
		zmq_setsockopt(e->replay, ZMQ_ROUTER_MANDATORY, &one, sizeof(one));
		zmq_setsockopt(e->replay, ZMQ_SNDTIMEO, &zero, sizeof(zero));
		zmq_setsockopt(e->replay, ZMQ_SNDHWM, &rhwm, sizeof(rhwm));
		if ((rc = bind_ep(e->replay, rep, "daemon.events_replay")) < 0)
			goto fail;
	}
	if (pthread_create(&e->th, NULL, events_main, e)) {
		rc = -EAGAIN;
		goto fail;
	}
	kvt_store_set_events(st->store, on_event, e);
	*out = e;
	return 0;
fail:
	if (e->pub)
		zmq_close(e->pub);
	if (e->replay)
		zmq_close(e->replay);
	if (e->zctx)
		zmq_ctx_term(e->zctx);
	free(e->ring);
	free(e->hist);
	free(e);
	return rc;
}

void kvtd_events_stop(struct kvtd_events *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->mu);
	e->stop = true;
	pthread_cond_signal(&e->cond);
	pthread_mutex_unlock(&e->mu);
	pthread_join(e->th, NULL);
	zmq_close(e->pub);
	if (e->replay)
		zmq_close(e->replay);
	zmq_ctx_term(e->zctx);
	for (uint64_t i = 0; i < e->hist_cap; i++)
		free(e->hist[i].buf);
	free(e->hist);
	free(e->ring);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cond);
	free(e);
}
