/*
 * net_resolve.h - a host name lookup with a deadline. getaddrinfo() blocks its thread for
 * as long as the DNS servers take (5 s per try and server by default, for ever in effect
 * when one drops packets); a tier's I/O thread that called it could not time out its
 * requests, notice a close, or answer anything else meanwhile. Used by the redis tier,
 * whose client library (hiredis) would otherwise resolve on the calling thread.
 */
#ifndef KVT_NET_RESOLVE_H
#define KVT_NET_RESOLVE_H

#include <stddef.h>
#include <stdint.h>

struct kvt_resolver;

/* The addresses a name has, in getaddrinfo's order (RFC 6724: the one to try first
 * first), as numeric strings. A client tries them in turn: "localhost" is often ::1 and
 * 127.0.0.1, and a server listening on only one of them refuses the other. */
#define KVT_RESOLVE_MAX 8
struct kvt_addrs {
	unsigned n;
	char ip[KVT_RESOLVE_MAX][46]; /* INET6_ADDRSTRLEN */
};

/* Look host up (port for the service), waiting at most timeout_ns. 0: out holds its first
 * KVT_RESOLVE_MAX addresses (at least one). -ETIMEDOUT: not answered yet; the lookup goes
 * on in the background and *rp keeps it - call again with the same *rp to wait for it
 * again (a new lookup is not started while one is out). -ENOENT: no such host;
 * -EHOSTUNREACH: the lookup failed (no DNS server answered, or another error); -ENOMEM.
 * *rp is NULL on every answer but -ETIMEDOUT. */
int kvt__resolve(struct kvt_resolver **rp, const char *host, int port, uint64_t timeout_ns,
		 struct kvt_addrs *out);

/* Drop a lookup still out (NULL: nothing): its thread frees it when getaddrinfo returns. */
void kvt__resolve_abandon(struct kvt_resolver *r);

#endif
