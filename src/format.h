/*
 * format.h - the canonical chunk object, format v1 (docs/FORMAT.md).
 *
 * An object is a 4 KiB header followed by one segment per layer, each starting on a
 * 4 KiB boundary (so O_DIRECT reads of one layer work and a Range GET fetches a layer).
 * The header carries the geometry, namespace id, key, n_tokens, per-layer offsets and
 * CRC32C, and its own CRC32C. Decoding checks everything before trusting any length:
 * an attacker-chosen header can never make a reader allocate or read out of bounds.
 */
#ifndef KVT_FORMAT_H
#define KVT_FORMAT_H

#include <stdbool.h>
#include <stdint.h>

#include "kvtier.h"

#define KVT_FORMAT_MAGIC "KVTCHNK1"
#define KVT_FORMAT_VERSION 1

/* Header flags (docs/FORMAT.md 5b). A reader that predates them refuses flagged objects. */
#define KVT_FLAG_MAC 0x0001u       /* header bytes [3200, 3232): HMAC-SHA-256 of the object */
#define KVT_FLAG_ENCRYPTED 0x0002u /* layers are AES-256-GCM ciphertext; nonce and tag below */
/* Byte offsets the protection code (src/protect.c) reads and writes. */
#define KVT_HDR_OFF_FLAGS 10
#define KVT_HDR_OFF_LAYER_CRC 2176
#define KVT_HDR_OFF_MAC 3200       /* 32 bytes */
#define KVT_HDR_OFF_GCM_NONCE 3232 /* 12 bytes */
#define KVT_HDR_OFF_GCM_TAG 3244   /* 16 bytes */
#define KVT_HDR_OFF_CRC 4092
#define KVT_HDR_AAD_BYTES 128 /* GCM's additional data: header bytes [0, 128) */

/* The decoded header. */
struct kvt_header {
	uint16_t version;
	uint16_t flags;
	struct kvt_geometry geometry;
	uint32_t n_tokens;
	uint64_t object_bytes; /* whole object, header included */
	uint8_t ns_id[KVT_NS_ID_BYTES];
	struct kvt_key key;
	uint64_t layer_offset[KVT_MAX_LAYERS];
	uint32_t layer_crc[KVT_MAX_LAYERS]; /* CRC32C of each layer's dense bytes (no padding) */
	uint8_t mac[32];                    /* KVT_FLAG_MAC */
	uint8_t gcm_nonce[12], gcm_tag[16]; /* KVT_FLAG_ENCRYPTED */
};

/* What a reader expects; NULL members are not checked. */
struct kvt_expect {
	const struct kvt_geometry *geometry; /* must match exactly */
	const uint8_t *ns_id;                /* must match */
	const struct kvt_key *key;           /* must match */
	uint64_t max_object_bytes;           /* 0: 4 GiB */
};

/* Build an object in obj (kvt_object_bytes(g, n_tokens) bytes, KVT_ALIGN-aligned is best)
 * from a dense layer-major payload: writes the header, copies each layer, zero-pads, and
 * computes the CRCs. 0 or -EINVAL. */
int kvt__object_encode(void *obj, uint64_t obj_len, const struct kvt_geometry *g,
		       const uint8_t ns_id[KVT_NS_ID_BYTES], const struct kvt_key *key,
		       uint32_t n_tokens, const void *payload, uint64_t payload_len);

/* The body of obj is already in place (layer l's dense bytes at its layer offset, written
 * by a DMA engine): zero the padding, compute the layer CRCs and write the header. */
/* The object whose payload follows its header verbatim (every layer a multiple of
 * KVT_ALIGN, so no padding): its bytes are the header, then the caller's payload. */
bool kvt__object_contiguous(const struct kvt_geometry *g, uint32_t n_tokens);
/* Only the header (KVT_HEADER_BYTES at hdr) of such an object, its layer CRCs computed
 * from payload where it is: with the payload written after it, the object
 * kvt__object_encode would have built, without copying the payload. -EINVAL if the
 * object is not contiguous. */
int kvt__object_header(void *hdr, const struct kvt_geometry *g,
		       const uint8_t ns_id[KVT_NS_ID_BYTES], const struct kvt_key *key,
		       uint32_t n_tokens, const void *payload, uint64_t payload_len);
/* The CRC32C of the whole object (header, then payload) of such an object, from its header
 * alone (KVT_HEADER_BYTES at hdr, as kvt__object_header wrote it): the header's own bytes
 * and its layer CRCs combined (kvt__crc32c_combine), so the payload is not read again -
 * the value a pass over the object's bytes gives when they match their layer CRCs. 0, or
 * -EINVAL when hdr does not decode, the object is not contiguous, or it is protected (its
 * layers are not what the CRCs cover). */
int kvt__object_crc(const void *hdr, uint32_t *crc);
int kvt__object_seal(void *obj, uint64_t obj_len, const struct kvt_geometry *g,
		     const uint8_t ns_id[KVT_NS_ID_BYTES], const struct kvt_key *key,
		     uint32_t n_tokens);

/* Decode and check a header (KVT_HEADER_BYTES bytes): magic, version, header CRC,
 * geometry sanity and match, n_tokens, offsets, object size. 0 or -EBADMSG. */
int kvt__header_decode(const void *hdr, struct kvt_header *out, const struct kvt_expect *exp);

/* Check the CRC of layers [l0, l1) given the object's bytes from offset
 * layer_offset[l0] on (base points at that offset). 0 or -EBADMSG. */
int kvt__layers_verify(const struct kvt_header *h, uint32_t l0, uint32_t l1, const void *base);

/* Decode + check the header and every layer CRC of a whole object: obj_len bytes that must
 * hold at least the header's object size (bytes past it are not part of the object, and are
 * ignored: a reader reads a fixed length, so a stored copy with bytes appended is served
 * the same by every reader and by `kvtier verify`). 0 or -EBADMSG. */
int kvt__object_verify(const void *obj, uint64_t obj_len, const struct kvt_expect *exp,
		       struct kvt_header *out);

/* Copy layers [l0, l1) out of a verified object into a dense buffer (checks the CRCs of
 * exactly those layers first). Returns bytes copied or -EBADMSG / -EINVAL (dst too small). */
int64_t kvt__object_extract(const struct kvt_header *h, const void *obj, uint32_t l0, uint32_t l1,
			    void *dst, uint64_t dst_len);

/* The same copy without the CRC checks, for objects already verified when they entered
 * memory (DRAM slots: encoded from the caller's bytes or checked on promotion). */
int64_t kvt__object_copy_layers(const struct kvt_header *h, const void *obj, uint32_t l0,
				uint32_t l1, void *dst, uint64_t dst_len);

#endif
