/*
 * daemon_client.h - the client side of kvtierd (store.daemon=PATH). Why: kvt_store_open
 * returns a store whose every public call is forwarded to the node daemon, so engines use
 * one shared cache with the library API unchanged. src/engine*.c dispatch to these with
 * one line at the top of each public function (when s->client is set).
 */
#ifndef KVT_DAEMON_CLIENT_H
#define KVT_DAEMON_CLIENT_H

#include <stdbool.h>

#include "kvtier.h"

struct kvt_client;
struct kvt_log;

/* store.daemon is set in cfg. */
bool kvt__client_wanted(const struct kvt_config *cfg);
/* Attach to the daemon named by store.daemon and return a client-mode store
 * (kvt__store_new_client). -ECONNREFUSED/-ENOENT no daemon, -EINVAL namespace or geometry
 * differs from the daemon's (logged), -ETIMEDOUT. */
int kvt__client_open(const struct kvt_config *cfg, struct kvt_store **out);

/* engine.c: a store that is only a shell around c (every call dispatches to c). */
int kvt__store_new_client(struct kvt_client *c, const struct kvt_log *log,
			  struct kvt_store **out);

/* engine.c: the client of a client-mode store, NULL for an in-process store. */
struct kvt_client *kvt__store_client(struct kvt_store *s);

void kvt__client_close(struct kvt_client *c);
const struct kvt_geometry *kvt__client_geometry(const struct kvt_client *c);
const uint8_t *kvt__client_ns_id(const struct kvt_client *c);
int kvt__client_tier_count(const struct kvt_client *c);
const char *kvt__client_tier_name(const struct kvt_client *c, int tier);
int kvt__client_fd(const struct kvt_client *c);
int kvt__client_poll(struct kvt_client *c, int timeout_ms);

int kvt__client_put(struct kvt_client *c, const struct kvt_key *key, const struct kvt_key *parent,
		    uint32_t n_tokens, const void *buf, size_t len, kvt_cb cb, void *arg);
int kvt__client_lookup(struct kvt_client *c, const struct kvt_key *keys, size_t n, int8_t *tiers,
		       kvt_cb cb, void *arg);
int kvt__client_get(struct kvt_client *c, const struct kvt_key *key, const struct kvt_key *parent,
		    uint32_t layer_begin, uint32_t layer_end, void *buf, size_t len, kvt_cb cb,
		    void *arg);
int kvt__client_prefetch(struct kvt_client *c, const struct kvt_key *keys, size_t n,
			 uint64_t deadline_ns, kvt_cb cb, void *arg);
int kvt__client_remove(struct kvt_client *c, const struct kvt_key *key, kvt_cb cb, void *arg);
int kvt__client_flush(struct kvt_client *c, kvt_cb cb, void *arg);
int kvt__client_stats(struct kvt_client *c, struct kvt_stats *out);

/* The *_sync wrappers: run on the calling thread, never through the poll queue. A put's
 * and a get's by_ns (kvt__now_ns; 0: none) is the call's own deadline: it returns by then
 * with -ETIME (a get: -ENOENT with cause -ETIME) whatever store.daemon_timeout_ms is - the
 * waits for earlier removes and for the connection included; the connection is dropped
 * when an exchange is cut (the next call reconnects), and the daemon is not marked down. */
int kvt__client_put_sync(struct kvt_client *c, const struct kvt_key *key,
			 const struct kvt_key *parent, uint32_t n_tokens, const void *buf,
			 size_t len, uint64_t by_ns);
/* by_ns as a put's (0: store.daemon_timeout_ms only) */
int kvt__client_lookup_sync(struct kvt_client *c, const struct kvt_key *keys, size_t n,
			    int8_t *tiers, uint64_t by_ns, struct kvt_result *res);
/* parent (may be NULL): the chunk before key in its chain (a rows load's keys[i-1]), which
 * the daemon links a promotion of key to in its DRAM (a daemon from before 2026-12-06
 * ignores it). */
