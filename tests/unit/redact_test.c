/*
 * redact_test.c - kvt__redact_url (src/redact.c): every URL shape the tiers accept shows
 * its host but never its password, even when the output buffer is too short.
 * kvt-test-labels: onethread (no second thread, so nothing for TSan to check: scripts/test.sh
 * leaves it out of the TSan pass)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "redact.h"

static void expect(const char *in, const char *want)
{
	char out[256];
	assert_string_equal(kvt__redact_url(in, out, sizeof(out)), want);
}

static void test_shapes(void **state)
{
	expect("redis://127.0.0.1:6379", "redis://127.0.0.1:6379");
	expect("redis://:pw@127.0.0.1:6379/2", "redis://:***@127.0.0.1:6379/2");
	expect("redis://alice:pw@h:1", "redis://alice:***@h:1");
	expect(":pw@h:6379", ":***@h:6379"); /* redis accepts no scheme */
	expect("http://AKIA:se:cr@et@s3.local:9000/", "http://AKIA:***@s3.local:9000/");
	expect("https://token@s3.local", "https://***@s3.local");
	expect("", "");
	/* no '@': a port is shown, anything else after the ':' is a password (review) */
	expect("redis://:Pw10", "redis://:***");
	expect("redis://h:Pw10/0", "redis://h:***/0");
	expect(":Pw10", ":***");
	expect("redis://h:6379/0", "redis://h:6379/0");
	expect("redis://[::1]:6379", "redis://[::1]:6379");
	expect("http://[::1]/x", "http://[::1]/x");
	expect("redis://h", "redis://h");
}

static void test_truncation_never_reveals(void **state)
{
	const char *url = "redis://:SECRETSECRET@host:1";
	char out[64];
	for (size_t len = 1; len <= sizeof(out); len++) {
		kvt__redact_url(url, out, len);
		assert_true(strlen(out) < len);
		assert_null(strstr(out, "SECRET"));
		assert_null(strstr(out, "S")); /* not even a prefix of it */
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shapes),
		cmocka_unit_test(test_truncation_never_reveals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
