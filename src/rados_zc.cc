/*
 * rados_zc.cc - the one C++ helper of src/tier_rados.c (see src/rados_zc.h for why): a
 * whole-object write that hands librados a bufferlist over the caller's memory instead of
 * a copy of it. The memory is wrapped as "static" buffers (librados never frees them); the
 * handle keeps its own reference to those buffers, so their reference count tells when
 * librados has dropped every one of its own (after the messenger has sent the bytes and
 * the objecter has finished the op) - only then may the caller reuse the memory.
 */
#include <errno.h>

#include <climits>
#include <memory>
#include <new>
#include <string>

#include <rados/librados.hpp>

#include "rados_zc.h"

namespace {

/* Our reference to the buffers handed to librados. */
struct zc_hold {
	ceph::bufferlist bl;
};

/* aio_write_full threw after the hold was published: a failed call runs no completion
 * (the caller's contract for rc < 0), so the hold is ours to free (until 2026-12-06 it was
 * left set and leaked). */
void drop_published(void **hold)
{
	delete static_cast<zc_hold *>(*hold);
	*hold = nullptr;
}

} // namespace

extern "C" int kvt__rados_zc_write_full(rados_ioctx_t io, const char *oid, rados_completion_t c,
					const void *obj, size_t len, void **hold)
{
	*hold = nullptr;
	try {
		/* Freed if building the write throws (bad_alloc): nothing was issued yet. */
		std::unique_ptr<zc_hold> own(new zc_hold);
		zc_hold *h = own.get();
		/* A buffer's length is an unsigned int: a larger object is several buffers. */
		const size_t piece = 1u << 30;
		char *p = static_cast<char *>(const_cast<void *>(obj));
		for (size_t off = 0; off < len; off += piece) {
			size_t n = len - off < piece ? len - off : piece;
			h->bl.push_back(ceph::buffer::create_static(static_cast<unsigned>(n), p + off));
		}
		librados::IoCtx ctx; /* a second handle on the C ioctx: pool and namespace */
		librados::IoCtx::from_rados_ioctx_t(io, ctx);
		/* The C completion seen through the C++ type. Never destroyed: its destructor
		 * would release the completion, which the C caller owns and releases. */
		alignas(librados::AioCompletion) unsigned char mem[sizeof(librados::AioCompletion)];
		auto *ac = new (mem)
		    librados::AioCompletion(static_cast<librados::AioCompletionImpl *>(c));
		/* Published before the write is issued: its completion may run on librados'
		 * finisher thread before aio_write_full returns, and must find the hold then
		 * (to release it, and to see whether librados still references the buffer). */
		*hold = own.release();
		int rc = ctx.aio_write_full(oid, ac, h->bl); /* shares the buffers, copies none */
		if (rc < 0) { /* no completion will run */
			*hold = nullptr;
			delete h;
			return rc;
		}
		return 0;
	} catch (const std::bad_alloc &) {
		drop_published(hold);
		return -ENOMEM;
	} catch (...) {
		drop_published(hold);
		return -EIO;
	}
}

extern "C" int kvt__rados_zc_busy(void *hold)
{
	auto *h = static_cast<zc_hold *>(hold);
	for (const auto &bp : h->bl.buffers())
		if (bp.raw_nref() > 1)
			return 1;
	return 0;
}

extern "C" void kvt__rados_zc_release(void *hold)
{
	delete static_cast<zc_hold *>(hold);
}
