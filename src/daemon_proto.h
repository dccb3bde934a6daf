/*
 * daemon_proto.h - the wire protocol between kvtierd and its clients (docs/DAEMON.md).
 * Why a header of its own: the client (src/daemon_client.c), the daemon (daemon/) and the
 * protocol fuzz target share one definition, and one validator that every length and
 * offset from the wire goes through before use.
 *
 * Transport: a SOCK_SEQPACKET Unix socket (message boundaries kept, so a message is
 * exactly one fixed-size struct or it is a protocol error). Payload never crosses the
 * socket: each connection has one shared region (a memfd the client creates and passes
 * with SCM_RIGHTS in HELLO), and requests name [off, off+len) inside it. One request is
 * in flight per connection; the daemon answers each with one reply.
 */
#ifndef KVT_DAEMON_PROTO_H
#define KVT_DAEMON_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

#define KVTD_MAGIC 0x4b565444u /* "KVTD" */
#define KVTD_VERSION 3 /* 3: leases (kvtd_req.lease, kvtd_rep.lease), TP commit, CLEAR */
/* A client's shared region: at least this, at most this plus the largest chunk payload. */
#define KVTD_SHM_MIN (4u << 20)
#define KVTD_SHM_MAX_EXTRA (4u << 20)
#define KVTD_MAX_TIER_NAME 16

enum kvtd_op {
	KVTD_HELLO = 1,    /* fd attached; ns_id = the client's namespace; reply: info in shm */
	KVTD_PUT = 2,      /* key, parent?, n_tokens, payload at [off, off+len) */
	KVTD_GET = 3,      /* key, layer range; read into [off, off+len) */
	KVTD_LOOKUP = 4,   /* n keys at off; tiers (n bytes) written at off + 32n */
	KVTD_PREFETCH = 5, /* n keys at off; deadline_ns */
	KVTD_REMOVE = 6,   /* key */
	KVTD_FLUSH = 7,
	KVTD_STATS = 8,  /* struct kvt_stats written at off */
	KVTD_STATUS = 9, /* struct kvtd_status written at off */
	/* With the daemon's DRAM pool mapped (HELLO passed its fd back): pin the slot of key
	 * (promoting it into DRAM if needed); reply: slot, slot_off, res.tier, res.n_tokens. The
	 * client copies the object's layers out of the pool itself, then sends UNPIN. */
	KVTD_GET_PIN = 10, /* key */
	KVTD_UNPIN = 11,   /* n = the slot, lease = the lease a GET_PIN of this connection returned */
	/* Pins and reservations are leases (daemon.lease_ms), each with an id of its own
	 * (rep.lease, never 0): past it the daemon lets go of them (a pin: released; a
	 * reservation: its key given back unpublished, its slot quarantined until the client
	 * process is gone, since it may still write there) and the late UNPIN / PUT_COMMIT,
	 * which must name the same lease, is answered -ETIMEDOUT: the bytes copied out of that
	 * slot may have been overwritten, the put was not published. An UNPIN or PUT_COMMIT
	 * names slot and lease, so a late one can never end a newer lease on the same slot. */
	/* With the pool mapped writable (info.pool_writable): reserve a slot for key (parent?,
	 * n_tokens); reply: slot, slot_off, res.bytes = object bytes; status 1: already stored,
	 * nothing reserved. The client encodes the object into the slot, then PUT_COMMIT; the
	 * daemon checks its header and publishes it (a connection that goes first gives its
	 * reservations back unpublished). */
	KVTD_PUT_RESERVE = 12,
	KVTD_PUT_COMMIT = 13, /* n = the slot, lease = the lease PUT_RESERVE returned */
	/* Tensor-parallel commit (daemon/tp_commit.c): ranks in separate processes write one
	 * object. [layer_begin, layer_end) carries the rank's head range [h0, h1) here.
	 * TP_RESERVE: key, parent?, n_tokens; every rank of the object gets the SAME slot
	 * (the first reserves it); the heads of [h0, h1) no rank has claimed yet are claimed
	 * for this connection. Writes a struct kvtd_tp_claim at [off, off+len); reply: slot,
	 * slot_off, res.bytes = object bytes; status 1: already stored, nothing reserved. The
	 * client gathers its claimed heads into the slot (object layout, no header), then
	 * TP_WRITTEN: key, n = the slot, [h0, h1), flags = 1 if its copy failed. The heads of
	 * [h0, h1) this connection claimed count as written; reply status = heads still
	 * missing (0: the daemon sealed and published the object), < 0: the object was
	 * cancelled (a rank failed, died or the object went stale). Until then nothing is
	 * visible; a connection that goes with heads claimed cancels the object. */
	KVTD_TP_RESERVE = 14,
	KVTD_TP_WRITTEN = 15,
	/* Clear the daemon's store: every object of its DRAM and nvme tiers is removed
	 * (BlockRemoved events), then AllBlocksCleared is published. res.bytes = objects
	 * removed (src/engine_clear.c). With deadline_ns (the client's time for the answer)
	 * the daemon stops starting removals after half of it and answers status 1: objects
	 * are left, ask again (a daemon from before 2026-12-06 ignores deadline_ns and
	 * clears all in one answer, which a large store's clear outlasted). */
	KVTD_CLEAR = 16,
	KVTD_OP_MAX = 16,
};

