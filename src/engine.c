/*
 * engine.c - the store's life: open (geometry, the tier chain, admission, the service and
 * verify threads), the call gate every public call passes (kvt_poll's included), close
 * (stop admitting, wait for the calls inside, write dirty slots, drain within deadlines,
 * then close tiers and free), stats, accessors, and the *_sync wrappers. How the store
 * works is told in docs/ARCHITECTURE.md; the shared types are in engine_internal.h, and
 * each other concern has its own file:
 *   engine_queue.c   completion queue (kvt_poll), service thread, verify pool
 *   engine_health.c  deadlines of tier calls (guards, the heap) and the circuit breaker
 *   engine_read.c    the read path: chain reads, fills (promotion), get, prefetch
 *   engine_wb.c      write-behind and kvt_flush
 *   engine_keyorder.c  the order of puts and removes of a key while a write of it is out
 *   engine_ops.c     put (and the device layer's reserve/commit), lookup, remove
 */
#include "engine_internal.h"

/* ------------------------------------------------------------ open / close */

static int parse_geometry(struct kvt_store *s, char *err, size_t errlen)
{
	const struct kvt_config *c = s->cfg;
	static const uint8_t dtypes[] = {KVT_DTYPE_BF16, KVT_DTYPE_FP16, KVT_DTYPE_FP8,
					 KVT_DTYPE_FP32};
	const char *dt = kvt__cfg_str(c, "model.dtype");
	s->geo.dtype = !strcmp(dt, "bf16")   ? dtypes[0]
		       : !strcmp(dt, "fp16") ? dtypes[1]
		       : !strcmp(dt, "fp8")  ? dtypes[2]
					     : dtypes[3];
	s->geo.kind = !strcmp(kvt__cfg_str(c, "model.kind"), "mla") ? KVT_KIND_MLA : KVT_KIND_KV;
	s->geo.layers = (uint32_t)kvt__cfg_u64(c, "model.layers");
	s->geo.kv_heads = (uint32_t)kvt__cfg_u64(c, "model.kv_heads");
	s->geo.head_dim = (uint32_t)kvt__cfg_u64(c, "model.head_dim");
	s->geo.chunk_tokens = (uint32_t)kvt__cfg_u64(c, "model.chunk_tokens");
	if (kvt_geometry_check(&s->geo) < 0) {
		snprintf(err, errlen, "invalid model geometry (layers/kv_heads/head_dim/kind)");
		return -EINVAL;
	}
	struct kvt_namespace ns = {
		.model = kvt__cfg_str(c, "model.name"),
		.revision = kvt__cfg_str(c, "model.revision"),
		.tenant = kvt__cfg_str(c, "model.tenant"),
		.geometry = s->geo,
	};
	/* kvt__cfg_str of an enum returns a per-thread buffer; the strings above are plain
	 * strings and stay valid while cfg lives. */
	if (kvt_namespace_id(&ns, s->ns_id) < 0) {
		snprintf(err, errlen, "invalid model name, revision or tenant");
		return -EINVAL;
	}
	s->obj_max = kvt_object_bytes(&s->geo, s->geo.chunk_tokens);
	s->late_cap = 64 * s->obj_max; /* half the DRAM pool once there is one (add_link) */
	return 0;
}

/* Start a tier's estimate from the cost model's profile: calibrate's measurement when
 * cost.profile names one, else the defaults for its kind. Answers refine it. */
static void deadline_seed(struct kvt_store *s, struct link *l)
{
	struct kvt_tier_profile p;
	kvt__tier_profile_default(l->name, &p);
	const char *path = kvt__cfg_str(s->cfg, "cost.profile");
	if (*path) {
		char err[160];
		(void)kvt__profile_load(path, &p, 1, err, sizeof(err)); /* bad file: defaults */
	}
	atomic_store(&l->lat_ns, (uint64_t)(p.latency_s * 1e9));
	atomic_store(&l->bw_Bps[0], p.read_Bps > 0 ? (uint64_t)p.read_Bps : 1000000000ull);
	atomic_store(&l->bw_Bps[1], p.write_Bps > 0 ? (uint64_t)p.write_Bps : 1000000000ull);
}

struct chain_ctx {
	struct kvt_store *s;
	int rc;
};

static int add_link(void *arg, const char *name)
{
	struct chain_ctx *c = arg;
	struct kvt_store *s = c->s;
	if (s->n_links >= KVT_MAX_TIERS) {
		KVT_ERR(&s->log, "store.tiers: more than %d tiers", KVT_MAX_TIERS);
		return c->rc = -EINVAL;
	}
	for (int i = 0; i < s->n_links; i++)
		if (!strcmp(s->links[i].name, name)) {
			KVT_ERR(&s->log, "store.tiers: '%s' listed twice", name);
			return c->rc = -EINVAL;
		}
	struct link *l = &s->links[s->n_links];
	snprintf(l->name, sizeof(l->name), "%s", name);
	if (!strcmp(name, "dram")) {
		if (s->n_links != 0) {
			KVT_ERR(&s->log, "store.tiers: dram must come first");
			return c->rc = -EINVAL;
		}
		struct kvt_dram_options o = {
			.bytes = kvt__cfg_u64(s->cfg, "dram.bytes"),
			.slot_bytes = s->obj_max,
			.policy = kvt__cfg_str(s->cfg, "dram.policy"),
			.hugepages = kvt__cfg_bool(s->cfg, "dram.hugepages"),
			.mlock = kvt__cfg_bool(s->cfg, "dram.mlock"),
			.prefault = kvt__cfg_bool(s->cfg, "dram.prefault"),
			.shared = kvt__cfg_bool(s->cfg, "dram.shared"),
			.partial_below =
			    kvt__cfg_bool(s->cfg, "dram.partial_first") ? s->geo.chunk_tokens : 0,
			.log = &s->log,
			.on_change = kvt__e_dram_changed,
			.on_change_arg = s,
		};
		char policy[32];
		snprintf(policy, sizeof(policy), "%s", o.policy);
		o.policy = policy;
		/* A pool larger than the machine's memory cannot be held, and its slot tables
		 * alone (built before the pool is mapped) took 17 GB and 90 s to fail for 900 TiB. */
		long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
		uint64_t phys = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
		if (phys && o.bytes > phys) {
			KVT_ERR(&s->log, "dram.bytes is %llu bytes, more than this machine's memory "
					 "(%llu bytes)",
				(unsigned long long)o.bytes, (unsigned long long)phys);
			return c->rc = -EINVAL;
		}
		int rc = kvt__dram_create(&o, &s->dram);
		if (rc < 0) {
			KVT_ERR(&s->log, "dram: cannot create a %llu-byte pool of %llu-byte slots: %s",
				(unsigned long long)o.bytes, (unsigned long long)o.slot_bytes,
				kvt_strerror(rc));
			return c->rc = rc;
		}
		s->dram_pos = s->n_links;
		s->late_cap = KVT_MAX(o.bytes / 2, s->obj_max);
	} else {
		/* bounded: a tier on a hung mount or server fails the open, never hangs it */
		int rc = kvt__tier_open_bounded(name, s->cfg, &s->log, &s->geo, s->n_links,
						kvt__e_tier_evicted, s, s->sync_timeout_ms, &l->t);
		if (rc < 0)
			return c->rc = rc;
		/* The faulty test tier is as local as what it wraps. */
		const char *dev = strcmp(name, "faulty") ? name
							  : kvt__cfg_str(s->cfg, "faulty.inner");
		l->local = !strcmp(dev, "nvme");
		deadline_seed(s, l);
	}
	s->n_links++;
	return 0;
}

