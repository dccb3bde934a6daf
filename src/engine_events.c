/*
 * engine_events.c - the store's KV events (include/kvtier.h, "KV events"): one callback
 * the caller installs, fed from where the store's state really changes - the DRAM pool's
 * own change hook (stored, evicted, removed, under its lock, so in order), the write-behind
 * and remove legs of deeper tiers, corrupt objects dropped, and the evictions a tier makes
 * by itself (struct kvt_tier's on_evict). Why here and not in each caller: one place turns
 * the layers' private notions into the public event.
 */
#include "engine_internal.h"

int kvt_store_set_events(struct kvt_store *s, kvt_event_fn fn, void *arg)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	if (s->client) {
		rc = -ENOTSUP;
	} else if (!fn) {
		atomic_store(&s->ev_sink, NULL);
	} else {
		/* fn and arg as one pair (until 2026-12-06 two atomics: a thread that loaded the
		 * old fn and then the new arg called, after a removal, the old fn with NULL). A
		 * pair replaced may still be in use on another thread: kept until the store goes */
		struct ev_sink *k = atomic_load(&s->ev_sinks);
		while (k && (k->fn != fn || k->arg != arg)) /* a pair installed before: again */
			k = k->next;
		if (k) {
			atomic_store(&s->ev_sink, k);
			kvt__store_leave(s);
			return 0;
		}
		k = kvt__calloc(1, sizeof(*k));
		if (!k) {
			rc = -ENOMEM;
		} else {
			k->fn = fn;
			k->arg = arg;
			k->next = atomic_load(&s->ev_sinks);
			while (!atomic_compare_exchange_weak(&s->ev_sinks, &k->next, k))
				;
			atomic_store(&s->ev_sink, k);
		}
	}
	kvt__store_leave(s);
	return rc;
}

void kvt__e_events_free(struct kvt_store *s)
{
	struct ev_sink *k = atomic_exchange(&s->ev_sinks, NULL);
	while (k) {
		struct ev_sink *next = k->next;
		kvt__free(k);
		k = next;
	}
}

void kvt_storage_key(const uint8_t ns_id[KVT_NS_ID_BYTES], const struct kvt_key *key,
		     struct kvt_key *out)
{
	kvt__storage_key(ns_id, key, out);
}

void kvt__e_event(struct kvt_store *s, uint32_t type, uint32_t reason, int tier,
		  const struct kvt_key *key, uint64_t bytes)
{
	const struct ev_sink *k = atomic_load(&s->ev_sink);
	if (!k)
		return;
	struct kvt_event ev = {.type = type, .reason = reason, .tier = tier, .bytes = bytes,
			       .key = *key};
	k->fn(k->arg, &ev);
}

void kvt__e_dram_changed(void *arg, int change, const struct kvt_key *key,
			 const struct kvt_key *parent, uint32_t n_tokens, uint64_t object_bytes)
{
	struct kvt_store *s = arg;
	const struct ev_sink *k = atomic_load(&s->ev_sink);
	if (!k)
		return;
	struct kvt_event ev = {.tier = s->dram_pos, .bytes = object_bytes, .key = *key};
	switch (change) {
	case KVT_DRAM_STORED:
		ev.type = KVT_EVENT_STORED;
		ev.n_tokens = n_tokens;
		if (parent) {
			ev.has_parent = 1;
			ev.parent = *parent;
		}
		break;
	case KVT_DRAM_EVICTED:
		ev.type = KVT_EVENT_REMOVED;
		ev.reason = KVT_REASON_EVICTED;
		break;
	default:
		ev.type = KVT_EVENT_REMOVED;
		ev.reason = KVT_REASON_REMOVED;
	}
	k->fn(k->arg, &ev);
}

void kvt__e_tier_evicted(void *arg, int index, const struct kvt_key *key, uint64_t bytes)
{
	kvt__e_event(arg, KVT_EVENT_REMOVED, KVT_REASON_EVICTED, index, key, bytes);
}
