/*
 * rados_zc.h - zero-copy whole-object writes for src/tier_rados.c. librados' C API copies
 * every write buffer into a bufferlist; its C++ API can send straight from the caller's
 * memory. src/rados_zc.cc wraps that one call behind C linkage, so the tier stays C and
 * stays one file. Built only where librados.hpp is installed (Debian: libradospp-dev);
 * elsewhere KVT_HAVE_RADOS_ZC is undefined and the tier uses rados_aio_write_full.
 */
#ifndef KVT_RADOS_ZC_H
#define KVT_RADOS_ZC_H

#include <stddef.h>

#include <rados/librados.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Like rados_aio_write_full(io, oid, c, obj, len), without the copy: librados reads
 * obj[0..len) while the write is in flight. On success *hold is set to a handle that keeps
 * track of librados' references to that memory: the caller keeps obj unchanged until c has
 * completed AND kvt__rados_zc_busy(*hold) is 0, then calls kvt__rados_zc_release(*hold).
 * 0, or -errno (then *hold is NULL and nothing was sent). */
int kvt__rados_zc_write_full(rados_ioctx_t io, const char *oid, rados_completion_t c,
			     const void *obj, size_t len, void **hold);
/* 1 while librados (its messenger, a queued resend) still refers to the memory, else 0. */
int kvt__rados_zc_busy(void *hold);
void kvt__rados_zc_release(void *hold);

#ifdef __cplusplus
}
#endif

#endif
