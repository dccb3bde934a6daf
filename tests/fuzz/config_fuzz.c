/*
 * config_fuzz.c - arbitrary bytes as a configuration file: kvt_config_load_file must
 * either accept them or fail with -EINVAL/-errno and a message, never crash, never leave
 * the configuration unusable (every key still reads back afterwards).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvtier.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char path[] = "/tmp/kvt-config-fuzz-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) != (ssize_t)size) {
		close(fd);
		unlink(path);
		return 0;
	}
	close(fd);
	struct kvt_config *c;
	if (kvt_config_create(&c) == 0) {
		char err[256] = "";
		int rc = kvt_config_load_file(c, path, err, sizeof(err));
		if (rc < 0 && !err[0])
			abort(); /* every failure must say why */
		const char *name;
		char val[8192];
		for (unsigned i = 0; (name = kvt_config_key_info(i, NULL, NULL)); i++)
			if (kvt_config_get(c, name, val, sizeof(val)) < 0)
				abort();
		kvt_config_destroy(c);
	}
	unlink(path);
	return 0;
}