int kvt__client_get_sync(struct kvt_client *c, const struct kvt_key *key,
			 const struct kvt_key *parent, uint32_t layer_begin, uint32_t layer_end,
			 void *buf, size_t len, uint64_t by_ns, struct kvt_result *res);
int kvt__client_prefetch_sync(struct kvt_client *c, const struct kvt_key *keys, size_t n,
			      uint64_t deadline_ns);
int kvt__client_remove_sync(struct kvt_client *c, const struct kvt_key *key);
int kvt__client_flush_sync(struct kvt_client *c);

/* The device layer's load through the daemon: pin key's slot (GET_PIN; the daemon promotes
 * the chunk into DRAM first), check the whole object in the shared pool (header and every
 * layer CRC: a client wrote it) and keep it pinned for the scatter until kvt__client_unpin.
 * 0; -ENOENT miss; -ENOTSUP no shared pool (or the daemon could not pin: the caller falls
 * back to a get); -EBADMSG; other -errno. Blocks on the daemon. */
struct kvt_client_pin {
	const void *obj;  /* the object in the pool, read-only */
	uint64_t object_bytes;
	uint32_t n_tokens;
	int tier;
	int32_t slot;
	uint32_t lease;
	uint64_t gen; /* the connection that holds the pin */
	uint64_t drops;		/* the client's dropped connections when it was taken */
	uint64_t held_until_ns; /* kvt__now_ns() before which the daemon keeps it pinned */
};
int kvt__client_pin(struct kvt_client *c, const struct kvt_key *key, struct kvt_client_pin *p);
/* Give the pin back. 0 only when the daemon confirms the slot stayed pinned until now, so
 * every byte read from it was the object's; -ETIMEDOUT the pin's lease ran out, -ECONNRESET
 * its connection dropped: what was read may have been overwritten. */
int kvt__client_unpin(struct kvt_client *c, const struct kvt_client_pin *p);
/* True while the pin is certainly still held - its lease has not run out (a daemon that
 * does not say its lease length: never) and this client has not dropped its connection -
 * so a copy out of its slot that ended before this call read the object. Lock-free: for
 * the device threads that mark a load's layers ready (src/device_store.c). False does not
 * mean lost: the UNPIN decides. */
bool kvt__client_pin_holds(struct kvt_client *c, const struct kvt_client_pin *p);

/* Tensor-parallel commit through the daemon (src/device_store.c; KVTD_TP_* in
 * src/daemon_proto.h). Reserve: every rank of key gets the same slot; claimed[h - h0] = 1
 * for the heads of [h0, h1) this call claimed (to gather into *obj, object layout),
 * *missing = heads not yet written. 0, 1 stored already (nothing reserved), -ENOTSUP no
 * writable pool, < 0. Written: after the gather (failed: it did not complete); heads still
 * missing (0: published) or < 0 (the object was cancelled; also when the connection of
 * the reserve, *gen, is gone). Both block on the daemon. */
int kvt__client_tp_reserve(struct kvt_client *c, const struct kvt_key *key,
			   const struct kvt_key *parent, uint32_t n_tokens, uint32_t h0, uint32_t h1,
			   uint8_t *claimed, uint32_t *missing, void **obj, int32_t *slot,
			   uint64_t *gen);
int kvt__client_tp_written(struct kvt_client *c, const struct kvt_key *key, int32_t slot,
			   uint32_t h0, uint32_t h1, bool failed, uint64_t gen);
/* Queue a completion for kvt_poll from any thread (kvt__store_complete of a client store). */
int kvt__client_complete(struct kvt_client *c, kvt_cb cb, void *arg, const struct kvt_result *res);

/* Clear the daemon's store (KVTD_CLEAR), in as many calls as it takes (each within the
 * store's daemon timeout): *removed = objects removed. */
int kvt__client_clear_sync(struct kvt_client *c, uint64_t *removed);

/* The daemon's own state (kvtier status --daemon, tests). */
struct kvtd_status;
int kvt__client_status(struct kvt_client *c, struct kvtd_status *out);

#endif
