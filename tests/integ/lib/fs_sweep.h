/*
 * fs_sweep.h - what the fs tier tests of temporaries and sweeps share: the host part of a
 * temporary's name (".<key>.tmp.<host>.<pid>.<nonce>.<n>", src/tier_fs.c), and a write
 * that sets off a sweep, waited for through the tier's log. Why a header: each test had
 * its own copy. Include after tierh.h.
 */
#ifndef KVT_TEST_FS_SWEEP_H
#define KVT_TEST_FS_SWEEP_H

#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* This host's name as the tier puts it in a temporary's name (safe characters only). */
static inline void fs_host_part(char *out, size_t n)
{
	char host[256] = "host";
	gethostname(host, sizeof(host) - 1);
	size_t o = 0;
	for (const char *p = host; *p && o < n - 1 && o < 63; p++)
		out[o++] = (char)((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
					  (*p >= '0' && *p <= '9') || *p == '-'
				      ? *p
				      : '_');
	out[o] = 0;
}

/* Sweeps over, counted by the test's log callback (fs_sweep_log_line). */
static _Atomic int fs_sweeps_over;

/* For a test's log callback: counts the one line each sweep logs when it is over (what it
 * removed, or nothing). */
static inline void fs_sweep_log_line(const char *msg)
{
	if (strstr(msg, "fs: sweep of"))
		atomic_fetch_add(&fs_sweeps_over, 1);
}

/* A write of len bytes under key (id, salt) that sets off a sweep (the test's fs.bytes
 * makes every write sweep), and that sweep's end, within 10 s. */
static inline void fs_write_and_sweep(struct kvt_tier *t, uint64_t id, uint64_t salt,
				      const uint8_t *obj, uint64_t len)
{
	int before = atomic_load(&fs_sweeps_over);
	struct kvt_key k;
	th_key(&k, id, salt);
	CHECK_EQ(th_write(t, &k, obj, len), 0);
	uint64_t end = th_now_ms() + 10000;
	while (atomic_load(&fs_sweeps_over) == before && th_now_ms() < end)
		usleep(10000);
	CHECKM(atomic_load(&fs_sweeps_over) > before, "write %llu: no sweep within 10 s",
	       (unsigned long long)id);
}

#endif
