/*
 * layout_copy.h - the unchecked strided copies of layout_copy.c, for rows_io.c, which
 * checks a layout once when a handle is opened instead of on every chunk.
 */
#ifndef KVT_LAYOUT_COPY_H
#define KVT_LAYOUT_COPY_H

#include "kvtier_layout.h"

/* layer_stride: bytes from one layer of the chunk to the next (0: dense, as in a chunk
 * buffer; a stored object pads its layers) */
void kvt__row_from_canonical(const struct kvt_row_layout *lay, const void *chunk,
			     uint64_t layer_stride, void *row);
void kvt__row_to_canonical(const struct kvt_row_layout *lay, const void *row, void *chunk);

#endif
