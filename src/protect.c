/*
 * protect.c - per-object HMAC-SHA-256 and per-tenant AES-256-GCM encryption at rest
 * (src/protect.h; the byte layout is docs/FORMAT.md section 5b). Both come from OpenSSL's
 * EVP interfaces (AES-NI / SHA-NI code paths), nothing is hand-written.
 *
 * Encryption: the layers' dense bytes, in layer order, are one GCM message under a random
 * 96-bit nonce, with the header's first 128 bytes (flags, geometry, n_tokens, sizes, ns_id,
 * storage key) as additional data, so ciphertext cannot be moved to another name or
 * namespace. The layer CRCs are then those of the ciphertext, so integrity checks (kvtier
 * verify) need no key. GCM is CTR mode underneath: block i of the message uses the counter
 * nonce || be32(i + 2), which lets a layer range be decrypted on its own with AES-256-CTR
 * when it is copied out of an object already authenticated in full.
 *
 * MAC: HMAC-SHA-256 over header bytes [0, 4092) with the MAC field zeroed, then every
 * layer's stored bytes; computed last, so it covers flags, nonce, tag and CRCs.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "config.h"
#include "protect.h"

#define KEY_BYTES 32
#define SCRATCH 65536 /* GCM tag check decrypts into this, a piece at a time */

struct kvt_protect {
	bool mac, enc;
	uint8_t mac_key[KEY_BYTES];
	uint8_t enc_key[KEY_BYTES];
};

/* ------------------------------------------------------------------ keys */

static int unhex(const char *s, size_t n, uint8_t out[KEY_BYTES])
{
	if (n != 2 * KEY_BYTES)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		int v = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (v < 0)
			return -EINVAL;
		if (i % 2)
			out[i / 2] |= (uint8_t)v;
		else
			out[i / 2] = (uint8_t)(v << 4);
	}
	return 0;
}

static int key_from_file(const char *cfg_key, const char *path, uint8_t key[KEY_BYTES],
			 const struct kvt_log *log)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		int e = errno;
		KVT_ERR(log, "%s: %s: %s", cfg_key, path, strerror(e));
		return -e;
	}
	struct stat st;
	int rc = 0;
	uint8_t buf[2 * KEY_BYTES + 2];
	ssize_t n = 0;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		KVT_ERR(log, "%s: %s: %s", cfg_key, path, strerror(-rc));
	} else if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		KVT_ERR(log, "%s: %s is not a regular file", cfg_key, path);
	} else if (st.st_mode & 077) {
		rc = -EACCES;
		KVT_ERR(log, "%s: %s is accessible by group or others (mode %03o): chmod 600 it",
			cfg_key, path, (unsigned)(st.st_mode & 0777));
	} else if (st.st_uid != geteuid() && st.st_uid != 0) {
		rc = -EACCES;
		KVT_ERR(log, "%s: %s belongs to uid %u, neither this user nor root", cfg_key, path,
			(unsigned)st.st_uid);
	} else {
		size_t got = 0;
		while (got < sizeof(buf) &&
		       ((n = read(fd, buf + got, sizeof(buf) - got)) > 0 || (n < 0 && errno == EINTR)))
			got += n > 0 ? (size_t)n : 0;
		if (n < 0) {
			rc = -errno;
			KVT_ERR(log, "%s: %s: %s", cfg_key, path, strerror(-rc));
		} else if (got == KEY_BYTES) {
			memcpy(key, buf, KEY_BYTES);
		} else if ((got == 2 * KEY_BYTES || (got == 2 * KEY_BYTES + 1 &&
						       buf[2 * KEY_BYTES] == '\n')) &&
			   unhex((const char *)buf, 2 * KEY_BYTES, key) == 0) {
			/* 64 hex digits */
		} else {
			rc = -EINVAL;
			KVT_ERR(log, "%s: %s holds %s%zu bytes; a key is 32 raw bytes or 64 hex digits",
				cfg_key, path, got == sizeof(buf) ? "at least " : "", got);
		}
	}
	OPENSSL_cleanse(buf, sizeof(buf));
	close(fd);
	return rc;
}

static int key_from_env(const char *cfg_key, const char *name, uint8_t key[KEY_BYTES],
			const struct kvt_log *log)
{
	const char *v = getenv(name);
	if (!v || !*v) {
		KVT_ERR(log, "%s: environment variable %s is not set", cfg_key, name);
		return -EINVAL;
	}
	if (unhex(v, strlen(v), key) < 0) {
		KVT_ERR(log, "%s: %s holds %zu characters; a key there is 64 hex digits", cfg_key,
			name, strlen(v));
		return -EINVAL;
	}
	return 0;
}

