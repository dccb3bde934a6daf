/*
 * events.c - kvtierd's KV event stream (docs/DAEMON.md, "KV events"): the store's events
 * (kvt_store_set_events) published on a ZeroMQ PUB socket as msgpack, in the envelope and
 * schema vLLM's own publisher uses, so a KV-aware router that follows vLLM can follow
 * kvtier: frames [topic, 8-byte big-endian batch sequence, payload], payload a map
 * {ts, events: [{type: "BlockStored"|"BlockRemoved", block_hashes, medium, ...}]} (and
 * {type: "AllBlocksCleared", medium} once per tier a CLEAR emptied), plus
 * kvtier's own keys (tier, bytes, reason, namespace) that vLLM's decoder ignores. A
 * ROUTER socket (daemon.events_replay) answers "from sequence N" with the batches still
 * buffered, then an end marker (sequence -1), as vLLM's does.
 *
 * Why a queue and a thread: the store calls back with its locks held (the DRAM pool's), so
 * the callback only copies the event into a bounded ring; this thread encodes and sends.
 * A full ring drops the event and counts it (kvtier_events_dropped_total), so a stalled
 * publisher can never stall the store.
 */
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

struct replay_ent {
	uint64_t seq;
	size_t len;
	char *buf;
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
};

int kvtd_events_check_endpoint(const char *ep, const char *what, char *err, size_t errlen)
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

/* One replay request: [identity, "", start sequence (8 bytes, big-endian)]. */
static void serve_replay(struct kvtd_events *e)
{
	zmq_msg_t part[3];
	int np = 0, more = 1;
	while (more) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, e->replay, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			break;
		}
		more = zmq_msg_more(&m);
		if (np < 3)
			part[np++] = m;
		else
			zmq_msg_close(&m);
	}
	if (np == 3 && zmq_msg_size(&part[2]) == 8) {
		const uint8_t *p = zmq_msg_data(&part[2]);
		uint64_t from = 0;
		for (int i = 0; i < 8; i++)
			from = from << 8 | p[i];
		uint64_t lo = e->hist_lo;
		for (uint64_t s = from > lo ? from : lo; s < e->seq; s++) {
			struct replay_ent *r = &e->hist[s % e->hist_cap];
			uint8_t sq[8];
			seq_be(s, sq);
			zmq_send(e->replay, zmq_msg_data(&part[0]), zmq_msg_size(&part[0]),
				 ZMQ_SNDMORE);
			zmq_send(e->replay, "", 0, ZMQ_SNDMORE);
			zmq_send(e->replay, sq, 8, ZMQ_SNDMORE);
			zmq_send(e->replay, r->buf, r->len, 0);
		}
		uint8_t end[8];
		memset(end, 0xff, sizeof(end)); /* -1: nothing more */
		zmq_send(e->replay, zmq_msg_data(&part[0]), zmq_msg_size(&part[0]), ZMQ_SNDMORE);
		zmq_send(e->replay, "", 0, ZMQ_SNDMORE);
		zmq_send(e->replay, end, 8, ZMQ_SNDMORE);
		zmq_send(e->replay, "", 0, 0);
	}
	for (int i = 0; i < np; i++)
		zmq_msg_close(&part[i]);
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
			dl.tv_nsec += 20 * 1000 * 1000; /* wake to serve replay requests */
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
			zmq_pollitem_t pi = {.socket = e->replay, .events = ZMQ_POLLIN};
			while (zmq_poll(&pi, 1, 0) > 0 && (pi.revents & ZMQ_POLLIN))
				serve_replay(e);
		}
		if (stop || !batch)
			break;
	}
	free(batch);
	return NULL;
}

static int bind_ep(void *sock, const char *ep, const char *what)
{
	if (zmq_bind(sock, ep) == 0)
		return 0;
	fprintf(stderr, "kvtierd: cannot bind %s %s: %s\n", what, ep, zmq_strerror(zmq_errno()));
	return -EINVAL;
}

int kvtd_events_start(const struct kvt_config *cfg, struct kvtd_state *st,
		      struct kvtd_events **out)
{
	const char *ep = kvt__cfg_str(cfg, "daemon.events");
	const char *rep = kvt__cfg_str(cfg, "daemon.events_replay");
	char err[160];
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
	if (kvtd_events_check_endpoint(ep, "daemon.events", err, sizeof(err)) < 0 ||
	    (rep[0] && kvtd_events_check_endpoint(rep, "daemon.events_replay", err,
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
		/* A ROUTER drops what it cannot queue for a peer, silently: one replay must fit,
		 * every buffered batch plus the end marker (the default of 1000 messages lost
		 * batches and the end of a replay of more). */
		int rhwm = (int)KVT_MIN(e->hist_cap * 4 + 16, (uint64_t)INT32_MAX);
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
