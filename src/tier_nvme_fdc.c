/*
 * tier_nvme_fdc.c - the NVMe tier's cache of read descriptors (nvme.open_files): an open
 * per read would put a slow metadata operation in front of every read. Ring thread only;
 * an evicted object's cached fd is closed at its last unref, in the background (its close
 * frees the blocks).
 */
#include "tier_nvme_internal.h"

void nv_fdc_list_unlink(struct nv *s, struct nv_fdc *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		s->fdc_head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		s->fdc_tail = c->prev;
	c->prev = c->next = NULL;
	s->nfdc--;
}

/* fd cache entries are recycled (ring thread only): no allocation per open. */
static void fdc_recycle(struct nv *s, struct nv_fdc *c)
{
	c->next = s->free_fdc;
	s->free_fdc = c;
}

void nv_fdc_free(struct nv *s, struct nv_fdc *c)
{
	close(c->fd);
	fdc_recycle(s, c);
}

/* The last reference to an evicted object's file: its close frees the blocks (slow, see
 * nv_ent_unlink), so it runs on io_uring's workers. */
static void fdc_free_async(struct nv *s, struct nv_fdc *c)
{
	struct io_uring_sqe *sqe = s->ring_ready ? io_uring_get_sqe(&s->ring) : NULL;
	if (!sqe) {
		nv_fdc_free(s, c);
		return;
	}
	KVT_DEBUG(s->log, "nvme: closing a removed object's last fd in the background");
	io_uring_prep_close(sqe, c->fd);
	io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
	io_uring_sqe_set_data(sqe, &s->trash);
	s->trash_inflight++;
	fdc_recycle(s, c);
}

/* The object is going away: its cached fd closes now, or at its last unref. */
void nv_fdc_detach(struct nv *s, struct nv_ent *e)
{
	struct nv_fdc *c = e->fdc;
	if (!c)
		return;
	e->fdc = NULL;
	c->ent = NULL;
	nv_fdc_list_unlink(s, c);
	if (!c->refs)
		nv_fdc_free(s, c);
}

static void fdc_trim(struct nv *s)
{
	struct nv_fdc *c = s->fdc_tail, *pv;
	for (; c && s->nfdc > s->open_files; c = pv) {
		pv = c->prev;
		if (c->refs)
			continue;
		c->ent->fdc = NULL;
		nv_fdc_list_unlink(s, c);
		nv_fdc_free(s, c);
	}
}

/* Out of descriptors: close every idle cached fd. Returns how many were closed. */
uint32_t nv_fdc_shed(struct nv *s)
{
	uint32_t keep = s->open_files, before = s->nfdc;
	s->open_files = 0;
	fdc_trim(s);
	s->open_files = keep;
	return before - s->nfdc;
}

void nv_fdc_put(struct nv *s, struct nv_fdc *c)
{
	if (--c->refs)
		return;
	if (!c->ent)
		fdc_free_async(s, c);
	else if (s->nfdc > s->open_files)
		fdc_trim(s);
}

void nv_fdc_use(struct nv *s, struct nv_fdc *c)
{
	c->refs++;
	if (s->fdc_head == c)
		return;
	nv_fdc_list_unlink(s, c);
	c->next = s->fdc_head;
	if (s->fdc_head)
		s->fdc_head->prev = c;
	else
		s->fdc_tail = c;
	s->fdc_head = c;
	s->nfdc++;
}

/* A freshly opened read fd for op: cache it on the entry if the entry still wants one. */
struct nv_fdc *nv_fdc_adopt(struct nv *s, struct nv_op *op, int fd)
{
	struct nv_fdc *c = s->free_fdc;
	if (c)
		s->free_fdc = c->next;
	else if (!(c = kvt__malloc(sizeof(*c)))) {
		close(fd);
		return NULL;
	}
	memset(c, 0, sizeof(*c));
	c->fd = fd;
	c->refs = 1;
	struct nv_ent *e = nv_ent_find(s, &op->key);
	if (e && e->fdc) {
		/* Another read opened it meanwhile: share that one. */
		nv_fdc_free(s, c);
		nv_fdc_use(s, e->fdc);
		return e->fdc;
	}
	if (e) {
		c->ent = e;
		e->fdc = c;
		c->next = s->fdc_head;
		if (s->fdc_head)
			s->fdc_head->prev = c;
		else
			s->fdc_tail = c;
		s->fdc_head = c;
		s->nfdc++;
		if (s->nfdc > s->open_files)
			fdc_trim(s);
	}
	return c;
}
