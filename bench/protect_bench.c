/*
 * protect_bench.c - CPU cost of the optional object MAC and encryption (src/protect.c) on
 * one 2 MiB chunk (32 layers of 64 KiB), against the plain format path: encode (copy +
 * CRC), protect (encrypt in place, re-CRC, HMAC), verify + authenticate (CRCs, HMAC, GCM
 * tag), copy-out (memcpy, or AES-CTR decryption). GB/s of payload over all runs; no I/O.
 *
 *   protect_bench [runs]     prints one line per mode: none, mac, enc, both
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "format.h"
#include "internal.h"
#include "protect.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	int runs = argc > 1 ? atoi(argv[1]) : 200;
	struct kvt_geometry g = {32, 1, 128, 256, KVT_DTYPE_FP8, KVT_KIND_KV};
	uint64_t pl = kvt_payload_bytes(&g, 256), ol = kvt_object_bytes(&g, 256);
	uint8_t *pay = malloc(pl), *obj = aligned_alloc(4096, ol), *out = malloc(pl);
	for (uint64_t i = 0; i < pl; i++)
		pay[i] = (uint8_t)(i * 7);
	uint8_t ns[32] = {1};
	struct kvt_key k = {{2}};
	char keyfile[] = "/tmp/kvt-protect-bench-XXXXXX";
	int fd = mkstemp(keyfile);
	if (fd < 0 || write(fd, "0123456789abcdef0123456789abcdef", 32) != 32)
		return 1;
	close(fd);
	const char *modes[] = {"none", "mac", "enc", "both"};
	for (int m = 0; m < 4; m++) {
		struct kvt_config *c;
		struct kvt_protect *p;
		kvt_config_create(&c);
		if (m & 1)
			kvt_config_set(c, "security.mac_key_file", keyfile, NULL, 0);
		if (m & 2)
			kvt_config_set(c, "security.encryption_key_file", keyfile, NULL, 0);
		if (kvt__protect_open(c, kvt__cfg_log(c), &p))
			return 1;
		double te = 0, tp = 0, ta = 0, tr = 0;
		for (int i = 0; i < runs; i++) {
			struct kvt_header h;
			double a = now();
			kvt__object_encode(obj, ol, &g, ns, &k, 256, pay, pl);
			double b = now();
			kvt__object_protect(obj, ol, p);
			double c2 = now();
			if (kvt__object_verify(obj, ol, NULL, &h) ||
			    kvt__object_authenticate(obj, ol, &h, p))
				return 1;
			double d = now();
			if (kvt__object_read_layers(&h, obj, 0, 32, out, pl, p) != (int64_t)pl)
				return 1;
			double e = now();
			te += b - a;
			tp += c2 - b;
			ta += d - c2;
			tr += e - d;
		}
		if (memcmp(out, pay, pl))
			return 1;
		double gb = (double)pl * runs / 1e9;
		printf("protect_bench %-4s 2 MiB chunk: encode %.2f GB/s, protect %s%.2f GB/s, "
		       "verify+authenticate %.2f GB/s, copy-out %.2f GB/s\n",
		       modes[m], gb / te, m ? "" : ">", m ? gb / tp : 100.0, gb / ta, gb / tr);
		kvt__protect_close(p);
		kvt_config_destroy(c);
	}
	unlink(keyfile);
	free(pay);
	free(obj);
	free(out);
	return 0;
}