/* Admission to each deeper tier (src/sketch.h): a frequency sketch (admission.min_freq),
 * a reuse prediction from the chunk chain (admission.predict, the replay's --admit-predict),
 * a minimum prefix length, and - with a measured tier profile (cost.profile) - no write
 * to a tier from which restoring would be slower than recomputing. Capacity and the NVMe
 * write budget are the tier's own can_write(). With the defaults nothing is filtered and
 * no sketch is kept. */
static int admission_open(struct kvt_store *s)
{
	/* Inspection (store.read_only) writes nothing, so there is nothing to admit: no sketch
	 * (at admission.sketch_counters' maximum it is gigabytes, built for a `kvtier stat`). */
	if (kvt__cfg_bool(s->cfg, "store.read_only"))
		return 0;
	uint32_t min_freq = (uint32_t)kvt__cfg_u64(s->cfg, "admission.min_freq");
	uint64_t min_prefix = kvt__cfg_u64(s->cfg, "admission.min_prefix_tokens");
	bool cost_check = kvt__cfg_bool(s->cfg, "admission.cost_check") &&
			  *kvt__cfg_str(s->cfg, "cost.profile");
	if (cost_check && kvt_cost_create(s->cfg, &s->cost) < 0) {
		KVT_WARN(&s->log, "admission: no cost model for this configuration; restore-vs-"
				  "recompute admission is off");
		s->cost = NULL;
	}
	int predict = kvt__admit_predict_parse(kvt__cfg_str(s->cfg, "admission.predict"));
	if (predict < 0)
		return -EINVAL; /* the config table's enum check makes this unreachable */
	if (min_freq <= 1 && !min_prefix && !s->cost && predict == KVT_PREDICT_OFF)
		return 0;
	uint64_t width = kvt__cfg_u64(s->cfg, "admission.sketch_counters");
	if (!width)
		width = 1u << 20;
	for (int i = s->dram_pos + 1; i < s->n_links; i++) {
		struct kvt_admit_cfg ac = {
			.min_freq = min_freq,
			.min_prefix_tokens = min_prefix,
			.sketch_width = width,
			.doorkeeper = kvt__cfg_bool(s->cfg, "admission.doorkeeper"),
			.cost = s->cost,
			.cost_tier = i,
			.predict = predict,
			.chunk_tokens = s->geo.chunk_tokens,
		};
		int rc = kvt__admit_create(&ac, &s->links[i].admit);
		if (rc < 0)
			return rc;
	}
	KVT_INFO(&s->log, "admission: min_freq %u, min_prefix_tokens %llu, cost check %s, predict %s",
		 min_freq, (unsigned long long)min_prefix, s->cost ? "on" : "off",
		 kvt__cfg_str(s->cfg, "admission.predict"));
	return 0;
}

void kvt__e_admission_record(struct kvt_store *s, const struct kvt_key *key)
{
	uint64_t h = kvt__key_hash(key);
	for (int i = s->dram_pos + 1; i < s->n_links; i++)
		if (s->links[i].admit) {
			pthread_mutex_lock(&s->admit_lock);
			kvt__admit_record(s->links[i].admit, h);
			pthread_mutex_unlock(&s->admit_lock);
		}
}

static void close_links(struct kvt_store *s)
{
	for (int i = 0; i < s->n_links; i++) {
		kvt__admit_destroy(s->links[i].admit);
		s->links[i].admit = NULL;
	}
	kvt_cost_destroy(s->cost);
	s->cost = NULL;
	for (int i = s->n_links - 1; i >= 0; i--) {
		kvt__tier_close_bounded(s->links[i].t, s->sync_timeout_ms); /* open failed: idle */
		s->links[i].t = NULL;
	}
	if (s->dram)
		kvt__dram_destroy(s->dram);
	s->dram = NULL;
}

