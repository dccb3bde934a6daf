/*
 * replay_main.c - runs a libFuzzer target (LLVMFuzzerTestOneInput) over every file of a
 * corpus directory, so each parser's corpus replays as an ordinary ctest test in every
 * build, sanitizer builds included, without needing clang's -fsanitize=fuzzer.
 *
 *   header_fuzz tests/fuzz/corpus/header_fuzz     exit 0: all ran; 1: no corpus
 *
 * Each input is copied into a heap buffer of exactly its size, so an over-read by the
 * target is caught by ASan rather than hidden by slack in a larger buffer.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	struct stat st;
	uint8_t *buf;
	size_t n;

	if (!f)
		return -1;
	if (fstat(fileno(f), &st) || st.st_size < 0) {
		fclose(f);
		return -1;
	}
	/* malloc(0) may return NULL: keep one byte allocated but pass the true size. */
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		fclose(f);
		return -1;
	}
	n = fread(buf, 1, (size_t)st.st_size, f);
	fclose(f);
	if (n != (size_t)st.st_size) {
		free(buf);
		return -1;
	}
	LLVMFuzzerTestOneInput(buf, n);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	DIR *d;
	struct dirent *e;
	char path[4096];
	int ran = 0, bad = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 1;
	}
	d = opendir(argv[1]);
	if (!d) {
		perror(argv[1]);
		return 1;
	}
	while ((e = readdir(d))) {
		struct stat st;
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
		if (stat(path, &st) || !S_ISREG(st.st_mode))
			continue;
		if (run_file(path)) {
			fprintf(stderr, "%s: unreadable\n", path);
			bad++;
			continue;
		}
		ran++;
	}
	closedir(d);
	printf("replayed %d inputs from %s\n", ran, argv[1]);
	return ran > 0 && bad == 0 ? 0 : 1;
}
