/*
 * nvme_index_test.c - the NVMe tier's in-memory index (src/tier_nvme_index.c) while its
 * hash table grows a little at a time: every key stored is found, every key removed is
 * gone, and a walk (the tier's scan) sees each entry exactly once - checked after every
 * insert and remove across several doublings, in the middle of each. Why a unit test:
 * the integration tests store a few thousand objects at most, and a key lost in the old
 * table while its bucket moves reads as a miss, not an error.
 * kvt-test-labels: onethread (no second thread, so nothing for TSan to check: scripts/test.sh
 * leaves it out of the TSan pass)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tier_nvme_internal.h"

#define N 20000 /* 1,024 buckets at first: four doublings, the last under way at the end */

static void key_of(uint32_t i, struct kvt_key *k)
{
	memset(k, 0, sizeof(*k));
	memcpy(k->bytes, &i, sizeof(i));
	k->bytes[31] = 0x5a;
}

static struct nv *new_index(void)
{
	struct nv *s = calloc(1, sizeof(*s));
	assert_non_null(s);
	pthread_mutex_init(&s->ilock, NULL);
	assert_int_equal(nv_index_init(s), 0);
	return s;
}

static void free_index(struct nv *s)
{
	while (s->lru_head)
		nv_ent_remove(s, s->lru_head);
	nv_index_free(s);
	pthread_mutex_destroy(&s->ilock);
	free(s);
}

struct seen {
	uint8_t *count; /* per key index */
	uint64_t n, bytes;
};

static int count_one(void *arg, const struct kvt_key *k, uint64_t bytes)
{
	struct seen *v = arg;
	uint32_t i;
	memcpy(&i, k->bytes, sizeof(i));
	if (i < N)
		v->count[i]++;
	v->n++;
	v->bytes += bytes;
	return 0;
}

/* Every key in [0, hi) is where present[] says, and the walk sees the present ones once. */
static void check_all(struct nv *s, const bool *present, uint32_t hi)
{
	uint64_t want = 0;
	for (uint32_t i = 0; i < hi; i++) {
		struct kvt_key k;
		key_of(i, &k);
		struct nv_ent *e = nv_ent_find(s, &k);
		if (present[i]) {
			assert_non_null(e);
			assert_memory_equal(e->key.bytes, k.bytes, sizeof(k.bytes));
			want++;
		} else {
			assert_null(e);
		}
	}
	struct seen v = {.count = calloc(N, 1)};
	assert_non_null(v.count);
	nv_index_walk(s, count_one, &v);
	assert_int_equal(v.n, want);
	for (uint32_t i = 0; i < hi; i++)
		assert_int_equal(v.count[i], present[i] ? 1 : 0);
	assert_int_equal(v.bytes, want * 4096);
	free(v.count);
}

static void test_grows_without_losing_a_key(void **state)
{
	(void)state;
	struct nv *s = new_index();
	bool *present = calloc(N, sizeof(bool));
	assert_non_null(present);
	uint64_t grew_at = 0, doublings = 0, last_nb = s->nbuckets;
	for (uint32_t i = 0; i < N; i++) {
		struct kvt_key k;
		key_of(i, &k);
		assert_non_null(nv_ent_insert(s, &k, 0, 4096));
		present[i] = true;
		/* every third key goes again at once, every seventh an older one: removals
		 * from both tables while a growth is under way */
		if (i % 3 == 0) {
			nv_ent_remove(s, nv_ent_find(s, &k));
			present[i] = false;
		}
		if (i % 7 == 0 && i > 100 && present[i - 100]) {
			struct kvt_key o;
			key_of(i - 100, &o);
			nv_ent_remove(s, nv_ent_find(s, &o));
			present[i - 100] = false;
		}
		if (s->nbuckets != last_nb) {
			doublings++;
			last_nb = s->nbuckets;
			grew_at = i;
			assert_non_null(s->old_buckets); /* moved a little at a time, not at once */
		}
		/* a full check at every growth and in the middle of each move */
		if (i == grew_at || (s->old_buckets && s->old_moved == s->old_nbuckets / 2) ||
		    i % 2500 == 0)
			check_all(s, present, i + 1);
	}
	assert_true(doublings >= 3);
	check_all(s, present, N);
	uint64_t live = 0;
	for (uint32_t i = 0; i < N; i++)
		live += present[i];
	assert_int_equal(s->nents, live);
	free(present);
	free_index(s);
}

/* nv_write_index over an entry of the same key (tier_nvme_write.c; not reached by the
 * tier's own writes, which take the key's entry out of the index at their admission: kept
 * so that an index never holds two entries of a key): the new copy gets a new gen, and the
 * read opens in flight on the old one (opening) are not counted on it - each of them sees
 * the new gen when it completes and counts nothing down, so a count carried over never
 * came back to 0 and the copy's file could never be recycled (until 2026-12-06). */
static void test_write_index_over_an_entry(void **state)
{
	(void)state;
	struct nv *s = new_index();
	struct kvt_key k;
	key_of(7, &k);
	struct nv_ent *e = nv_ent_insert(s, &k, 0, 4096);
	assert_non_null(e);
	e->opening = 1; /* a read's open of this copy in flight */
	uint64_t gen = e->gen;
	struct nv_op *op = calloc(1, sizeof(*op));
	assert_non_null(op);
	op->type = OP_WRITE;
	op->key = k;
	op->len = 8192;
	op->uid = ++s->uids;
	s->reserved = op->len;
	assert_int_equal(nv_write_index(s, op, 0, 0), 0);
	assert_ptr_equal(nv_ent_find(s, &k), e);
	assert_int_equal(s->nents, 1);
	assert_int_equal(e->bytes, 8192);
	assert_int_equal(s->used, 8192);
	assert_int_equal(s->reserved, 0);
	assert_true(e->gen != gen);
	assert_int_equal(e->opening, 0);
	free(op);
	free_index(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_grows_without_losing_a_key),
	    cmocka_unit_test(test_write_index_over_an_entry),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
