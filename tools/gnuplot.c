/*
 * gnuplot.c - run gnuplot for the commands' PNG plots with every string of the script
 * quoted (tools/gnuplot.h): the output name used to go in as '%s', so a name with a quote
 * broke the script or ran what followed it; a control character in a quoted string (a
 * newline in a tier name) did the same until 2026-12-05, and now goes in as '?'.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "gnuplot.h"
#include "open_path.h"

void gp_str(FILE *g, const char *s)
{
	fputc('\'', g);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '\'')
			fputc('\'', g); /* '' is a quote inside '...'; backslashes are literal */
		/* a newline ends the script's line inside the quotes, and gnuplot ran the next
		 * line, a '!' line as a shell command: a title (a tier name) never needs one */
		fputc(c < 0x20 || c == 0x7f ? '?' : c, g);
	}
	fputc('\'', g);
}

int gp_check(const char *cmd, const char *png)
{
	for (const unsigned char *p = (const unsigned char *)png; *p; p++)
		if (*p < 0x20 || *p == 0x7f)
			return cli_fail(cmd,
					"--plot: a control character in the file name (0x%02x); "
					"gnuplot's script cannot carry it",
					*p);
	/* gnuplot's set output takes a name starting with '|' as a command to pipe into,
	 * quoted or not */
	if (png[0] == '|')
		return cli_fail(cmd, "--plot %s: a name starting with '|' is a command to gnuplot; "
				     "give ./%s for a file",
				png, png);
	const char *what = kvt__path_unfit(png, true);
	if (what)
		return cli_fail(cmd, "--plot %s: %s, not a regular file", png, what);
	return 0;
}

FILE *gp_open(const char *cmd, const char *png, int width, int height)
{
	if (gp_check(cmd, png))
		return NULL;
	FILE *g = popen("gnuplot", "w");
	if (!g) {
		cli_fail(cmd, "cannot run gnuplot");
		return NULL;
	}
	fprintf(g, "set terminal pngcairo size %d,%d noenhanced\nset output ", width, height);
	gp_str(g, png);
	fputc('\n', g);
	return g;
}

int gp_close(const char *cmd, FILE *g)
{
	fputc('\n', g);
	int rc = pclose(g);
	if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc))
		return cli_fail(cmd, "gnuplot failed (exit %d); is gnuplot installed?",
				rc == -1 || !WIFEXITED(rc) ? -1 : WEXITSTATUS(rc));
	return 0;
}

FILE *gp_data_open(const char *cmd, char *tmpl)
{
	int fd = mkstemp(tmpl);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!f) {
		int e = errno;
		if (fd >= 0) {
			close(fd);
			unlink(tmpl);
		}
		cli_fail(cmd, "temporary file: %s", strerror(e));
	}
	return f;
}

int gp_data_close(const char *cmd, FILE *f, const char *path)
{
	int bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		int e = errno;
		unlink(path);
		return cli_fail(cmd, "temporary file %s: %s", path, strerror(bad ? EIO : e));
	}
	return 0;
}