/* One key from its _file or _env config key; *have false when neither is set. */
static int load_key(const struct kvt_config *cfg, const char *file_key, const char *file,
		    const char *env_key, const char *env, uint8_t key[KEY_BYTES], bool *have,
		    const struct kvt_log *log)
{
	*have = false;
	if (*file && *env) {
		KVT_ERR(log, "%s and %s are both set: use one", file_key, env_key);
		return -EINVAL;
	}
	int rc = *file ? key_from_file(file_key, file, key, log)
		 : *env ? key_from_env(env_key, env, key, log)
			: 0;
	*have = rc == 0 && (*file || *env);
	(void)cfg;
	return rc;
}

int kvt__protect_open(const struct kvt_config *cfg, const struct kvt_log *log,
		      struct kvt_protect **out)
{
	struct kvt_protect p = {0};
	*out = NULL;
	int rc = load_key(cfg, "security.mac_key_file", kvt__cfg_str(cfg, "security.mac_key_file"),
			  "security.mac_key_env", kvt__cfg_str(cfg, "security.mac_key_env"),
			  p.mac_key, &p.mac, log);
	if (rc == 0)
		rc = load_key(cfg, "security.encryption_key_file",
			      kvt__cfg_str(cfg, "security.encryption_key_file"),
			      "security.encryption_key_env",
			      kvt__cfg_str(cfg, "security.encryption_key_env"), p.enc_key, &p.enc,
			      log);
	if (rc == 0 && (p.mac || p.enc)) {
		*out = kvt__malloc(sizeof(p));
		if (*out)
			**out = p;
		else
			rc = -ENOMEM;
	}
	OPENSSL_cleanse(&p, sizeof(p));
	return rc;
}

void kvt__protect_close(struct kvt_protect *p)
{
	if (!p)
		return;
	OPENSSL_cleanse(p, sizeof(*p));
	kvt__free(p);
}

bool kvt__protect_encrypts(const struct kvt_protect *p)
{
	return p && p->enc;
}

/* ------------------------------------------------------------- the object */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Dense layer bytes and segment stride of a decoded header. */
static uint64_t layer_bytes(const struct kvt_header *h, uint64_t *seg)
{
	uint64_t lb = kvt_layer_bytes(&h->geometry, h->n_tokens);
	*seg = KVT_ALIGN_UP(lb, KVT_ALIGN);
	return lb;
}

/* EVP_CipherUpdate over len bytes, in pieces its int length can hold (a layer may be
 * 2 GiB or more: kvt_geometry_check caps only the whole object). */
static int cipher_update(EVP_CIPHER_CTX *c, uint8_t *out, const uint8_t *in, uint64_t len)
{
	const uint64_t piece = 1ull << 30;
	for (uint64_t off = 0; off < len; off += piece) {
		int n;
		if (EVP_CipherUpdate(c, out + off, &n, in + off,
				     (int)(len - off < piece ? len - off : piece)) != 1)
			return -1;
	}
	return 0;
}

/* GCM over the layers; enc 1 encrypts in place and writes the tag, 0 decrypts into a
 * scratch buffer and checks the tag. 0, -EKEYREJECTED (tag), -EIO / -ENOMEM. */
static int gcm(const struct kvt_protect *p, uint8_t *o, const struct kvt_header *h,
	       const uint8_t nonce[12], uint8_t tag[16], int enc)
{
	uint64_t seg, lb = layer_bytes(h, &seg);
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	uint8_t *scratch = enc ? NULL : kvt__malloc(SCRATCH);
	int rc = -EIO, n;
	if (!c || (!enc && !scratch)) {
		rc = -ENOMEM;
		goto out;
	}
	if (EVP_CipherInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL, enc) != 1 ||
	    EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, 12, NULL) != 1 ||
	    EVP_CipherInit_ex(c, NULL, NULL, p->enc_key, nonce, enc) != 1 ||
	    EVP_CipherUpdate(c, NULL, &n, o, KVT_HDR_AAD_BYTES) != 1)
		goto out;
	for (uint32_t l = 0; l < h->geometry.layers; l++) {
		uint8_t *b = o + KVT_HEADER_BYTES + l * seg;
		if (enc) {
			if (cipher_update(c, b, b, lb) < 0)
				goto out;
			continue;
		}
		for (uint64_t off = 0; off < lb; off += SCRATCH) {
			int len = (int)(lb - off < SCRATCH ? lb - off : SCRATCH);
			if (EVP_CipherUpdate(c, scratch, &n, b + off, len) != 1)
				goto out;
		}
	}
	if (enc) {
		if (EVP_CipherFinal_ex(c, o, &n) != 1 ||
		    EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, tag) != 1)
			goto out;
	} else {
		if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, 16, tag) != 1)
			goto out;
		if (EVP_CipherFinal_ex(c, scratch, &n) != 1) {
			rc = -EKEYREJECTED;
			goto out;
		}
	}
	rc = 0;