struct kvtd_req {
	uint32_t magic;
	uint32_t op;
	uint64_t seq;
	struct kvt_key key;
	struct kvt_key parent;
	uint8_t ns_id[KVT_NS_ID_BYTES]; /* HELLO */
	uint32_t has_parent;
	uint32_t n_tokens;
	uint32_t layer_begin, layer_end;
	uint32_t version; /* HELLO */
	uint32_t lease;   /* UNPIN, PUT_COMMIT: the lease GET_PIN / PUT_RESERVE answered */
	uint32_t flags;   /* TP_WRITTEN: 1 = the rank's copy failed; PREFETCH: KVTD_PF_RELATIVE */
	uint64_t off, len; /* a byte range of the shared region; HELLO: off, the daemon run n
			    * is of (kvtd_info.instance; 0: none) */
	uint64_t n;        /* keys (LOOKUP, PREFETCH); HELLO: the loss count it was told of */
	/* PREFETCH: the deadline kvt_prefetch is given (CLOCK_MONOTONIC; with
	 * KVTD_PF_RELATIVE, the time left to it). GET, PUT, GET_PIN:
	 * the time the client still gives the call when it sends it, in ns (0: none). Past
	 * it the client has dropped the connection, and the daemon stops waiting for the call:
	 * it answers -ETIME and closes the connection, and the call, left to finish, gives
	 * back what it holds (the region it reads or writes, a pinned slot) when it ends. */
	uint64_t deadline_ns;
};

struct kvtd_rep {
	uint32_t magic;
	uint32_t op;
	uint64_t seq;
	struct kvt_result res;
	int32_t slot;      /* GET_PIN: the pinned slot, for UNPIN; PUT_RESERVE: the slot;
			    * KVTD_SLOT_CUT: answered -ETIME at the request's deadline_ns with
			    * its call still running, and the daemon closes the connection */
	uint32_t lease;    /* GET_PIN, PUT_RESERVE: the lease's id, for UNPIN / PUT_COMMIT */
	uint64_t slot_off; /* GET_PIN: byte offset of the slot's object in the pool; FLUSH:
			    * the loss count told (KVTD_CAP_LOSS_SEEN) */
};

#define KVTD_SLOT_CUT (-2)

/* Pins one connection may hold at once: a get holds one between GET_PIN and UNPIN, a
 * device load one until its scatter has ended, so it bounds a client store's device loads
 * in flight (each past it fails -EBUSY; until 2026-12-05 it was 4, the reservations'
 * bound, and a fifth load in flight failed). Each ends at its lease (daemon.lease_ms). */