int kvt_store_open(const struct kvt_config *cfg, struct kvt_store **out)
{
	if (cfg && out && kvt__client_wanted(cfg)) return kvt__client_open(cfg, out);
	if (!cfg || !out)
		return -EINVAL;
	struct kvt_store *s = kvt__calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	int rc = kvt__config_copy(cfg, &s->cfg);
	if (rc < 0)
		goto fail_free;
	s->log = *kvt__cfg_log(cfg);
	kvt_list_init(&s->cq);
	kvt_list_init(&s->cq_free);
	kvt_list_init(&s->work);
	kvt_list_init(&s->pool_work);
	kvt_list_init(&s->wb);
	kvt_list_init(&s->flushes);
	s->dram_pos = -1;
	s->efd = -1;
	char err[200];
	rc = parse_geometry(s, err, sizeof(err));
	if (rc < 0) {
		KVT_ERR(&s->log, "%s", err);
		goto fail_cfg;
	}
	const char *wp = kvt__cfg_str(cfg, "store.write_policy");
	s->write_policy = !strcmp(wp, "write-back") ? WP_BACK
			  : !strcmp(wp, "selective") ? WP_SELECTIVE
						     : WP_THROUGH;
	s->selective_hits = (uint32_t)kvt__cfg_u64(cfg, "store.selective_hits"); /* <= 1000000 */
	s->promote = kvt__cfg_bool(cfg, "store.promote");
	s->promote_local = kvt__cfg_bool(cfg, "store.promote_local");
	s->max_inflight = kvt__cfg_u64(cfg, "store.max_inflight");
	s->max_object_bytes = kvt__cfg_u64(cfg, "store.max_object_bytes");
	if ((rc = kvt__protect_open(cfg, &s->log, &s->prot)) < 0)
		goto fail_cfg;
	pthread_mutex_init(&s->cq_lock, NULL);
	pthread_mutex_init(&s->work_lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are monotonic */
	pthread_cond_init(&s->work_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&s->fill_lock, NULL);
	pthread_mutex_init(&s->wb_lock, NULL);
	pthread_mutex_init(&s->admit_lock, NULL);
	pthread_cond_init(&s->wb_cond, NULL);
	pthread_mutex_init(&s->bounce_lock, NULL);
	pthread_mutex_init(&s->guard_lock, NULL);
	pthread_mutex_init(&s->pool_lock, NULL);
	pthread_cond_init(&s->pool_cond, NULL);
	s->deadline_ceiling_ns = kvt__cfg_u64(cfg, "store.tier_timeout_ms") * 1000000ull;
	s->sync_timeout_ms = kvt__cfg_u64(cfg, "store.sync_timeout_ms");
	s->deadline_floor_ns = kvt__cfg_u64(cfg, "store.deadline_floor_ms") * 1000000ull;
	if (s->deadline_floor_ns > s->deadline_ceiling_ns) {
		KVT_WARN(&s->log, "store.deadline_floor_ms above store.tier_timeout_ms (the "
				  "ceiling): using the ceiling for both");
		s->deadline_floor_ns = s->deadline_ceiling_ns;
	}
	if (s->max_object_bytes < s->obj_max)
		KVT_WARN(&s->log, "store.max_object_bytes (%llu) is below this geometry's full "
				  "chunk (%llu bytes): such objects are misses (never deleted)",
			 (unsigned long long)s->max_object_bytes, (unsigned long long)s->obj_max);
	s->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->efd < 0) {
		rc = -errno;
		goto fail_sync;
	}
	struct chain_ctx cc = {s, 0};
	char tiers[512];
	snprintf(tiers, sizeof(tiers), "%s", kvt__cfg_str(cfg, "store.tiers"));
	rc = kvt__split_list(tiers, add_link, &cc);
	if (rc < 0 || cc.rc < 0 || s->n_links == 0) {
		if (s->n_links == 0 && rc >= 0 && cc.rc >= 0)
			KVT_ERR(&s->log, "store.tiers is empty");
		rc = cc.rc < 0 ? cc.rc : rc < 0 ? rc : -EINVAL;
		goto fail_links;
	}
	rc = admission_open(s);
	if (rc < 0)
		goto fail_links;
	/* what late calls may hold is shared by the deeper tiers: two hung ones together
	 * hold no more than one */
	if (s->n_links > s->dram_pos + 2)
		s->late_cap = KVT_MAX(s->late_cap / (uint64_t)(s->n_links - s->dram_pos - 1),
				      s->obj_max);
	/* Zero-copy puts need no DRAM tier, no object protection, and every deeper tier able
	 * to write an object in two pieces (engine_ops.c). */
	s->zero_copy = kvt__cfg_bool(cfg, "store.zero_copy_puts") && !s->dram && !s->prot;
	for (int i = s->dram_pos + 1; i < s->n_links && s->zero_copy; i++)
		s->zero_copy = s->links[i].t->ops->write_split != NULL;
	rc = pthread_create(&s->service, NULL, kvt__e_service_main, s);
	if (rc) {
		rc = -rc;
		goto fail_links;
	}
	for (int i = 0; i < VERIFY_THREADS; i++) {
		if (pthread_create(&s->pool[i], NULL, kvt__e_pool_main, s))
			break; /* fewer verify threads; with none, tier threads verify */
		s->n_pool++;
	}
	*out = s;
	return 0;

fail_links:
	close_links(s);
	close(s->efd);
fail_sync:
	pthread_mutex_destroy(&s->cq_lock);
	pthread_mutex_destroy(&s->work_lock);
	pthread_cond_destroy(&s->work_cond);
	pthread_mutex_destroy(&s->fill_lock);
	pthread_mutex_destroy(&s->wb_lock);
	pthread_mutex_destroy(&s->admit_lock);
	pthread_cond_destroy(&s->wb_cond);
fail_cfg:
	kvt__protect_close(s->prot);
	kvt_config_destroy(s->cfg);
fail_free:
	kvt__free(s);
	return rc;
}

/* ------------------------------------------------------------ the call gate
 *
 * Every public call on a store counts itself in s->callers while it runs: one atomic add
 * on the way in and one subtract on the way out, no lock. kvt_store_shutdown and
 * kvt_store_close set s->closing; a call that enters after that sees it and returns
 * -ECANCELED at once, and kvt_store_close waits for the count to drop to zero before it
 * drains (calls already inside finish; kvt_poll calls waiting on the eventfd are woken),
 * and again before it frees the store (calls refused meanwhile still read the count).
 * closing is stored before callers is read, and callers is incremented before closing is
 * read, all sequentially consistent: a call either sees closing or is seen by the wait.
 * Two kinds of call still answer while the store is closing (enter_answering): kvt_poll,
 * which delivers the completions already queued (a worker collecting its own after
 * kvt_store_shutdown, a callback waiting for a sibling's), and the accessors, whose data
 * lives until the free. They are refused only once kvt_store_close itself has begun
 * (s->teardown, stored before its first wait as closing is), except a kvt_poll nested in
 * a callback, whose outer kvt_poll holds the close at that first wait.
 * What no gate can catch is a call that starts once the close has returned: the store is
 * freed then (include/kvtier.h says how callers stop their threads in time).
 */
int kvt__store_enter(const struct kvt_store *cs)
{
	struct kvt_store *s = (struct kvt_store *)cs; /* the count is the store's own */
	if (!s)
		return -EINVAL;
	atomic_fetch_add(&s->callers, 1);
	if (atomic_load(&s->closing)) {
		atomic_fetch_sub(&s->callers, 1);
		return -ECANCELED;
	}
	return 0;
}

/* The gate for calls that answer while the store is closing (above): refused once
 * kvt_store_close has begun, unless allowed. */
static int enter_answering(const struct kvt_store *cs, bool allowed_in_teardown)
{
	struct kvt_store *s = (struct kvt_store *)cs;
	if (!s)
		return -EINVAL;
	atomic_fetch_add(&s->callers, 1);
	if (atomic_load(&s->teardown) && !allowed_in_teardown) {
		atomic_fetch_sub(&s->callers, 1);
		return -ECANCELED;
	}
	return 0;
}

void kvt__store_leave(const struct kvt_store *cs)
{
	atomic_fetch_sub(&((struct kvt_store *)cs)->callers, 1);
}

/* The eventfd kvt_poll waits on (the client's in client mode), made readable: a poll
 * waiting on it returns. */
static void wake_pollers(struct kvt_store *s)
{
	int fd = s->client ? kvt__client_fd(s->client) : s->efd;
	uint64_t one = 1;
	ssize_t w = write(fd, &one, sizeof(one));
	(void)w;
}

void kvt__store_dev_hold(struct kvt_store *s)
{
	atomic_fetch_add(&s->dev_ops, 1);
}

