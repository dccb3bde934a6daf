/*
 * tier_nvme_budget.c - the NVMe write budget (nvme.write_budget bytes per rolling 24 h),
 * which protects the drive's endurance: hourly wall-clock buckets saved in
 * <first dir>/.kvtier.budget so restarts do not reset it. Writes over it are refused with
 * -EDQUOT; a budget dated in the future (the clock stepped back) is re-dated to now. Its own
 * small mutex: can_write() asks from other threads.
 */
#include "tier_nvme_internal.h"

uint64_t nv_hour_now(void)
{
	/* Wall clock, not monotonic: the buckets are saved across restarts and reboots. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec / 3600;
}

/* The clock stepped back, or the saved budget is dated in the future: re-date the buckets
 * so that the newest is this hour. The counts keep their ages relative to one another, so
 * they roll off within a day instead of refusing writes until the clock catches up. */
static void budget_rebase(struct nv *s, uint64_t hour)
{
	uint64_t old[NV_BUCKETS];
	memcpy(old, s->bucket, sizeof(old));
	for (uint64_t k = 0; k < NV_BUCKETS; k++)
		s->bucket[(hour + NV_BUCKETS - k) % NV_BUCKETS] =
		    old[(s->bucket_hour + NV_BUCKETS - k) % NV_BUCKETS];
	s->bucket_hour = hour;
	s->budget_dirty = true;
}

void nv_budget_roll(struct nv *s, uint64_t hour)
{
	if (hour < s->bucket_hour)
		budget_rebase(s, hour);
	if (hour == s->bucket_hour)
		return;
	s->budget_dirty = true;
	if (hour - s->bucket_hour >= NV_BUCKETS) {
		memset(s->bucket, 0, sizeof(s->bucket));
	} else {
		for (uint64_t h = s->bucket_hour + 1; h <= hour; h++)
			s->bucket[h % NV_BUCKETS] = 0;
	}
	s->bucket_hour = hour;
	s->budget_used = 0;
	for (int i = 0; i < NV_BUCKETS; i++)
		s->budget_used += s->bucket[i];
}

/* Written at close and when the hour rolls (not per write: a crash loses at most the last
 * hour's count), through a temp name so a torn file is never read back. */
void nv_budget_save(struct nv *s)
{
	char text[64 + NV_BUCKETS * 24], tmp[64];
	size_t n = 0;
	pthread_mutex_lock(&s->block);
	n += (size_t)snprintf(text, sizeof(text), "kvtier-budget-v1 %" PRIu64, s->bucket_hour);
	for (int i = 0; i < NV_BUCKETS; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, " %" PRIu64, s->bucket[i]);
	n += (size_t)snprintf(text + n, sizeof(text) - n, "\n");
	s->budget_dirty = false;
	pthread_mutex_unlock(&s->block);
	int dfd = s->dirs[0].fd;
	snprintf(tmp, sizeof(tmp), NV_TMP_PREFIX "budget.%d", (int)s->pid);
	int fd = nv_tmp_create(dfd, tmp, 0, s->file_mode);
	if (fd < 0)
		goto fail;
	bool ok = write(fd, text, n) == (ssize_t)n;
	close(fd);
	if (ok && renameat(dfd, tmp, dfd, NV_BUDGET_NAME) == 0)
		return;
	unlinkat(dfd, tmp, 0);
fail:
	KVT_WARN(s->log, "nvme: cannot save the write budget in %s: %s", s->dirs[0].path,
		 strerror(errno));
}

void nv_budget_load(struct nv *s)
{
	char text[64 + NV_BUCKETS * 24];
	/* not followed, not waited on: a FIFO in its place hung the open (holding the
	 * directory's lock), as .kvtier.chains's would (chains_load) */
	int fd = openat(s->dirs[0].fd, NV_BUDGET_NAME, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		if (errno != ENOENT)
			KVT_WARN(s->log, "nvme: %s/%s: %s: the write budget starts afresh",
				 s->dirs[0].path, NV_BUDGET_NAME, strerror(errno));
		return;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		KVT_WARN(s->log, "nvme: %s/%s is not a regular file: the write budget starts "
				 "afresh", s->dirs[0].path, NV_BUDGET_NAME);
		return;
	}
	ssize_t n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0)
		return;
	text[n] = 0;
	uint64_t v[1 + NV_BUCKETS];
	char *p = text;
	if (strncmp(p, "kvtier-budget-v1 ", 17))
		goto bad;
	p += 17;
	for (int i = 0; i <= NV_BUCKETS; i++) {
		char *end;
		errno = 0;
		v[i] = strtoull(p, &end, 10);
		if (end == p || errno)
			goto bad;
		p = end;
	}
	s->bucket_hour = v[0];
	s->budget_used = 0;
	for (int i = 0; i < NV_BUCKETS; i++) {
		/* a bucket above the whole budget only says it is spent: clamped there, so a
		 * crafted file's buckets cannot add up past 2^64 and wrap budget_used low (until
		 * 2026-12-06 they could, and the day's budget was open again) */
		s->bucket[i] = KVT_MIN(v[1 + i], s->budget);
		s->budget_used += s->bucket[i];
	}
	uint64_t now = s->clock_hour();
	if (v[0] > now)
		KVT_WARN(s->log,
			 "nvme: %s/%s is dated %" PRIu64 " hours in the future (the clock stepped "
			 "back?): counting it from now",
			 s->dirs[0].path, NV_BUDGET_NAME, v[0] - now);
	nv_budget_roll(s, now);
	return;
bad:
	KVT_WARN(s->log, "nvme: ignoring a malformed %s/%s", s->dirs[0].path, NV_BUDGET_NAME);
}

/* Charge len to the budget if it fits: 0 or -EDQUOT. */
int nv_budget_take(struct nv *s, uint64_t len, uint32_t *hour_out)
{
	if (!s->budget)
		return 0;
	int rc = 0;
	uint64_t hour = s->clock_hour();
	pthread_mutex_lock(&s->block);
	nv_budget_roll(s, hour);
	hour = s->bucket_hour;
	if (len > s->budget || s->budget_used > s->budget - len) { /* no sum to wrap */
		rc = -EDQUOT;
	} else {
		s->bucket[hour % NV_BUCKETS] += len;
		s->budget_used += len;
		*hour_out = (uint32_t)hour;
	}
	bool save = s->budget_dirty;
	pthread_mutex_unlock(&s->block);
	if (save)
		nv_budget_save(s);
	return rc;
}

/* Bytes of a write that were never issued to the media go back to the budget. */
void nv_budget_refund(struct nv *s, uint64_t len, uint32_t hour)
{
	if (!s->budget)
		return;
	pthread_mutex_lock(&s->block);
	if (hour + NV_BUCKETS > s->bucket_hour && s->bucket[hour % NV_BUCKETS] >= len) {
		s->bucket[hour % NV_BUCKETS] -= len;
		s->budget_used -= len;
	}
	pthread_mutex_unlock(&s->block);
}
