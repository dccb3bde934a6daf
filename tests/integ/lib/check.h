/*
 * check.h - the assertion macros of the integration programs (exit 1 with file:line and
 * the failed expression). One definition, included by testlib.h, tierh.h and nvme_util.h.
 */
#ifndef KVT_TEST_CHECK_H
#define KVT_TEST_CHECK_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                           \
	do {                                                                                  \
		if (!(cond)) {                                                                \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
			exit(1);                                                              \
		}                                                                             \
	} while (0)

#define CHECK_EQ(a, b)                                                                        \
	do {                                                                                  \
		long long a_ = (long long)(a), b_ = (long long)(b);                           \
		if (a_ != b_) {                                                               \
			fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld)\n",     \
				__FILE__, __LINE__, #a, #b, a_, b_);                          \
			exit(1);                                                              \
		}                                                                             \
	} while (0)

/* CHECK with a message (printf-style, for the values that explain a failure). */
#define CHECKM(cond, ...)                                                                     \
	do {                                                                                  \
		if (!(cond)) {                                                                \
			fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);  \
			fprintf(stderr, __VA_ARGS__);                                         \
			fputc('\n', stderr);                                                  \
			exit(1);                                                              \
		}                                                                             \
	} while (0)

/* A part of a test this machine may be unable to run (can: it can; not root, no huge
 * pages). Under CI=true a test must not skip: that is a failure (exit 1). Else the part is
 * said to be skipped, and false returned. */
static inline bool check_part_runs(bool can, const char *part, const char *why)
{
	if (can)
		return true;
	bool ci = getenv("CI") && !strcmp(getenv("CI"), "true");
	fprintf(stderr, "%s: %s: %s\n", ci ? "FAIL" : "SKIP", part, why);
	if (ci)
		exit(1);
	return false;
}

#endif
