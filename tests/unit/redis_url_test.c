/*
 * redis_url_test.c - redis.url as the redis tier and the benchmark reference both read it
 * (src/redis_url.c): defaults, an IPv6 address, a password holding '@', a URL without
 * the scheme, and what must be refused - a sign or blank in a number (strtol took
 * "+6379" and " 6379"), a port or database out of range, trailing bytes, another scheme.
 * kvt-test-labels: onethread (no second thread, so nothing for TSan to check: scripts/test.sh
 * leaves it out of the TSan pass)
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "redis_url.h"

static void accepted(void **state)
{
	(void)state;
	static const struct {
		const char *url, *host, *user, *pass;
		int port, db;
	} ok[] = {
	    {"redis://cache.local", "cache.local", "", "", 6379, 0},
	    {"redis://[::1]:6380/2", "::1", "", "", 6380, 2},
	    {"redis://kv:p@ss@10.0.0.1:7000/", "10.0.0.1", "kv", "p@ss", 7000, 0},
	    {":secret@localhost/15", "localhost", "", "secret", 6379, 15},
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		struct kvt_redis_url u;
		if (kvt__redis_url_parse(ok[i].url, &u) != 0)
			fail_msg("'%s' refused", ok[i].url);
		assert_string_equal(u.host, ok[i].host);
		assert_string_equal(u.user, ok[i].user);
		assert_string_equal(u.pass, ok[i].pass);
		assert_int_equal(u.port, ok[i].port);
		assert_int_equal(u.db, ok[i].db);
	}
}

static void refused(void **state)
{
	(void)state;
	const char *bad[] = {
	    "redis://h:+6379",  "redis://h: 6379", "redis://h:0",     "redis://h:65536",
	    "redis://h:6379x",  "redis://h/-1",    "redis://h/+1",    "redis://h/1000001",
	    "redis://h/1x",     "redis:///1",      "redis://[::1",    "redis://user@h",
	    "rediss://h",       "http://h",        "redis://h:",      "redis://h:99999999999999999999",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct kvt_redis_url u;
		memset(&u, 0x55, sizeof(u));
		if (kvt__redis_url_parse(bad[i], &u) != -EINVAL)
			fail_msg("'%s' accepted", bad[i]);
		assert_string_equal(u.pass, ""); /* wiped */
	}
	struct kvt_redis_url u;
	assert_int_equal(kvt__redis_url_parse(NULL, &u), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(accepted),
	    cmocka_unit_test(refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
