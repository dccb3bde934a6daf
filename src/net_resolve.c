/*
 * net_resolve.c - a host name lookup with a deadline (net_resolve.h says why): the lookup
 * runs getaddrinfo() on a thread of its own, and the caller waits for its answer only as
 * long as it may. Not glibc's getaddrinfo_a(): its threads are made inside glibc, where
 * ThreadSanitizer cannot see them, and the sanitizer builds crash in them.
 */
#include "net_resolve.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "internal.h"

struct kvt_resolver {
	pthread_mutex_t m;
	pthread_cond_t cv; /* CLOCK_MONOTONIC */
	int refs;          /* the lookup's thread, and the caller until it has the answer */
	bool done;
	int err; /* getaddrinfo's */
	struct addrinfo *res;
	char host[256];
	char service[16];
};

static void unref(struct kvt_resolver *r)
{
	pthread_mutex_lock(&r->m);
	bool last = --r->refs == 0;
	pthread_mutex_unlock(&r->m);
	if (!last)
		return;
	if (r->res)
		freeaddrinfo(r->res);
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->m);
	kvt__free(r);
}

static void *lookup_main(void *arg)
{
	struct kvt_resolver *r = arg;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	int err = getaddrinfo(r->host, r->service, &hints, &res);
	pthread_mutex_lock(&r->m);
	r->err = err;
	r->res = err ? NULL : res;
	r->done = true;
	pthread_cond_broadcast(&r->cv);
	pthread_mutex_unlock(&r->m);
	unref(r);
	return NULL;
}

static int start(struct kvt_resolver **rp, const char *host, int port)
{
	if (strlen(host) >= sizeof((*rp)->host))
		return -ENOENT;
	struct kvt_resolver *r = kvt__calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	snprintf(r->host, sizeof(r->host), "%s", host);
	snprintf(r->service, sizeof(r->service), "%d", port);
	pthread_mutex_init(&r->m, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->cv, &ca);
	pthread_condattr_destroy(&ca);
	r->refs = 2;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_t th;
	int e = pthread_create(&th, &at, lookup_main, r);
	pthread_attr_destroy(&at);
	if (e) {
		r->refs = 1;
		unref(r);
		return -e;
	}
	*rp = r;
	return 0;
}

int kvt__resolve(struct kvt_resolver **rp, const char *host, int port, uint64_t timeout_ns,
		 struct kvt_addrs *out)
{
	if (!*rp) {
		int rc = start(rp, host, port);
		if (rc < 0)
			return rc;
	}
	struct kvt_resolver *r = *rp;
	struct timespec end;
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += (time_t)(timeout_ns / 1000000000ull);
	end.tv_nsec += (long)(timeout_ns % 1000000000ull);
	if (end.tv_nsec >= 1000000000L) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&r->m);
	while (!r->done && pthread_cond_timedwait(&r->cv, &r->m, &end) != ETIMEDOUT)
		;
	bool done = r->done;
	pthread_mutex_unlock(&r->m);
	if (!done)
		return -ETIMEDOUT; /* *rp keeps the lookup */
	*rp = NULL;
	int e = r->err;
	int rc = e == 0 ? 0 : (e == EAI_NONAME || e == EAI_NODATA) ? -ENOENT : -EHOSTUNREACH;
	out->n = 0;
	for (const struct addrinfo *a = rc == 0 ? r->res : NULL; a && out->n < KVT_RESOLVE_MAX;
	     a = a->ai_next) {
		char *ip = out->ip[out->n];
		if (getnameinfo(a->ai_addr, a->ai_addrlen, ip, sizeof(out->ip[0]), NULL, 0,
				NI_NUMERICHOST) != 0)
			continue;
		bool seen = false; /* one address per socket type and protocol: keep one */
		for (unsigned i = 0; i < out->n && !seen; i++)
			seen = !strcmp(out->ip[i], ip);
		if (!seen)
			out->n++;
	}
	if (rc == 0 && out->n == 0)
		rc = -EHOSTUNREACH;
	unref(r);
	return rc;
}

void kvt__resolve_abandon(struct kvt_resolver *r)
{
	if (r)
		unref(r);
}
