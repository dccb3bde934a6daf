/*
 * protect.h - optional authentication and encryption of stored objects (docs/FORMAT.md
 * section 5b, docs/SECURITY.md). A shared tier may be writable by nodes that are not
 * trusted: with a MAC key every object carries an HMAC-SHA-256 over its header and layers,
 * and an object without a valid one is never served. A tenant may keep its KV encrypted at
 * rest with its own AES-256-GCM key: without that key the objects are misses, never bytes.
 *
 * The store holds one struct kvt_protect (NULL when both are off). Objects in DRAM are in
 * their stored form, so deeper tiers are written from a slot unchanged; encrypted layers
 * are decrypted as they are copied out to a caller.
 */
#ifndef KVT_PROTECT_H
#define KVT_PROTECT_H

#include <stdint.h>

#include "format.h"
#include "internal.h"

struct kvt_config;
struct kvt_protect;

/* From security.mac_key_file / _env and security.encryption_key_file / _env: *out NULL when
 * none is set. A key is 32 bytes: a file of exactly 32 raw bytes or 64 hex digits (one
 * trailing newline allowed), regular, owned by this user or root, and not readable by group
 * or others; an environment variable of 64 hex digits. Errors are one logged line naming
 * the config key and the file or variable - never the key - and -EACCES / -EINVAL /
 * -errno. */
int kvt__protect_open(const struct kvt_config *cfg, const struct kvt_log *log,
		      struct kvt_protect **out);
void kvt__protect_close(struct kvt_protect *p);
bool kvt__protect_encrypts(const struct kvt_protect *p);

/* After kvt__object_encode / _seal: encrypt the layers in place (encryption on), set the
 * flags, the GCM nonce and tag, the layer CRCs (of the stored bytes), the MAC (MAC on) and
 * the header CRC. p NULL: nothing to do. 0 or -EINVAL / -EIO (OpenSSL failed). */
int kvt__object_protect(void *obj, uint64_t obj_len, const struct kvt_protect *p);

/* After kvt__object_verify(obj) passed and decoded h: may this store serve the object?
 *   0             yes
 *   -EBADMSG      its MAC does not verify: forged or damaged (drop it like a bad CRC)
 *   -EACCES       it lacks the MAC (MAC on) or the encryption (encryption on) this store
 *                 requires: sound, written by someone else's configuration; a miss, kept
 *   -ENOKEY       it is encrypted and this store has no encryption key: a miss, kept
 *   -EKEYREJECTED its GCM tag does not verify under this store's key (another key, or
 *                 damage): a miss, kept */
int kvt__object_authenticate(const void *obj, uint64_t obj_len, const struct kvt_header *h,
			     const struct kvt_protect *p);

/* kvt__object_copy_layers, decrypting encrypted layers (the object was authenticated when
 * it entered memory). -ENOKEY if it is encrypted and p has no key. */
int64_t kvt__object_read_layers(const struct kvt_header *h, const void *obj, uint32_t l0,
				uint32_t l1, void *dst, uint64_t dst_len,
				const struct kvt_protect *p);

/* The MAC check of kvt__object_authenticate for a reader that never holds the whole object
 * (kvtier verify reads it in windows): begin with the object's 4096-byte header and its
 * decoded form, feed every layer's dense bytes in layer order (pieces of any size), end.
 * begin: 1 a check is under way (*out set), 0 nothing to check (p has no MAC key), -EACCES
 * the store requires a MAC and the object has none, -EIO. end: 0 the MAC matches, -EBADMSG
 * it does not (forged or damaged), -EIO; it frees the stream (so does free, to give up). */
struct kvt_mac_stream;
int kvt__mac_stream_begin(const struct kvt_protect *p, const void *hdr,
			  const struct kvt_header *h, struct kvt_mac_stream **out);
int kvt__mac_stream_update(struct kvt_mac_stream *m, const void *buf, size_t len);
int kvt__mac_stream_end(struct kvt_mac_stream *m, const struct kvt_header *h);
void kvt__mac_stream_free(struct kvt_mac_stream *m);

#endif