#define KVTD_MAX_PINS 32
/* Reservations one connection may hold at once (PUT_RESERVE until PUT_COMMIT: a put
 * encodes into one, on the connection's thread). */
#define KVTD_MAX_RESERVATIONS 4
/* Quarantined slots (expired reservations) one client process may be charged with before
 * its PUT_RESERVEs are refused (-EBUSY: its puts are copied through the region instead). A
 * stopped process holds at most this many minus one, plus the reservations its connections
 * had live when it stopped (KVTD_MAX_RESERVATIONS each). */
#define KVTD_MAX_QUARANTINE 4

/* What HELLO writes at offset 0 of the region. */
struct kvtd_info {
	uint32_t version;
	uint32_t n_tiers;
	struct kvt_geometry geo;
	uint8_t ns_id[KVT_NS_ID_BYTES];
	char tier[KVT_MAX_TIERS][KVTD_MAX_TIER_NAME];
	uint64_t pool_bytes; /* the DRAM pool's mapping, passed with the HELLO reply (0: none) */
	uint64_t slot_bytes; /* bytes of one slot */
	uint32_t pool_writable; /* daemon.shared_writes: PUT_RESERVE / PUT_COMMIT */
	uint32_t caps;		/* KVTD_CAP_* (a daemon before them wrote 0 here) */
	uint32_t lease_ms;	/* daemon.lease_ms, with KVTD_CAP_LEASE_MS */
	/* With KVTD_CAP_LOSS_SEEN: this daemon's run (random, not 0), and the count of chunks
	 * lost from DRAM (evicted unsaved) the connection's next flush reports from. */
	uint64_t instance;
	uint64_t loss_seen;
};

/* The daemon marks an answer it gave at the request's deadline_ns with its call still
 * running (kvtd_rep.slot = KVTD_SLOT_CUT) and closes the connection after it: a client
 * sends a budget with calls that have no deadline of their own only to such a daemon. */
#define KVTD_CAP_CUT_MARK 1u
/* kvtd_info.lease_ms is set. A pin's lease runs at least lease_ms from when its GET_PIN was
 * sent, so a client can tell, before its UNPIN, that a copy which ended before then read
 * the pinned object: a device load marks a layer ready only then (src/device_store.c).
 * Without it a client trusts nothing it copied until the UNPIN is accepted. */
#define KVTD_CAP_LEASE_MS 2u
/* kvtd_info.instance and .loss_seen are set; a FLUSH reply's slot_off is the loss count
 * its connection has been told of; a HELLO whose off names this run takes n for that
 * count. A client carries the count across reconnects, so that chunks lost while it was
 * reconnecting are reported to its next flush (a connection's count started at the
 * current one, and a reconnect between the loss and the flush answered 0). */
#define KVTD_CAP_LOSS_SEEN 4u
/* A PREFETCH with KVTD_PF_RELATIVE in flags gives its deadline_ns as the time left (ns;
 * 0: none), which the daemon reads against its own clock, as every other budget: an
 * absolute CLOCK_MONOTONIC reading means another time to a daemon in another time
 * namespace (unshare -T, a restored checkpoint) - prefetches cut at once, or answered
 * past the client's timeout, which then took the daemon for dead. */
#define KVTD_CAP_PF_RELATIVE 8u
#define KVTD_PF_RELATIVE 1u

/* What TP_RESERVE writes: heads of the object still missing, then one byte per head of the
 * model (1: claimed by this call; only heads of the request's range can be). */
struct kvtd_tp_claim {
	uint32_t missing;
	uint32_t pad;
	uint8_t claimed[];
};