void kvt__store_dev_release(struct kvt_store *s)
{
	atomic_fetch_sub(&s->dev_ops, 1);
}

/* Until no device operation holds s (kvt__store_dev_hold): its copy runs on the device's
 * stream, behind its dependency, so this waits as long as they take - without a bound, as
 * kvt_device_close does: the copy writes into s's memory, which must outlive it. Past
 * store.sync_timeout_ms it says so once (a dependency the engine never signals, a hung
 * device), so a hang is not silent. Small sleeps, as wait_callers and for its reason: a
 * releasing op touches nothing of s after the count. */
static void wait_dev_ops(struct kvt_store *s)
{
	unsigned us = 20;
	uint64_t wait_ms = kvt__store_sync_timeout_ms(s); /* a client store's too */
	uint64_t warn_at = kvt__now_ns() + wait_ms * 1000000ull;
	bool warned = false;
	while (atomic_load(&s->dev_ops)) {
		usleep(us);
		if (us < 1000)
			us *= 2;
		if (!warned && kvt__now_ns() >= warn_at) {
			warned = true;
			KVT_ERR(&s->log, "close: still waiting after %llu ms (store.sync_timeout_ms) "
					 "for %llu device copies into the store; has their dependency "
					 "been signalled?",
				(unsigned long long)wait_ms,
				(unsigned long long)atomic_load(&s->dev_ops));
		}
	}
}

/* Until no public call runs on s. A poll that has read the eventfd just before a wake is
 * woken by the next one; the wait is short (calls inside finish within their deadlines),
 * so it sleeps in small steps rather than have a leaving call touch a condition variable
 * the close may already be freeing. */
static void wait_callers(struct kvt_store *s, bool wake)
{
	unsigned us = 20;
	while (atomic_load(&s->callers)) {
		if (wake)
			wake_pollers(s);
		usleep(us);
		if (us < 1000)
			us *= 2;
	}
}

/* The kvt_poll calls running on this thread (completion callbacks run inside them), and
 * a close under way on it, innermost first: a kvt_store_close from a callback cannot wait
 * for the kvt_poll it runs in, so it is finished when that kvt_poll returns. */
struct poll_frame {
	struct kvt_store *s;
	struct poll_frame *up;
	bool close_asked;
};
static _Thread_local struct poll_frame *poll_frames;

static struct poll_frame *frame_of(const struct kvt_store *s)
{
	for (struct poll_frame *f = poll_frames; f; f = f->up)
		if (f->s == s)
			return f;
	return NULL;
}

int kvt_store_fd(const struct kvt_store *s)
{
	int rc = enter_answering(s, s && !s->client); /* a client's fd goes with the client */
	if (rc < 0)
		return rc;
	rc = s->client ? kvt__client_fd(s->client) : s->efd;
	kvt__store_leave(s);
	return rc;
}

int kvt_poll(struct kvt_store *s, int timeout_ms)
{
	int rc = enter_answering(s, s && frame_of(s));
	if (rc < 0)
		return rc;
	/* Closing: only what is queued, without waiting for more. */
	bool closing = atomic_load(&s->closing);
	struct poll_frame f = {.s = s, .up = poll_frames};
	poll_frames = &f;
	int t = closing ? 0 : timeout_ms;
	rc = s->client ? kvt__client_poll(s->client, t) : kvt__e_poll(s, t);
	poll_frames = f.up;
	/* The wake this poll took may have been the close's: pass it on to the other polls
	 * waiting (each reads the eventfd, which resets it). */
	closing = atomic_load(&s->closing);
	if (closing)
		wake_pollers(s);
	kvt__store_leave(s);
	if (f.close_asked) { /* a callback it ran closed the store */
		struct poll_frame *outer = frame_of(s);
		if (outer)
			outer->close_asked = true; /* an outer kvt_poll of s on this thread */
		else
			kvt_store_close(s);
		return -ECANCELED; /* s may be freed: the caller must stop */
	}
	/* Closing and nothing left to run: the poller's cue to stop. */
	return closing && rc == 0 ? -ECANCELED : rc;
}

void kvt_store_shutdown(struct kvt_store *s)
{
	if (kvt__store_enter(s) < 0)
		return; /* already closing */
	atomic_store(&s->closing, true);
	wake_pollers(s);
	kvt__store_leave(s);
}

/* Stores left allocated by a close that a stuck tier did not let finish: kept on a list
 * so that they stay reachable (a leak by design, not one a leak checker should report). */
static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kvt_store *abandoned;

static void abandon(struct kvt_store *s)
{
	pthread_mutex_lock(&abandoned_lock);
	s->next_abandoned = abandoned;
	abandoned = s;
	pthread_mutex_unlock(&abandoned_lock);
}

