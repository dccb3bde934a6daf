/*
 * tier.c - the static table of tier backends, and instance creation. The engine names
 * tiers by string in its chain ("dram,nvme,s3"); "dram" is the engine's own slot pool
 * (src/dram.h) and never appears here. A backend whose library is missing is compiled out
 * and absent from the table, so asking for it fails with a clear message.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tier.h"

extern const struct kvt_tier_ops kvt__tier_nvme_ops;
extern const struct kvt_tier_ops kvt__tier_faulty_ops;
#ifdef KVT_HAVE_FS
extern const struct kvt_tier_ops kvt__tier_fs_ops;
#endif
#ifdef KVT_HAVE_REDIS
extern const struct kvt_tier_ops kvt__tier_redis_ops;
#endif
#ifdef KVT_HAVE_S3
extern const struct kvt_tier_ops kvt__tier_s3_ops;
#endif
#ifdef KVT_HAVE_RADOS
extern const struct kvt_tier_ops kvt__tier_rados_ops;
#endif

static const struct kvt_tier_ops *const tier_table[] = {
	&kvt__tier_nvme_ops,
	&kvt__tier_faulty_ops, /* test-only fault injection around another tier */
#ifdef KVT_HAVE_FS
	&kvt__tier_fs_ops,
#endif
#ifdef KVT_HAVE_REDIS
	&kvt__tier_redis_ops,
#endif
#ifdef KVT_HAVE_S3
	&kvt__tier_s3_ops,
#endif
#ifdef KVT_HAVE_RADOS
	&kvt__tier_rados_ops,
#endif
};

const struct kvt_tier_ops *kvt__tier_find(const char *name)
{
	for (size_t i = 0; i < KVT_ARRAY_SIZE(tier_table); i++)
		if (!strcmp(tier_table[i]->name, name))
			return tier_table[i];
	return NULL;
}

const char *kvt__tier_names(void)
{
	static char names[128];
	if (!names[0]) {
		size_t off = 0;
		off += (size_t)snprintf(names, sizeof(names), "dram");
		for (size_t i = 0; i < KVT_ARRAY_SIZE(tier_table) && off < sizeof(names); i++)
			off += (size_t)snprintf(names + off, sizeof(names) - off, " %s",
						tier_table[i]->name);
	}
	return names;
}

int kvt__tier_open(const char *name, const struct kvt_config *cfg, const struct kvt_log *log,
		   const struct kvt_geometry *g, int index, struct kvt_tier **out)
{
	return kvt__tier_open_hooked(name, cfg, log, g, index, NULL, NULL, out);
}

int kvt__tier_open_hooked(const char *name, const struct kvt_config *cfg,
			  const struct kvt_log *log, const struct kvt_geometry *g, int index,
			  void (*on_evict)(void *, int, const struct kvt_key *, uint64_t),
			  void *on_evict_arg, struct kvt_tier **out)
{
	const struct kvt_tier_ops *ops = kvt__tier_find(name);
	if (!ops) {
		KVT_ERR(log, "unknown or compiled-out tier '%s' (available: %s)", name,
			kvt__tier_names());
		return -EINVAL;
	}
	struct kvt_tier *t = kvt__calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->ops = ops;
	t->index = index;
	t->log = *log;
	t->geo = *g;
	t->geometry = &t->geo;
	t->object_max = kvt_object_bytes(g, g->chunk_tokens);
	t->on_evict = on_evict; /* before open: the tier may evict while recovering */
	t->on_evict_arg = on_evict_arg;
	if (ops->state_size && !(t->state = kvt__calloc(1, ops->state_size))) {
		kvt__free(t);
		return -ENOMEM;
	}
	int rc = ops->open(t, cfg);
	if (rc < 0) {
		kvt__free(t->state);
		kvt__free(t);
		return rc;
	}
	*out = t;
	return 0;
}

uint64_t kvt__tier_list_ns(const struct kvt_config *cfg, uint64_t timeout_ns, unsigned n)
{
	return KVT_MAX(n * timeout_ns, kvt__cfg_u64(cfg, "store.sync_timeout_ms") * 1000000ull);
}

void kvt__tier_close(struct kvt_tier *t)
{
	if (!t)
		return;
	t->ops->close(t);
	kvt_config_destroy(t->own_cfg);
	kvt__evict_gate_put(t->own_gate);
	kvt__log_gate_put(t->own_log_gate);
	kvt__free(t->state);
	kvt__free(t);
}

const char *kvt_version(void)
{
	static char v[192];
	if (!v[0])
		snprintf(v, sizeof(v), "%s tiers: %s", KVT_VERSION_STRING, kvt__tier_names());
	return v;
}
