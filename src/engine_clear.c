/*
 * engine_clear.c - clear a store: remove every object its node-local tiers (DRAM, nvme)
 * hold, then report each of those tiers cleared (KVT__EVENT_CLEARED, which kvtierd
 * publishes as vLLM's AllBlocksCleared). Why only node-local tiers are listed: a shared
 * tier (fs, redis, s3, rados) may hold other nodes' and other tenants' objects, which
 * their storage keys do not tell apart; an object listed here is removed from every tier
 * of the chain, as kvt_remove does, so what this store put into a shared tier goes too
 * while it is still in DRAM or nvme. Why in steps: a large store takes longer to clear than
 * a client of kvtierd waits for one answer, so the daemon clears until a time it is given
 * and the client asks again until nothing listed is left (only the last step reports the
 * tiers cleared).
 */
#include "engine_internal.h"
#include "tier.h"

struct key_list {
	struct kvt_key *k;
	size_t n, cap;
	int error;
};

static int collect(void *arg, const struct kvt_key *key, uint64_t bytes)
{
	struct key_list *l = arg;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 256;
		struct kvt_key *k = kvt__realloc(l->k, cap * sizeof(*k));
		if (!k) {
			l->error = -ENOMEM;
			return -ENOMEM;
		}
		l->k = k;
		l->cap = cap;
	}
	l->k[l->n++] = *key;
	return 0;
}

int kvt__store_clear_sync(struct kvt_store *s, uint64_t until_ns, uint64_t *removed)
{
	if (s->client)
		return -ENOTSUP;
	struct key_list l = {0};
	bool listed[KVT_MAX_TIERS] = {false};
	int rc = 0;
	for (int i = 0; i < s->n_links && i < KVT_MAX_TIERS && !rc; i++) {
		if (i == s->dram_pos) {
			kvt__dram_scan(s->dram, collect, &l);
			listed[i] = true;
		} else if (!strcmp(s->links[i].name, "nvme")) {
			struct kvt_tier *t = kvt__store_tier(s, i);
			if (t && t->ops->scan) {
				rc = kvt__tier_scan_bounded(t, collect, &l, s->sync_timeout_ms);
				listed[i] = rc == 0;
			}
		}
		if (l.error)
			rc = l.error;
	}
	uint64_t n = 0;
	bool left = false;
	for (size_t i = 0; i < l.n; i++) {
		if (i && until_ns && kvt__now_ns() >= until_ns) {
			left = true; /* the caller calls again: the next listing has the rest */
			break;
		}
		/* tiers it was removed from; 0 or -ENOENT: listed by two tiers (removed from
		 * both at the first), or evicted since */
		int r = kvt__store_remove_stored_sync(s, &l.k[i]);
		if (r > 0)
			n++;
		else if (r < 0 && r != -ENOENT && !rc)
			rc = r;
	}
	kvt__free(l.k);
	if (removed)
		*removed = n;
	if (!rc && left)
		return 1;
	/* after the removals' own events, so a subscriber sees them in this order */
	static const struct kvt_key none;
	for (int i = 0; i < s->n_links && i < KVT_MAX_TIERS && !rc; i++)
		if (listed[i])
			kvt__e_event(s, KVT__EVENT_CLEARED, KVT_REASON_REMOVED, i, &none, 0);
	return rc;
}
