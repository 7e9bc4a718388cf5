/* tools/lib/util/util.h: what every Poros tool shares, the public face of
 * tools/lib/util/: messages, exit codes, checked numbers and allocation,
 * atomic files, confined paths, and JSON Lines (jsonl.h).  The CUDA
 * backend's loader (backend_load.c) is declared in kernels/backend.h. */
#ifndef POROS_UTIL_H
#define POROS_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdnoreturn.h>
#include <sys/types.h>

#include "jsonl.h"

#ifndef POROS_VERSION
#define POROS_VERSION "0.0.0-dev"
#endif

/* Exit codes shared by every tool (documented in each man page). */
enum {
	EXIT_OK = 0,
	EXIT_RUNTIME = 1, /* a runtime failure: I/O, a child, out of memory */
	EXIT_USAGE = 2,   /* bad usage, bad spec or bad input data */
};

extern const char *progname;
void set_progname(const char *argv0);

/* "progname: message\n" on stderr. */
void warnmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same with ": strerror(errno)" appended. */
void warnsys(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
noreturn void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
noreturn void diesys(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The error message of a library call: formats into err (errsz bytes,
 * truncated; nothing when err is NULL or errsz 0) and returns -1, so that
 * `return set_error(err, errsz, "...")` both says why and fails. */
int set_error(char *err, size_t errsz, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prints "progname VERSION" to stdout and exits 0. */
noreturn void print_version(void);

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* snprintf into buf at *off, never past n (the length still counts). */
void bprintf(char *buf, size_t n, size_t *off, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Strict parsing: the whole string, in [min, max].  On failure returns -1
 * and *why says what was wrong ("not a number", "too small", "too large"). */
int parse_long(const char *s, long min, long max, long *out, const char **why);
int parse_double(const char *s, double min, double max, double *out, const char **why);
/* Option helpers: die(EXIT_USAGE) with "prog: --steps: too large: 99999999". */
long opt_long(const char *opt, const char *s, long min, long max);
double opt_double(const char *opt, const char *s, double min, double max);
/* Byte counts with an optional K/M/G/T suffix (powers of 1024). */
long long opt_bytes(const char *opt, const char *s);

/* Whole file into memory, NUL-terminated; NULL with errno on failure. */
char *read_whole_file(const char *path, size_t *len);
/* All of data to fd, through EINTR and short writes; 0, or -1 with errno. */
int write_all(int fd, const void *data, size_t len);

/* Writes data to path atomically: a temporary in the same directory,
 * fsync, rename.  Never follows a symlink at path (it is replaced).
 * Returns 0, or -1 with errno set and nothing left behind.  After the
 * process's first write into a directory, the temporaries killed writers
 * left there ("<name>.tmp.<pid>": process gone, an hour old) are removed;
 * later writes into it do not read the directory again. */
int atomic_write(const char *path, const void *data, size_t len);

/* The longest line append_line writes (1 MiB; Poros's own lines are a few
 * KiB).  A SIGKILL can cut a write(2) short between pages, so a line's
 * size is its window to tear: bounded, it stays small, and a record that
 * needs more is an error, not a risk. */
#define APPEND_LINE_MAX (1 << 20)

/* Appends one whole line (data must end in '\n', at most APPEND_LINE_MAX
 * bytes, else EMSGSIZE) to path with O_APPEND in a single write, fsync'd.
 * A short write is truncated back off.  Returns 0 or -1 with errno. */
int append_line(const char *path, const char *line, size_t len);

/* Whether path (links followed) is a directory, or a regular file. */
int is_dir(const char *path);
int is_file(const char *path);

/* mkdir -p; 0 or -1 with errno. */
int mkdir_p(const char *path, mode_t mode);
/* mkdir -p for a directory a tool owns inside its output directory: the
 * last component must be a real directory, never a symbolic link (errno
 * ELOOP), so a planted link cannot send files elsewhere.  0 or -1. */
int mkdir_owned(const char *path, mode_t mode);

/* Removes the temporaries ("<name>.tmp.<pid>", regular files) in dir whose
 * writer is no longer a process on this host, whatever their age: for a
 * directory that only one process writes at a time (an adapter directory
 * of a run), where atomic_write's hour-old rule would keep a killed
 * writer's leftover for good.  Best effort; returns how many it removed. */
int remove_dead_tmp(const char *dir);

/* A relative name that stays inside its directory: not empty, no NUL, not
 * absolute, no ".." component.  Returns 1 if safe. */
int path_is_confined(const char *rel);
/* Returns malloc'd "dir/rel", or NULL (errno EINVAL) when rel escapes. */
char *path_under(const char *dir, const char *rel);

/* A safe single file-name component: [A-Za-z0-9._-], not "." or "..",
 * at most 128 bytes. */
int name_is_safe(const char *s);

/* A slug: lower-case ASCII letters and digits, every other run of
 * characters turned into one '_', trimmed.  "Qwen/Qwen2.5-32B" -> "qwen2_5_32b"
 * when strip_org is set (the part after the last '/'). */
char *slugify(const char *s, int strip_org);

/* Current UTC time as ISO-8601 "2026-11-29T15:21:41Z" into buf (>= 21). */
void utc_now_iso(char *buf, size_t n);
double now_seconds(void); /* monotonic */

/* The one locator of what ships with Poros, for every tool.  The
 * directory of the running binary (/proc/self/exe, links resolved), or
 * NULL; malloc'd. */
char *poros_exe_dir(void);
/* A file shipped with Poros: the first existing of $POROS_HOME/rel,
 * <exe dir>/../rel, <exe dir>/../share/poros/rel.  Returns a malloc'd path
 * or NULL. */
char *poros_resource(const char *rel);

/* The length of the longest valid UTF-8 prefix of s[0..n): n when all of
 * it is valid (overlong forms, surrogates and > U+10FFFF are invalid). */
size_t utf8_valid_prefix(const char *s, size_t n);

/* Levenshtein distance, for did-you-mean hints. */
int edit_distance(const char *a, const char *b);
/* The name of names[0..n) closest to s, when close enough to be a likely
 * typo ("sequence_len" -> "seq_len": at most half the longer length, or
 * 2), else NULL. */
const char *closest_name(const char *s, const char *const *names, int n);
/* names[0..count) joined by ", " into buf (n bytes, truncated), for the
 * "expected one of" part of a message. */
void list_names(char *buf, size_t n, const char *const *names, int count);

#endif
