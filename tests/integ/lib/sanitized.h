/*
 * sanitized.h - TEST_SANITIZED: 1 in a build under ASan or TSan (gcc's __SANITIZE_*__,
 * clang's __has_feature), else 0. Why: a bound on CPU-bound work that holds in a release
 * build (a thread "has started by now", a walk "takes under a second") does not under a
 * sanitizer on a loaded 2-core CI host, 5-15x slower; such bounds scale with TEST_SLOW_X.
 * Bounds on the product's own deadlines do not: those are what the tests check.
 */
#ifndef KVT_TEST_SANITIZED_H
#define KVT_TEST_SANITIZED_H

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define TEST_SANITIZED 1
#endif
#endif
#ifndef TEST_SANITIZED
#define TEST_SANITIZED 0
#endif

/* how much longer CPU-bound work may take in this build */
#define TEST_SLOW_X (TEST_SANITIZED ? 5 : 1)

#endif