void kvt_store_close(struct kvt_store *s)
{
	if (!s)
		return;
	struct poll_frame *f = frame_of(s);
	if (f) {
		/* From a completion callback (inside kvt_poll on this thread), or from one that
		 * this thread's close is running: refuse calls now; the kvt_poll finishes the
		 * close when it returns (a close under way finishes by itself). */
		atomic_store(&s->closing, true);
		wake_pollers(s);
		f->close_asked = true;
		return;
	}
	/* 1. Stop admitting: every call from here on returns -ECANCELED. Calls already
	 * inside finish first (a waiting kvt_poll is woken). */
	atomic_store(&s->closing, true);
	atomic_store(&s->teardown, true);
	wait_callers(s, true);
	/* Device operations (kvt_device_store/load) go on after their call returned: a copy
	 * may still be writing into a slot of s, or be about to publish, release or cancel one
	 * and queue its completion here. None can start now; wait for those running (their
	 * completions are delivered below, by the drain or the last poll). */
	wait_dev_ops(s);
	/* Callbacks this close runs (completions not yet polled) may close s again. */
	struct poll_frame self = {.s = s, .up = poll_frames};
	poll_frames = &self;
	if (s->client) {
		kvt__client_close(s->client);
		poll_frames = self.up;
		wait_callers(s, false);
		kvt__free(s);
		return;
	}
	/* Half-written TP objects of this store (a rank never came) are given back: the
	 * device layer's table outlives the store. No copy into one runs any more (waited
	 * for above), and none can start: every entry of s goes. */
	if (kvt__dev_store_forget(s) > 0)
		KVT_ERR(&s->log, "store closed with a half-written TP object still being copied "
				 "into after its copies were waited for (a bug)");
	/* 2. Dirty chunks (write-back, or left dirty by a lack of memory) are written now, so
	 * a clean shutdown keeps them. */
	if (s->dram && s->n_links > s->dram_pos + 1)
		kvt__e_wb_dirty_all(s);
	/* 3. Drain. Every tier call has a deadline the service thread enforces, so write-
	 * behind and operations in flight finish within a few deadlines (at most one per tier
	 * of the chain, each at most store.tier_timeout_ms), whatever the tiers do. */
	pthread_mutex_lock(&s->wb_lock);
	while (s->wb_pending)
		pthread_cond_wait(&s->wb_cond, &s->wb_lock);
	pthread_mutex_unlock(&s->wb_lock);
	while (atomic_load(&s->inflight))
		kvt__e_poll(s, 10);
	/* 3b. Removals the tiers still owe: a remove call past its deadline, the removal of a
	 * late write, a late write of a removed key that may yet land (and is then removed
	 * again). Closing the tiers now would cancel them and the removed key could be back
	 * after a reopen; waited for within one ceiling deadline (store.tier_timeout_ms), the
	 * longest a call sent now is given. Then no new removal of a late write is sent, and
	 * those being sent are waited for (a call into a tier, which does not block): no
	 * operation can call a tier from here on. */
	uint64_t rm_until = kvt__now_ns() + s->deadline_ceiling_ns;
	for (;;) {
		pthread_mutex_lock(&s->wb_lock);
		bool owed = kvt__e_keyrec_any_removing(s);
		pthread_mutex_unlock(&s->wb_lock);
		if (!owed || kvt__now_ns() >= rm_until)
			break;
		kvt__e_poll(s, 10);
	}
	/* Slots left dirty because a tier was skipped while such a call of their key was out
	 * are written now that it has answered (one still out past the wait: that tier is
	 * skipped again); drained as above. */
	if (s->dram && s->n_links > s->dram_pos + 1) {
		kvt__e_wb_dirty_all(s);
		pthread_mutex_lock(&s->wb_lock);
		while (s->wb_pending)
			pthread_cond_wait(&s->wb_cond, &s->wb_lock);
		pthread_mutex_unlock(&s->wb_lock);
	}
	pthread_mutex_lock(&s->wb_lock);
	s->tiers_closing = true;
	while (s->undo_sending)
		pthread_cond_wait(&s->wb_cond, &s->wb_lock);
	/* a slot written again as its key's late call was answered meanwhile
	 * (kvt__e_wb_rewrite): drained as above */
	while (s->wb_pending)
		pthread_cond_wait(&s->wb_cond, &s->wb_lock);
	pthread_mutex_unlock(&s->wb_lock);
	/* 4. Now no operation can call a tier: close them. They cancel what they still hold
	 * (calls that missed their deadline), and those late answers release what the
	 * engine left with their guards. A tier on a hung device may not finish closing
	 * (a thread of it stuck in a system call): after store.sync_timeout_ms it is left
	 * closing, and then so is everything its late answers may touch - the store stays
	 * allocated (a leak, reported) rather than freed under them or waited for forever. */
	bool stuck = false;
	for (int i = s->n_links - 1; i >= 0; i--) {
		int crc = kvt__tier_close_bounded(s->links[i].t, s->sync_timeout_ms);
		if (crc == -EBUSY) /* never closed: stays reachable from the store, below */
			stuck = true;
		else if (crc < 0)
			stuck = true, s->links[i].t = NULL; /* closing: frees itself when done */
		else
			s->links[i].t = NULL;
	}
	kvt__e_pool_stop(s);
	pthread_mutex_lock(&s->work_lock);
	s->stopping = true;
	pthread_cond_signal(&s->work_cond);
	pthread_mutex_unlock(&s->work_lock);
	pthread_join(s->service, NULL);
	kvt__e_poll(s, 0);
	poll_frames = self.up;
	wait_callers(s, false); /* calls refused since the first wait have left */
	if (stuck) {
		KVT_ERR(&s->log, "store closed with a tier that did not close: the store's memory "
				 "is left allocated for its late answers");
		abandon(s);
		return;
	}
	close_links(s);
	close(s->efd);
	kvt__e_bounce_free_all(s);
	struct kvt_list *p;
	while ((p = kvt_list_pop(&s->cq_free)))
		kvt__free(kvt_list_entry(p, struct completion, node));
	kvt__free(s->heap);
	kvt__e_keyrec_free_all(s); /* none left once every tier has answered; in case */
	pthread_mutex_destroy(&s->bounce_lock);
	pthread_mutex_destroy(&s->guard_lock);
	pthread_mutex_destroy(&s->pool_lock);
	pthread_cond_destroy(&s->pool_cond);
	pthread_mutex_destroy(&s->cq_lock);
	pthread_mutex_destroy(&s->work_lock);
	pthread_cond_destroy(&s->work_cond);
	pthread_mutex_destroy(&s->fill_lock);
	pthread_mutex_destroy(&s->wb_lock);
	pthread_mutex_destroy(&s->admit_lock);
	pthread_cond_destroy(&s->wb_cond);
	kvt__protect_close(s->prot);
	kvt_config_destroy(s->cfg);
	kvt__e_events_free(s);
	kvt__free(s);
}

const struct kvt_geometry *kvt__store_geometry(const struct kvt_store *s)
{
	if (s->client) return kvt__client_geometry(s->client);
	return &s->geo;
}

const uint8_t *kvt__store_ns_id(const struct kvt_store *s)
{
	if (s->client) return kvt__client_ns_id(s->client);
	return s->ns_id;
}

/* The accessors answer while the store is closing, the local store's until its free (what
 * they return lives as long); a client store's are refused once its close has begun (the
 * client's info goes with it). */
const struct kvt_geometry *kvt_store_geometry(const struct kvt_store *s)
{
	if (enter_answering(s, s && !s->client) < 0)
		return NULL;
	const struct kvt_geometry *g = kvt__store_geometry(s);
	kvt__store_leave(s);
	return g;
}

const uint8_t *kvt_store_ns_id(const struct kvt_store *s)
{
	if (enter_answering(s, s && !s->client) < 0)
		return NULL;
	const uint8_t *id = kvt__store_ns_id(s);
	kvt__store_leave(s);
	return id;
}

int kvt_store_tier_count(const struct kvt_store *s)
{
	int rc = enter_answering(s, s && !s->client);
	if (rc < 0)
		return rc;
	rc = s->client ? kvt__client_tier_count(s->client) : s->n_links;
	kvt__store_leave(s);
	return rc;
}

const char *kvt_store_tier_name(const struct kvt_store *s, int tier)
{
	if (enter_answering(s, s && !s->client) < 0)
		return "none";
	const char *name = s->client			    ? kvt__client_tier_name(s->client, tier)
			   : tier >= 0 && tier < s->n_links ? s->links[tier].name
							    : "none";
	kvt__store_leave(s);
	return name;
}

