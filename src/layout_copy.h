/*
 * layout_copy.h - the unchecked strided copies of layout_copy.c, for rows_io.c, which
 * checks a layout once when a handle is opened instead of on every chunk.
 */
#ifndef KVT_LAYOUT_COPY_H
#define KVT_LAYOUT_COPY_H

#include "kvtier_layout.h"

void kvt__row_from_canonical(const struct kvt_row_layout *lay, const void *chunk, void *row);
void kvt__row_to_canonical(const struct kvt_row_layout *lay, const void *row, void *chunk);

#endif
