/*
 * abi.c - the sizes of the public structures, by name, for bindings that mirror them
 * (the Python package declares them with ctypes in python/kvtier/_lib.py). A field added
 * to a header but not to a mirror makes the library write past the mirror's buffer; with
 * this the binding compares at load and refuses to run instead (kvt_abi_sizeof).
 */
#include <string.h>

#include "kvtier.h"
#include "kvtier_layout.h"

#define ABI_STRUCT(name) { #name, sizeof(struct name) }

static const struct {
	const char *name;
	size_t size;
} abi_structs[] = {
	ABI_STRUCT(kvt_geometry),    ABI_STRUCT(kvt_key),         ABI_STRUCT(kvt_namespace),
	ABI_STRUCT(kvt_result),      ABI_STRUCT(kvt_tier_stats),  ABI_STRUCT(kvt_stats),
	ABI_STRUCT(kvt_event),       ABI_STRUCT(kvt_cost_plan),   ABI_STRUCT(kvt_row_strides),
	ABI_STRUCT(kvt_row_layout),  ABI_STRUCT(kvt_rows_result),
};

size_t kvt_abi_sizeof(const char *struct_name)
{
	if (!struct_name)
		return 0;
	for (size_t i = 0; i < sizeof(abi_structs) / sizeof(abi_structs[0]); i++)
		if (!strcmp(abi_structs[i].name, struct_name))
			return abi_structs[i].size;
	return 0;
}