uint64_t kvt__store_late_held(const struct kvt_store *s, int pos, uint64_t *cap)
{
	if (cap)
		*cap = s->client ? 0 : s->late_cap;
	if (s->client || pos < 0 || pos >= s->n_links || !s->links[pos].t)
		return 0;
	return atomic_load(&s->links[pos].late_bytes);
}

uint64_t kvt__store_sync_timeout_ms(const struct kvt_store *s)
{
	return s->client ? 30000 : s->sync_timeout_ms;
}

struct kvt_tier *kvt__store_tier(struct kvt_store *s, int pos)
{
	if (s->client) return NULL;
	return pos >= 0 && pos < s->n_links ? s->links[pos].t : NULL;
}

/* Admit one operation: -ECANCELED while closing, -EAGAIN past store.max_inflight, else 0
 * with its completion node reserved. Undo with kvt__e_unadmit() if it then fails to start. */
int kvt__e_admit_inflight(struct kvt_store *s)
{
	if (atomic_load(&s->closing))
		return -ECANCELED;
	if (atomic_fetch_add(&s->inflight, 1) >= s->max_inflight) {
		atomic_fetch_sub(&s->inflight, 1);
		return -EAGAIN;
	}
	if (kvt__e_cq_reserve(s) < 0) {
		atomic_fetch_sub(&s->inflight, 1);
		return -ENOMEM;
	}
	return 0;
}

void kvt__e_unadmit(struct kvt_store *s)
{
	kvt__e_cq_unreserve(s);
	atomic_fetch_sub(&s->inflight, 1);
}

/* ------------------------------------------------------------ stats */

static int stats(struct kvt_store *s, struct kvt_stats *out)
{
	if (s->client) return kvt__client_stats(s->client, out);
	if (!out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->n_tiers = (uint32_t)s->n_links;
	for (int i = 0; i < s->n_links; i++) {
		struct link *l = &s->links[i];
		struct kvt_tier_stats *t = &out->tier[i];
		if (l->t)
			l->t->ops->stats(l->t, t);
		else
			kvt__dram_stats(s->dram, t);
		snprintf(t->name, sizeof(t->name), "%s", l->name);
		t->hits = atomic_load(&l->hits);
		t->misses = atomic_load(&l->misses);
		/* A tier with drop_corrupt counts the objects the engine found bad itself. */
		if (!l->t || !l->t->ops->drop_corrupt)
			t->checksum_failures += atomic_load(&l->checksum_failures);
		t->errors += atomic_load(&l->errors);
		/* Refusals for room: counted once, whether or not the tier counts them too. */
		t->writes_skipped = KVT_MAX(t->writes_skipped, atomic_load(&l->writes_refused)) +
				    atomic_load(&l->writes_skipped);
		t->deadline_misses = atomic_load(&l->deadline_misses);
		t->deadline_extensions = atomic_load(&l->deadline_extensions);
		out->late_held_bytes[i] = kvt__store_late_held(s, i, NULL);
	}
	(void)kvt__store_late_held(s, -1, &out->late_held_cap_bytes);
	out->puts = atomic_load(&s->puts);
	out->gets = atomic_load(&s->gets);
	out->lookups = atomic_load(&s->lookups);
	out->prefetches = atomic_load(&s->prefetches);
	out->lookup_chunks = atomic_load(&s->lookup_chunks);
	out->lookup_hit_chunks = atomic_load(&s->lookup_hit_chunks);
	out->promotions = atomic_load(&s->promotions);
	out->promotions_discarded = atomic_load(&s->promotions_discarded);
	out->evicted_unsaved = s->dram ? kvt__dram_evicted_unsaved(s->dram) : 0;
	pthread_mutex_lock(&s->wb_lock);
	out->write_behind_pending = s->wb_pending;
	pthread_mutex_unlock(&s->wb_lock);
	out->dram_alloc_bytes = kvt__alloc_bytes();
	return 0;
}

int kvt_stats(struct kvt_store *s, struct kvt_stats *out)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	rc = stats(s, out);
	kvt__store_leave(s);
	return rc;
}

void kvt__store_waits(struct kvt_store *s, struct kvt__store_waits *out)
{
	memset(out, 0, sizeof(*out));
	if (s->client)
		return;
	out->ops = atomic_load(&s->inflight);
	out->deadline_ceiling_ms = s->deadline_ceiling_ns / 1000000;
	pthread_mutex_lock(&s->guard_lock);
	out->tier_calls = s->heap_n;
	pthread_mutex_unlock(&s->guard_lock);
	pthread_mutex_lock(&s->wb_lock);
	out->wb_jobs = s->wb_pending;
	struct kvt_list *p;
	kvt_list_for_each(p, &s->wb)
	{
		struct wb *w = kvt_list_entry(p, struct wb, node);
		for (struct remove_op *o = w->after; o; o = o->next_after)
			out->removes_waiting++;
	}
	pthread_mutex_unlock(&s->wb_lock);
}

/* ------------------------------------------------------------ sync wrappers */

struct waiter {
	pthread_mutex_t m;
	pthread_cond_t c;
	bool done;
	struct kvt_result res;
};

static void waiter_init(struct waiter *w)
{
	pthread_mutex_init(&w->m, NULL);
	pthread_cond_init(&w->c, NULL);
	w->done = false;
}

static void waiter_cb(void *arg, const struct kvt_result *res)
{
	struct waiter *w = arg;
	pthread_mutex_lock(&w->m);
	w->res = *res;
	w->done = true;
	pthread_cond_signal(&w->c);
	pthread_mutex_unlock(&w->m);
}

static int waiter_wait(struct waiter *w, int rc, struct kvt_result *res)
{
	if (rc == 0) {
		pthread_mutex_lock(&w->m);
		while (!w->done)
			pthread_cond_wait(&w->c, &w->m);
		pthread_mutex_unlock(&w->m);
		rc = w->res.status;
		if (res)
			*res = w->res;
	}
	pthread_mutex_destroy(&w->m);
	pthread_cond_destroy(&w->c);
	return rc;
}

const struct kvt_key *kvt__e_skey(const struct kvt_store *s, const struct kvt_key *key,
				  struct kvt_key *out)
{
	return s ? kvt__storage_key(s->ns_id, key, out) : key;
}

int kvt__e_skeys(const struct kvt_store *s, struct kvt_storage_keys *b, const struct kvt_key *keys,
		 size_t n)
{
	return s ? kvt__storage_keys(b, s->ns_id, keys, n) : ((b->keys = NULL), 0);
}