/* What STATUS writes: the daemon's own state. */
struct kvtd_status {
	uint64_t connections;     /* attached now */
	uint64_t connections_total;
	uint64_t ops_in_progress; /* requests being served now (each holds its region) */
	uint64_t regions_mapped;  /* shared regions mapped now (one per connection) */
	uint64_t protocol_errors; /* connections dropped for a malformed message */
	uint64_t refused;         /* connections refused at the limit */
	uint64_t pins;            /* DRAM slots pinned for clients now (GET_PIN until UNPIN) */
	uint64_t pinned_gets;     /* gets served from the shared pool since start */
	uint64_t reserved;        /* DRAM slots reserved for clients' puts now */
	uint64_t shared_puts;     /* puts clients encoded into the pool since start */
	uint64_t pins_expired;    /* pins released at the end of their lease (daemon.lease_ms) */
	uint64_t reservations_expired; /* reservations cancelled at the end of their lease */
	/* slots of expired reservations held out of the pool until their client process is
	 * gone (it may still write into them), and their bytes */
	uint64_t quarantined, quarantined_bytes;
	uint64_t tp_partials;     /* TP objects reserved, not yet published or cancelled */
	uint64_t tp_published;    /* TP objects published since start */
	uint64_t tp_cancelled;    /* TP objects cancelled since start */
	/* Appended since (a STATUS whose len stops before them gets the fields above; a daemon
	 * that predates them leaves them as they were): slots of cancelled TP objects kept
	 * off the pool while ranks still hold claims on them, and their bytes. */
	uint64_t tp_quarantined, tp_quarantined_bytes;
	/* Appended since: requests answered -ETIME at their client's deadline (the daemon
	 * stopped waiting for the tier), and of those the calls still running. */
	uint64_t cut, cut_running;
	/* Appended since: calls the store refused for now (-EAGAIN: its in-flight bound
	 * store.max_inflight, a deeper tier backlogged, a slot being filled) that the daemon
	 * retried, one per call. */
	uint64_t busy_waits;
};
/* The smallest STATUS len a daemon accepts: the fields before the appended ones. */
#define KVTD_STATUS_MIN_BYTES offsetof(struct kvtd_status, tp_quarantined)
/* The same for STATS (struct kvt_stats): a client from before evicted_unsaved (appended
 * 2026-12-05) asks for less and gets the fields before it; a daemon from before leaves
 * it as the client set it (0). */
#define KVTD_STATS_MIN_BYTES offsetof(struct kvt_stats, evicted_unsaved)

/* Check a request that arrived as got bytes against a region of shm_len bytes (0: none
 * yet, only HELLO is allowed), for a store of geometry g. 0 if every length and offset is
 * usable; -EPROTO (wrong size, magic, op) or -EINVAL (a range outside the region, a count
 * or layer range out of bounds) with a reason in err. */
int kvtd_req_check(const struct kvtd_req *r, size_t got, uint64_t shm_len,
		   const struct kvt_geometry *g, char *err, size_t errlen);

/* Send one message, with fd attached if fd >= 0. 0 or -errno (-EPIPE: peer gone). */
int kvtd_send(int sock, const void *msg, size_t len, int fd);
/* Receive one message of at most cap bytes; *fd gets an attached descriptor (or -1; NULL:
 * any attached descriptor is closed). Returns the bytes received, 0 at EOF, or -errno
 * (-EAGAIN/-ETIMEDOUT: the socket's receive deadline passed; -EMSGSIZE: truncated). */
long kvtd_recv(int sock, void *msg, size_t cap, int *fd);
/* The most descriptors one message can carry (the kernel's SCM_MAX_FD). */
#define KVTD_MAX_FDS 253
/* kvtd_recv for a receiver that must decide how a peer's descriptors are closed: every one
 * attached (fds has room for KVTD_MAX_FDS) is handed back, *nfds of them, whatever the
 * return (EOF and a truncated message too). Why: the last close of a descriptor runs its
 * file's release, which a peer can make wait - a TCP socket with SO_LINGER and unsent
 * bytes waits up to its linger time, a FUSE file for its server - and the peer that
 * passed one and closed its own copy makes ours the last. kvtierd closes those after its
 * connection is let go (docs/DAEMON.md). */
long kvtd_recv_fds(int sock, void *msg, size_t cap, int *fds, int *nfds);

#endif
