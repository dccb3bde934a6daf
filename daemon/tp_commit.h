/*
 * tp_commit.h - kvtierd's table of tensor-parallel objects that ranks in separate processes
 * are writing into one shared DRAM slot (daemon/tp_commit.c; the messages are
 * KVTD_TP_RESERVE and KVTD_TP_WRITTEN in src/daemon_proto.h). Why its own file: the
 * connection server only dispatches to it, and the partial-object rules live in one place.
 */
#ifndef KVTD_TP_COMMIT_H
#define KVTD_TP_COMMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "daemon_proto.h"

struct kvt_store;

/* Once, before serving: the store, its namespace, and the DRAM pool clients map (enabled:
 * they map it writable; else every TP_RESERVE is -ENOTSUP). */
void kvtd_tp_init(struct kvt_store *s, const uint8_t *ns_id, void *pool, bool enabled,
		  uint64_t lease_ns);
/* TP_RESERVE for the connection conn (any unique pointer) of process pid (0: unknown);
 * claim: the request's range of the connection's region, checked by kvtd_req_check.
 * -EBUSY past the bounds of a client (see tp_commit.c). */
void kvtd_tp_reserve(const void *conn, int32_t pid, const struct kvtd_req *r, void *claim,
		     struct kvtd_rep *rep);
/* TP_WRITTEN: res->status = heads still missing, 0 published, < 0 cancelled (-ETIMEDOUT:
 * the object's lease ran out before this rank reported). */
void kvtd_tp_written(const void *conn, const struct kvtd_req *r, struct kvt_result *res);
/* Cancel objects whose lease (lease_ns, from their last claim or report) ended with claims
 * still held: the key is given back, the slot quarantined until those claims are reported
 * or their connections go. Returns when the lease of an object conn holds claims on ends
 * (kvt__now_ns() clock; UINT64_MAX: none), for conn's thread to call again then. */
uint64_t kvtd_tp_expire(const void *conn);
/* The same for every object, whoever holds its claims, and objects no rank is coming back
 * to: called by the daemon's main loop, so that they end on time even when no connection
 * of a rank is left to notice. Returns when to call again: when the next one is due, and at
 * least once a lease (objects opened meanwhile); UINT64_MAX when TP commits are off. */
uint64_t kvtd_tp_sweep(void);
/* conn went away: objects it holds unwritten claims on are cancelled (their slot back to the
 * pool once no other rank is still copying into it). */
void kvtd_tp_conn_gone(const void *conn);
/* Does conn hold claims (open or quarantined objects)? */
bool kvtd_tp_conn_holds(const void *conn);
/* At shutdown, every connection gone: cancel what is left (objects waiting for ranks that
 * never came), so the store closes with no slot reserved. */
void kvtd_tp_cancel_all(void);
/* For STATUS: objects open now, published and cancelled since start, and the slots of
 * cancelled objects quarantined now (claims still held) and their bytes. */
void kvtd_tp_counts(uint64_t *open, uint64_t *published, uint64_t *cancelled,
		    uint64_t *quarantined, uint64_t *quarantined_bytes);

#endif