static int put_sync(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		    uint32_t n_tokens, const void *buf, size_t len)
{
	if (s->client) return kvt__client_put_sync(s->client, key, parent, n_tokens, buf, len, 0);
	struct waiter w;
	waiter_init(&w);
	struct kvt_key sk, sp;
	return waiter_wait(&w,
			   kvt__e_do_put(s, kvt__e_skey(s, key, &sk), kvt__e_skey(s, parent, &sp),
					 n_tokens, buf, len, waiter_cb, &w, true),
			   NULL);
}

int kvt_put_sync(struct kvt_store *s, const struct kvt_key *key, const struct kvt_key *parent,
		 uint32_t n_tokens, const void *buf, size_t len)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	rc = put_sync(s, key, parent, n_tokens, buf, len);
	kvt__store_leave(s);
	return rc;
}

static int lookup_sync(struct kvt_store *s, const struct kvt_key *keys, size_t n, int8_t *tiers,
		       struct kvt_result *res)
{
	if (s->client) return kvt__client_lookup_sync(s->client, keys, n, tiers, 0, res);
	struct waiter w;
	waiter_init(&w);
	struct kvt_storage_keys b;
	int rc = kvt__e_skeys(s, &b, keys, n);
	rc = waiter_wait(&w, rc ? rc : kvt__e_do_lookup(s, b.keys, n, tiers, waiter_cb, &w, true),
			 res);
	kvt__storage_keys_free(&b);
	return rc;
}

int kvt__lookup_sync_res(struct kvt_store *s, const struct kvt_key *keys, size_t n,
			 int8_t *tiers, struct kvt_result *res)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	rc = lookup_sync(s, keys, n, tiers, res);
	kvt__store_leave(s);
	return rc;
}

int kvt_lookup_sync(struct kvt_store *s, const struct kvt_key *keys, size_t n, int8_t *tiers)
{
	return kvt__lookup_sync_res(s, keys, n, tiers, NULL);
}

static int get_sync(struct kvt_store *s, const struct kvt_key *key, uint32_t layer_begin,
		    uint32_t layer_end, void *buf, size_t len, struct kvt_result *res)
{
	if (s->client) return kvt__client_get_sync(s->client, key, NULL, layer_begin, layer_end, buf, len, 0, res);
	struct waiter w;
	waiter_init(&w);
	struct kvt_key sk;
	return waiter_wait(&w,
			   kvt__e_do_get(s, kvt__e_skey(s, key, &sk), NULL, layer_begin, layer_end, buf,
					 len, waiter_cb, &w, true),
			   res);
}

int kvt_get_sync(struct kvt_store *s, const struct kvt_key *key, uint32_t layer_begin,
		 uint32_t layer_end, void *buf, size_t len, struct kvt_result *res)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	rc = get_sync(s, key, layer_begin, layer_end, buf, len, res);
	kvt__store_leave(s);
	return rc;
}

/* The gate is held from the start to the callback (a close waits for both). */
struct gated {
	struct kvt_store *s;
	kvt_cb cb;
	void *arg;
};

static void gated_cb(void *arg, const struct kvt_result *res)
{
	struct gated g = *(struct gated *)arg;
	kvt__free(arg);
	g.cb(g.arg, res);
	kvt__store_leave(g.s);
}

static struct gated *gated_start(struct kvt_store *s, kvt_cb cb, void *arg, int *rc)
{
	struct gated *g = NULL;
	if ((*rc = kvt__store_enter(s)) < 0)
		return NULL;
	if (s->client || !(g = kvt__malloc(sizeof(*g)))) {
		*rc = s->client ? -ENOTSUP : -ENOMEM; /* the daemon's own store is in process */
		kvt__store_leave(s);
		return NULL;
	}
	*g = (struct gated){.s = s, .cb = cb, .arg = arg};
	return g;
}

static int gated_end(struct kvt_store *s, struct gated *g, int rc)
{
	if (rc < 0) { /* no callback comes */
		kvt__free(g);
		kvt__store_leave(s);
	}
	return rc;
}

int kvt__store_get_direct(struct kvt_store *s, const struct kvt_key *key,
			  const struct kvt_key *parent, uint32_t layer_begin, uint32_t layer_end,
			  void *buf, size_t len, kvt_cb cb, void *arg)
{
	int rc;
	struct gated *g = gated_start(s, cb, arg, &rc);
	if (!g)
		return rc;
	struct kvt_key sk, sp;
	return gated_end(s, g,
			 kvt__e_do_get(s, kvt__e_skey(s, key, &sk), kvt__e_skey(s, parent, &sp),
				       layer_begin, layer_end, buf, len, gated_cb, g, true));
}

int kvt__store_put_direct(struct kvt_store *s, const struct kvt_key *key,
			  const struct kvt_key *parent, uint32_t n_tokens, const void *buf,
			  size_t len, kvt_cb cb, void *arg)
{
	int rc;
	struct gated *g = gated_start(s, cb, arg, &rc);
	if (!g)
		return rc;
	struct kvt_key sk, sp;
	return gated_end(s, g,
			 kvt__e_do_put(s, kvt__e_skey(s, key, &sk), kvt__e_skey(s, parent, &sp),
				       n_tokens, buf, len, gated_cb, g, true));
}

int kvt__store_lookup_direct(struct kvt_store *s, const struct kvt_key *keys, size_t n,
			     int8_t *tiers, kvt_cb cb, void *arg)
{
	int rc;
	struct gated *g = gated_start(s, cb, arg, &rc);
	if (!g)
		return rc;
	struct kvt_storage_keys b;
	rc = kvt__e_skeys(s, &b, keys, n);
	rc = rc ? rc : kvt__e_do_lookup(s, b.keys, n, tiers, gated_cb, g, true); /* copies them */
	kvt__storage_keys_free(&b);
	return gated_end(s, g, rc);
}

int kvt__store_prefetch_direct(struct kvt_store *s, const struct kvt_key *keys, size_t n,
			       uint64_t deadline_ns, kvt_cb cb, void *arg)
{
	int rc;
	struct gated *g = gated_start(s, cb, arg, &rc);
	if (!g)
		return rc;
	struct kvt_storage_keys b;
	rc = kvt__e_skeys(s, &b, keys, n);
	rc = rc ? rc : kvt__e_do_prefetch(s, b.keys, n, deadline_ns, gated_cb, g, true);
	kvt__storage_keys_free(&b);
	return gated_end(s, g, rc);
}

int kvt__store_remove_direct(struct kvt_store *s, const struct kvt_key *key, kvt_cb cb,
			     void *arg)
{
	int rc;
	struct gated *g = gated_start(s, cb, arg, &rc);
	if (!g)
		return rc;
	struct kvt_key sk;
	return gated_end(s, g, kvt__e_do_remove(s, kvt__e_skey(s, key, &sk), gated_cb, g, true));
}