out:
	if (scratch) {
		OPENSSL_cleanse(scratch, SCRATCH);
		kvt__free(scratch);
	}
	EVP_CIPHER_CTX_free(c);
	return rc;
}

/* HMAC-SHA-256 of the object (MAC field read as zero). */
static int hmac(const struct kvt_protect *p, const uint8_t *o, const struct kvt_header *h,
		uint8_t out[32])
{
	uint64_t seg, lb = layer_bytes(h, &seg);
	static const uint8_t zero[32];
	int rc = -EIO;
	size_t n;
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *c = mac ? EVP_MAC_CTX_new(mac) : NULL;
	OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
								 (char *)"SHA256", 0),
			       OSSL_PARAM_construct_end()};
	if (!c || EVP_MAC_init(c, p->mac_key, KEY_BYTES, params) != 1 ||
	    EVP_MAC_update(c, o, KVT_HDR_OFF_MAC) != 1 || EVP_MAC_update(c, zero, 32) != 1 ||
	    EVP_MAC_update(c, o + KVT_HDR_OFF_MAC + 32,
			   KVT_HDR_OFF_CRC - KVT_HDR_OFF_MAC - 32) != 1)
		goto out;
	for (uint32_t l = 0; l < h->geometry.layers; l++)
		if (EVP_MAC_update(c, o + KVT_HEADER_BYTES + l * seg, lb) != 1)
			goto out;
	if (EVP_MAC_final(c, out, &n, 32) == 1 && n == 32)
		rc = 0;
out:
	EVP_MAC_CTX_free(c);
	EVP_MAC_free(mac);
	return rc;
}

int kvt__object_protect(void *obj, uint64_t obj_len, const struct kvt_protect *p)
{
	if (!p)
		return 0;
	uint8_t *o = obj;
	struct kvt_header h;
	int rc = kvt__header_decode(o, &h, NULL);
	if (rc < 0 || h.object_bytes > obj_len || h.flags)
		return -EINVAL;
	uint16_t flags = (uint16_t)((p->mac ? KVT_FLAG_MAC : 0) | (p->enc ? KVT_FLAG_ENCRYPTED : 0));
	put16(o + KVT_HDR_OFF_FLAGS, flags);
	if (p->enc) {
		uint8_t nonce[12], tag[16];
		if (RAND_bytes(nonce, sizeof(nonce)) != 1)
			return -EIO;
		memcpy(o + KVT_HDR_OFF_GCM_NONCE, nonce, sizeof(nonce));
		if ((rc = gcm(p, o, &h, nonce, tag, 1)) < 0)
			return rc;
		memcpy(o + KVT_HDR_OFF_GCM_TAG, tag, sizeof(tag));
		uint64_t seg, lb = layer_bytes(&h, &seg);
		for (uint32_t l = 0; l < h.geometry.layers; l++) /* CRCs of what is stored */
			put32(o + KVT_HDR_OFF_LAYER_CRC + 4 * l,
			      kvt__crc32c(0, o + KVT_HEADER_BYTES + l * seg, lb));
	}
	if (p->mac) {
		uint8_t m[32];
		if ((rc = hmac(p, o, &h, m)) < 0)
			return rc;
		memcpy(o + KVT_HDR_OFF_MAC, m, sizeof(m));
	}
	put32(o + KVT_HDR_OFF_CRC, kvt__crc32c(0, o, KVT_HDR_OFF_CRC));
	return 0;
}

int kvt__object_authenticate(const void *obj, uint64_t obj_len, const struct kvt_header *h,
			     const struct kvt_protect *p)
{
	const uint8_t *o = obj;
	if (h->object_bytes > obj_len)
		return -EINVAL;
	if (p && p->mac) {
		if (!(h->flags & KVT_FLAG_MAC))
			return -EACCES;
		uint8_t m[32];
		int rc = hmac(p, o, h, m);
		if (rc < 0)
			return rc;
		if (CRYPTO_memcmp(m, h->mac, sizeof(m)))
			return -EBADMSG;
	}
	if (h->flags & KVT_FLAG_ENCRYPTED) {
		if (!p || !p->enc)
			return -ENOKEY;
		uint8_t tag[16];
		memcpy(tag, h->gcm_tag, sizeof(tag));
		/* gcm() with enc 0 only reads the object */
		return gcm(p, (uint8_t *)o, h, h->gcm_nonce, tag, 0);
	}
	return p && p->enc ? -EACCES : 0;
}

