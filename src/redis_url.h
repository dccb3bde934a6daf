/*
 * redis_url.h - the one parser of redis.url, shared by the redis tier and kvtier bench's
 * redis-benchmark reference, so that both talk to the same server and database (the
 * reference once parsed its own way: an IPv6 address or a URL without "redis://" sent it
 * elsewhere, or nowhere).
 */
#ifndef KVT_REDIS_URL_H
#define KVT_REDIS_URL_H

struct kvt_redis_url {
	char host[256]; /* a name or an address; an IPv6 one without its brackets */
	int port;       /* 6379 when not given */
	char user[128]; /* "" when not given (AUTH with the password alone) */
	char pass[512]; /* "" when not given: no AUTH */
	int db;         /* 0 when not given */
};

/* Parse [redis://][[user]:password@]host[:port][/db]: the password may hold '@' (the last
 * one ends it); host may be [v6 address]; port 1..65535 and db 0..1000000 are decimal
 * digits. 0, or -EINVAL with *out wiped. */
int kvt__redis_url_parse(const char *url, struct kvt_redis_url *out);

#endif
