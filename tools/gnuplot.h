/*
 * gnuplot.h - the PNG plots of `kvtier replay --plot` and `kvtier crossover --plot`: a
 * gnuplot process fed a script on its stdin. Every string in that script (the output file
 * name above all, which the user chose) is written as a quoted gnuplot string, so a quote
 * or a backslash in it is a character of the name, never the end of the string and the
 * start of a command (system('...') runs a shell).
 */
#ifndef KVT_GNUPLOT_H
#define KVT_GNUPLOT_H

#include <stdio.h>

/* Can png be gnuplot's output? 0, or 1 after one error line from cmd: a name with a
 * control character (a script line cannot hold it), a path that is a FIFO, a directory or
 * a block device (gnuplot would wait in open() for a FIFO's reader). A command checks
 * before its work, so that the work is not lost to a bad name. */
int gp_check(const char *cmd, const char *png);
/* The plot's data file: tmpl (a mkstemp template, rewritten to the file's name) opened
 * for writing. NULL after one error line from cmd. */
FILE *gp_data_open(const char *cmd, char *tmpl);
/* Close the data file: 0, or 1 after one error line from cmd (a full /tmp), the file
 * removed. */
int gp_data_close(const char *cmd, FILE *f, const char *path);
/* Start gnuplot writing a PNG of width x height to png. NULL after one error line from
 * cmd: gp_check's, or no gnuplot. */
FILE *gp_open(const char *cmd, const char *png, int width, int height);
/* s as a gnuplot single-quoted string: a quote is doubled, nothing else is special. The
 * caller has checked s for control characters (gp_open does for the name; the other
 * strings are the program's own). */
void gp_str(FILE *g, const char *s);
/* End the script and wait for gnuplot: 0, or 1 after an error line from cmd. */
int gp_close(const char *cmd, FILE *g);

#endif