int64_t kvt__object_read_layers(const struct kvt_header *h, const void *obj, uint32_t l0,
				uint32_t l1, void *dst, uint64_t dst_len,
				const struct kvt_protect *p)
{
	if (!(h->flags & KVT_FLAG_ENCRYPTED))
		return kvt__object_copy_layers(h, obj, l0, l1, dst, dst_len);
	if (!p || !p->enc)
		return -ENOKEY;
	if (!obj || l0 > l1 || l1 > h->geometry.layers)
		return -EINVAL;
	uint64_t seg, lb = layer_bytes(h, &seg), need = (uint64_t)(l1 - l0) * lb;
	if (need && (!dst || dst_len < need))
		return -EINVAL;
	if (!need)
		return 0;
	/* Start the CTR keystream where layer l0 starts in the GCM message. */
	uint64_t pos = (uint64_t)l0 * lb, block = pos / 16;
	uint8_t iv[16], skip[16];
	memcpy(iv, h->gcm_nonce, 12);
	uint32_t ctr = (uint32_t)(block + 2);
	iv[12] = (uint8_t)(ctr >> 24);
	iv[13] = (uint8_t)(ctr >> 16);
	iv[14] = (uint8_t)(ctr >> 8);
	iv[15] = (uint8_t)ctr;
	EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
	int n, rc = -EIO;
	if (!c || EVP_DecryptInit_ex(c, EVP_aes_256_ctr(), NULL, p->enc_key, iv) != 1 ||
	    (pos % 16 && EVP_DecryptUpdate(c, skip, &n, skip, (int)(pos % 16)) != 1))
		goto out;
	const uint8_t *o = obj;
	uint8_t *d = dst;
	for (uint32_t l = l0; l < l1; l++)
		if (cipher_update(c, d + (l - l0) * lb, o + KVT_HEADER_BYTES + l * seg, lb) < 0)
			goto out;
	rc = 0;
out:
	EVP_CIPHER_CTX_free(c);
	return rc < 0 ? rc : (int64_t)need;
}

/* ------------------------------------------------------- streaming MAC check */

struct kvt_mac_stream {
	EVP_MAC *mac;
	EVP_MAC_CTX *c;
};

void kvt__mac_stream_free(struct kvt_mac_stream *m)
{
	if (!m)
		return;
	EVP_MAC_CTX_free(m->c);
	EVP_MAC_free(m->mac);
	kvt__free(m);
}

int kvt__mac_stream_begin(const struct kvt_protect *p, const void *hdr,
			  const struct kvt_header *h, struct kvt_mac_stream **out)
{
	*out = NULL;
	if (!p || !p->mac)
		return 0;
	if (!(h->flags & KVT_FLAG_MAC))
		return -EACCES;
	static const uint8_t zero[32];
	const uint8_t *o = hdr;
	struct kvt_mac_stream *m = kvt__calloc(1, sizeof(*m));
	if (!m)
		return -EIO;
	OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
								 (char *)"SHA256", 0),
			       OSSL_PARAM_construct_end()};
	/* The same bytes, in the same order, as hmac() above. */
	if (!(m->mac = EVP_MAC_fetch(NULL, "HMAC", NULL)) || !(m->c = EVP_MAC_CTX_new(m->mac)) ||
	    EVP_MAC_init(m->c, p->mac_key, KEY_BYTES, params) != 1 ||
	    EVP_MAC_update(m->c, o, KVT_HDR_OFF_MAC) != 1 || EVP_MAC_update(m->c, zero, 32) != 1 ||
	    EVP_MAC_update(m->c, o + KVT_HDR_OFF_MAC + 32,
			   KVT_HDR_OFF_CRC - KVT_HDR_OFF_MAC - 32) != 1) {
		kvt__mac_stream_free(m);
		return -EIO;
	}
	*out = m;
	return 1;
}

int kvt__mac_stream_update(struct kvt_mac_stream *m, const void *buf, size_t len)
{
	return EVP_MAC_update(m->c, buf, len) == 1 ? 0 : -EIO;
}

int kvt__mac_stream_end(struct kvt_mac_stream *m, const struct kvt_header *h)
{
	uint8_t got[32];
	size_t n = 0;
	int rc = EVP_MAC_final(m->c, got, &n, sizeof(got)) == 1 && n == 32 ? 0 : -EIO;
	kvt__mac_stream_free(m);
	if (rc == 0 && CRYPTO_memcmp(got, h->mac, sizeof(got)))
		rc = -EBADMSG;
	return rc;
}
