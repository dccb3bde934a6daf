/*
 * ghost.c - two alternating Bloom filters standing in for a list of recently evicted keys
 * (src/ghost.h says why).
 */
#include <errno.h>
#include <string.h>

#include "ghost.h"
#include "internal.h"

struct kvt_ghost {
	uint64_t *bits[2];
	uint64_t nbits, mask;
	uint32_t cur, count[2], half;
};

static uint64_t gmix(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x7fb5d329728ea185ull;
	x ^= x >> 27;
	x *= 0x81dadef4bc2dd44dull;
	x ^= x >> 33;
	return x;
}

int kvt__ghost_create(uint32_t window, struct kvt_ghost **out)
{
	if (!out || window < 2)
		return -EINVAL;
	struct kvt_ghost *g = kvt__calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->half = window / 2;
	uint64_t n = 64;
	while (n < (uint64_t)g->half * 16)
		n <<= 1;
	g->nbits = n;
	g->mask = n - 1;
	g->bits[0] = kvt__calloc(n / 64, sizeof(uint64_t));
	g->bits[1] = kvt__calloc(n / 64, sizeof(uint64_t));
	if (!g->bits[0] || !g->bits[1]) {
		kvt__ghost_destroy(g);
		return -ENOMEM;
	}
	*out = g;
	return 0;
}

void kvt__ghost_destroy(struct kvt_ghost *g)
{
	if (!g)
		return;
	kvt__free(g->bits[0]);
	kvt__free(g->bits[1]);
	kvt__free(g);
}

/* The two probes of a key: both bits in one 512-bit (cache-line) block, so a test or an
 * add touches one line per generation rather than two; at 16 bits per key this costs a
 * fraction of a percent of false positives (1 key in 512 gets one bit twice). The
 * sketch's doorkeeper is one of these filters and can be tens of MiB, where a second
 * cache miss per probe costs more than the probe. */
static void probes(uint64_t x, uint64_t mask, uint64_t *a, uint64_t *c)
{
	*a = x & mask;
	*c = (*a & ~(uint64_t)511) | ((x >> 32) & 511 & mask);
}

static bool in(const uint64_t *b, uint64_t x, uint64_t mask)
{
	uint64_t a, c;
	probes(x, mask, &a, &c);
	return (b[a / 64] >> (a % 64) & 1) && (b[c / 64] >> (c % 64) & 1);
}

void kvt__ghost_add(struct kvt_ghost *g, uint64_t h)
{
	if (g->count[g->cur] >= g->half) { /* the older generation is forgotten */
		g->cur ^= 1;
		memset(g->bits[g->cur], 0, g->nbits / 8);
		g->count[g->cur] = 0;
	}
	uint64_t x = gmix(h), a, c;
	probes(x, g->mask, &a, &c);
	uint64_t *b = g->bits[g->cur];
	b[a / 64] |= 1ull << (a % 64);
	b[c / 64] |= 1ull << (c % 64);
	g->count[g->cur]++;
}

bool kvt__ghost_test(const struct kvt_ghost *g, uint64_t h)
{
	uint64_t x = gmix(h);
	return in(g->bits[0], x, g->mask) || in(g->bits[1], x, g->mask);
}

uint32_t kvt__ghost_size(const struct kvt_ghost *g)
{
	return g->count[0] + g->count[1];
}