int kvt__store_flush_direct(struct kvt_store *s, kvt_cb cb, void *arg,
			    _Atomic uint64_t *unsaved_seen)
{
	int rc;
	struct gated *g = gated_start(s, cb, arg, &rc);
	if (!g)
		return rc;
	return gated_end(s, g, kvt__e_do_flush(s, gated_cb, g, true, unsaved_seen));
}

uint64_t kvt__store_evicted_unsaved(struct kvt_store *s)
{
	return s->dram ? kvt__dram_evicted_unsaved(s->dram) : 0;
}

/* A prefetch_sync with a deadline: waited for until then at most, the prefetch left to
 * finish on its own after (its fills land in DRAM). The box is on the heap, freed by
 * whichever of the waiter and the completion comes last. */
struct pf_box {
	pthread_mutex_t m;
	pthread_cond_t c;
	bool done, abandoned;
	int status;
};

static void pf_box_cb(void *arg, const struct kvt_result *res)
{
	struct pf_box *b = arg;
	pthread_mutex_lock(&b->m);
	bool gone = b->abandoned;
	b->status = res->status;
	b->done = true;
	pthread_cond_signal(&b->c);
	pthread_mutex_unlock(&b->m);
	if (gone) {
		pthread_mutex_destroy(&b->m);
		pthread_cond_destroy(&b->c);
		kvt__free(b);
	}
}

/* 0 or -ETIME by the deadline (kvt__now_ns's clock); the box is the callback's from then
 * on if it had not come. */
static int pf_box_wait(struct pf_box *b, uint64_t deadline_ns)
{
	pthread_mutex_lock(&b->m);
	while (!b->done) {
		uint64_t now = kvt__now_ns();
		if (now >= deadline_ns) {
			b->abandoned = true;
			pthread_mutex_unlock(&b->m);
			return -ETIME;
		}
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t ns = (uint64_t)ts.tv_nsec + KVT_MIN(deadline_ns - now, 1000000000ull);
		ts.tv_sec += (time_t)(ns / 1000000000u);
		ts.tv_nsec = (long)(ns % 1000000000u);
		pthread_cond_timedwait(&b->c, &b->m, &ts);
	}
	int rc = b->status;
	pthread_mutex_unlock(&b->m);
	pthread_mutex_destroy(&b->m);
	pthread_cond_destroy(&b->c);
	kvt__free(b);
	return rc;
}

/* With a deadline the call returns by it: the chunks resident then, or -ETIME if the
 * prefetch had not finished (its lookup or fills still out on a tier; they go on and land
 * in DRAM). Until 2026-12-05 the deadline only stopped fills from starting, and the call
 * waited for the tiers' own deadlines. */
static int prefetch_sync(struct kvt_store *s, const struct kvt_key *keys, size_t n,
			 uint64_t deadline_ns)
{
	if (s->client) return kvt__client_prefetch_sync(s->client, keys, n, deadline_ns);
	struct kvt_storage_keys b;
	int rc = kvt__e_skeys(s, &b, keys, n);
	if (rc == 0 && deadline_ns) {
		struct pf_box *box = kvt__calloc(1, sizeof(*box));
		pthread_condattr_t ca;
		if (!box) {
			rc = -ENOMEM;
		} else {
			pthread_mutex_init(&box->m, NULL);
			pthread_condattr_init(&ca);
			pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
			pthread_cond_init(&box->c, &ca);
			pthread_condattr_destroy(&ca);
			rc = kvt__e_do_prefetch(s, b.keys, n, deadline_ns, pf_box_cb, box, true);
			if (rc < 0) {
				pthread_mutex_destroy(&box->m);
				pthread_cond_destroy(&box->c);
				kvt__free(box);
			} else {
				rc = pf_box_wait(box, deadline_ns);
			}
		}
		kvt__storage_keys_free(&b);
		return rc;
	}
	struct waiter w;
	waiter_init(&w);
	rc = waiter_wait(
		&w, rc ? rc : kvt__e_do_prefetch(s, b.keys, n, deadline_ns, waiter_cb, &w, true),
		NULL);
	kvt__storage_keys_free(&b);
	return rc;
}

int kvt_prefetch_sync(struct kvt_store *s, const struct kvt_key *keys, size_t n,
		      uint64_t deadline_ns)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	rc = prefetch_sync(s, keys, n, deadline_ns);
	kvt__store_leave(s);
	return rc;
}

static int remove_sync(struct kvt_store *s, const struct kvt_key *key)
{
	if (s->client) return kvt__client_remove_sync(s->client, key);
	struct waiter w;
	waiter_init(&w);
	struct kvt_key sk;
	return waiter_wait(&w, kvt__e_do_remove(s, kvt__e_skey(s, key, &sk), waiter_cb, &w, true),
			   NULL);
}

int kvt_remove_sync(struct kvt_store *s, const struct kvt_key *key)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	rc = remove_sync(s, key);
	kvt__store_leave(s);
	return rc;
}

bool kvt__store_protected(const struct kvt_store *s)
{
	if (s->client) return false;
	return s->prot != NULL;
}

bool kvt__store_encrypts(const struct kvt_store *s)
{
	if (s->client) return false;
	return kvt__protect_encrypts(s->prot);
}

int kvt__store_remove_stored_sync(struct kvt_store *s, const struct kvt_key *storage_key)
{
	if (s->client) return -ENOTSUP;
	struct waiter w;
	waiter_init(&w);
	return waiter_wait(&w, kvt__e_do_remove(s, storage_key, waiter_cb, &w, true), NULL);
}

static int flush_sync(struct kvt_store *s)
{
	if (s->client) return kvt__client_flush_sync(s->client);
	struct waiter w;
	waiter_init(&w);
	return waiter_wait(&w, kvt__e_do_flush(s, waiter_cb, &w, true, NULL), NULL);
}

int kvt_flush_sync(struct kvt_store *s)
{
	int rc = kvt__store_enter(s);
	if (rc < 0)
		return rc;
	rc = flush_sync(s);
	kvt__store_leave(s);
	return rc;
}

void kvt__store_count_get(struct kvt_store *s)
{
	atomic_fetch_add(&s->gets, 1);
}

struct kvt_dram *kvt__store_dram(struct kvt_store *s)
{
	if (s->client) return NULL;
	return s->dram;
}

/* A client-mode store (src/daemon_client.c): a shell whose calls all dispatch to c. */
int kvt__store_new_client(struct kvt_client *c, const struct kvt_log *log,
			  struct kvt_store **out)
{
	struct kvt_store *s = kvt__calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->client = c;
	s->log = *log; /* close's own lines (wait_dev_ops) */
	*out = s;
	return 0;
}

struct kvt_client *kvt__store_client(struct kvt_store *s)
{
	return s->client;
}
