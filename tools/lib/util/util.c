/* tools/lib/util/util.c: messages, checked numbers, allocation, atomic files,
 * confined paths. */
#include "util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *progname = "poros";

void set_progname(const char *argv0)
{
	const char *slash;

	if (argv0 == NULL || *argv0 == '\0')
		return;
	slash = strrchr(argv0, '/');
	progname = slash ? slash + 1 : argv0;
}

static void vmsg(const char *fmt, va_list ap, int errnum)
{
	fprintf(stderr, "%s: ", progname);
	vfprintf(stderr, fmt, ap);
	if (errnum)
		fprintf(stderr, ": %s", strerror(errnum));
	fputc('\n', stderr);
}

void warnmsg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap, 0);
	va_end(ap);
}

void warnsys(const char *fmt, ...)
{
	int e = errno;
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap, e);
	va_end(ap);
}

void die(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap, 0);
	va_end(ap);
	exit(code);
}

void diesys(int code, const char *fmt, ...)
{
	int e = errno;
	va_list ap;

	va_start(ap, fmt);
	vmsg(fmt, ap, e);
	va_end(ap);
	exit(code);
}

int set_error(char *err, size_t errsz, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errsz == 0)
		return -1;
	va_start(ap, fmt);
	vsnprintf(err, errsz, fmt, ap);
	va_end(ap);
	return -1;
}

void print_version(void)
{
	printf("%s %s\n", progname, POROS_VERSION);
	exit(EXIT_OK);
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (p == NULL)
		die(EXIT_RUNTIME, "out of memory allocating %zu bytes", n);
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (p == NULL)
		die(EXIT_RUNTIME, "out of memory allocating %zu x %zu bytes", n, size);
	return p;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);

	if (q == NULL)
		die(EXIT_RUNTIME, "out of memory allocating %zu bytes", n);
	return q;
}

char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;

	return memcpy(xmalloc(n), s, n);
}

char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	int n;
	char *s;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		die(EXIT_RUNTIME, "formatting failed");
	s = xmalloc((size_t)n + 1);
	va_start(ap, fmt);
	vsnprintf(s, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return s;
}

void bprintf(char *buf, size_t n, size_t *off, const char *fmt, ...)
{
	va_list ap;
	int w;

	va_start(ap, fmt);
	w = vsnprintf(*off < n ? buf + *off : NULL, *off < n ? n - *off : 0, fmt, ap);
	va_end(ap);
	if (w > 0)
		*off += (size_t)w;
}

/* A parse_* failure: why it failed, and -1. */
static int parse_refuse(const char **why, const char *reason)
{
	*why = reason;
	return -1;
}

/* Empty or led by white space (which strtol and strtod would skip). */
static int parse_blank(const char *s)
{
	return s == NULL || *s == '\0' || isspace((unsigned char)*s);
}

int parse_long(const char *s, long min, long max, long *out, const char **why)
{
	char *end;
	long v;

	if (parse_blank(s))
		return parse_refuse(why, "not a number");
	errno = 0;
	v = strtol(s, &end, 10);
	if (*end != '\0')
		return parse_refuse(why, "not a number");
	if (errno == ERANGE || v > max)
		return parse_refuse(why, (errno == ERANGE && v == LONG_MIN) ? "too small" : "too large");
	if (v < min)
		return parse_refuse(why, "too small");
	*out = v;
	return 0;
}

int parse_double(const char *s, double min, double max, double *out, const char **why)
{
	char *end;
	double v;

	if (parse_blank(s))
		return parse_refuse(why, "not a number");
	errno = 0;
	v = strtod(s, &end);
	if (*end != '\0' || isnan(v))
		return parse_refuse(why, "not a number");
	if (isinf(v) || errno == ERANGE)
		return parse_refuse(why, (v < 0) ? "too small" : (fabs(v) < 1 ? "too close to zero" : "too large"));
	if (v < min)
		return parse_refuse(why, "too small");
	if (v > max)
		return parse_refuse(why, "too large");
	*out = v;
	return 0;
}

long opt_long(const char *opt, const char *s, long min, long max)
{
	const char *why;
	long v;

	if (parse_long(s, min, max, &v, &why) < 0)
		die(EXIT_USAGE, "%s: %s: %s", opt, why, s ? s : "");
	return v;
}

double opt_double(const char *opt, const char *s, double min, double max)
{
	const char *why;
	double v;

	if (parse_double(s, min, max, &v, &why) < 0)
		die(EXIT_USAGE, "%s: %s: %s", opt, why, s ? s : "");
	return v;
}

long long opt_bytes(const char *opt, const char *s)
{
	char *end;
	double v;
	double mult = 1;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || isnan(v) || isinf(v) || errno == ERANGE || v < 0)
		die(EXIT_USAGE, "%s: not a byte count: %s", opt, s);
	switch (*end) {
	case 'k': case 'K': mult = 1024.0; end++; break;
	case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'B')
		end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
	if (*end != '\0')
		die(EXIT_USAGE, "%s: not a byte count: %s", opt, s);
	v *= mult;
	if (v > 9.0e18)
		die(EXIT_USAGE, "%s: too large: %s", opt, s);
	return (long long)v;
}

char *read_whole_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0, n = 0;

	if (f == NULL)
		return NULL;
	for (;;) {
		size_t got;

		if (cap - n < 65536) {
			cap = cap ? cap * 2 : 65536;
			buf = xrealloc(buf, cap + 1);
		}
		got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		int e = errno ? errno : EIO;
		fclose(f);
		free(buf);
		errno = e;
		return NULL;
	}
	fclose(f);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

int write_all(int fd, const void *data, size_t len)
{
	const unsigned char *p = data;

	while (len > 0) {
		/* at most 1 GiB a call: Linux writes no more than ~2 GiB at once anyway */
		ssize_t w = write(fd, p, len > (1u << 30) ? (1u << 30) : len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) /* a write of nothing would loop forever */
			return -1;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* A writer killed between open and rename (SIGKILL, a node lost) leaves
 * "<name>.tmp.<pid>" behind.  The first successful write into a directory
 * (per process) removes every such temporary there whose writer is gone: no
 * such process here and untouched for STALE_TMP_AGE seconds, the age being
 * what keeps a writer on another host of a shared file system (whose pid
 * means nothing here) safe, since a write takes seconds.  Later writes into
 * the same directory do not read it again, so writing n files costs one
 * directory scan, not n.  Best effort: errors are ignored, the finished
 * file is what matters. */
#define STALE_TMP_AGE 3600

static pthread_mutex_t swept_lock = PTHREAD_MUTEX_INITIALIZER;
static char **swept_dirs;
static size_t n_swept;

/* 1 the first time dir is asked about in this process, 0 after. */
static int first_visit(const char *dir)
{
	int first = 1;

	pthread_mutex_lock(&swept_lock);
	for (size_t i = 0; i < n_swept && first; i++)
		first = strcmp(swept_dirs[i], dir) != 0;
	if (first) {
		swept_dirs = xrealloc(swept_dirs, (n_swept + 1) * sizeof *swept_dirs);
		swept_dirs[n_swept++] = xstrdup(dir);
	}
	pthread_mutex_unlock(&swept_lock);
	return first;
}

/* The writer's pid when name is "<something>.tmp.<digits>", else -1. */
static long tmp_writer(const char *name)
{
	const char *mark = NULL, *p = name, *q;
	char *end;
	long pid;

	while ((q = strstr(p, ".tmp.")) != NULL) {
		mark = q;
		p = q + 1;
	}
	if (mark == NULL || mark == name || !isdigit((unsigned char)mark[5]))
		return -1;
	errno = 0;
	pid = strtol(mark + 5, &end, 10);
	return *end || errno || pid <= 0 ? -1 : pid;
}

static void sweep_stale_tmp(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? xasprintf("%.*s", (int)(slash - path + 1), path) : xasprintf("./");
	DIR *d = first_visit(dir) ? opendir(dir) : NULL;
	struct dirent *ent;
	time_t now = time(NULL);

	while (d && (ent = readdir(d)) != NULL) {
		long pid = tmp_writer(ent->d_name);
		struct stat st;
		char *full;

		if (pid < 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		full = xasprintf("%s%s", dir, ent->d_name);
		if (lstat(full, &st) == 0 && S_ISREG(st.st_mode) && now - st.st_mtime >= STALE_TMP_AGE)
			unlink(full);
		free(full);
	}
	if (d)
		closedir(d);
	free(dir);
}

int atomic_write(const char *path, const void *data, size_t len)
{
	char *tmp = xasprintf("%s.tmp.%ld", path, (long)getpid());
	int fd, e;

	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0 && errno == EEXIST) {
		unlink(tmp);
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	}
	if (fd < 0) {
		e = errno;
		free(tmp);
		errno = e;
		return -1;
	}
	if (write_all(fd, data, len) < 0 || fsync(fd) < 0) {
		e = errno;
		close(fd);
		unlink(tmp);
		free(tmp);
		errno = e;
		return -1;
	}
	if (close(fd) < 0 || rename(tmp, path) < 0) {
		e = errno;
		unlink(tmp);
		free(tmp);
		errno = e;
		return -1;
	}
	free(tmp);
	sweep_stale_tmp(path);
	return 0;
}

int append_line(const char *path, const char *line, size_t len)
{
	struct stat st;
	int fd, e;
	ssize_t w;

	if (len == 0 || line[len - 1] != '\n') {
		errno = EINVAL;
		return -1;
	}
	if (len > APPEND_LINE_MAX) {
		errno = EMSGSIZE;
		return -1;
	}
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0)
		goto fail;
	/* One write(2): readers see the whole line or none of it. */
	w = write(fd, line, len);
	if (w < 0 || (size_t)w != len) {
		e = errno;
		/* A short write hit a limit; a second one says which (EFBIG
		 * under RLIMIT_FSIZE, ENOSPC, EDQUOT).  Either way the line is
		 * taken back off below. */
		if (w >= 0)
			e = write(fd, line + w, len - (size_t)w) < 0 ? errno : ENOSPC;
		if (ftruncate(fd, st.st_size) < 0) { /* keep earlier lines whole */ }
		close(fd);
		errno = e;
		return -1;
	}
	if (fsync(fd) < 0)
		goto fail;
	return close(fd);
fail:
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

int is_dir(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int mkdir_p(const char *path, mode_t mode)
{
	char *p = xstrdup(path);
	char *s;
	struct stat st;

	for (s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, mode) < 0 && errno != EEXIST) {
			int e = errno;
			free(p);
			errno = e;
			return -1;
		}
		*s = '/';
	}
	if (mkdir(p, mode) < 0 && errno != EEXIST) {
		int e = errno;
		free(p);
		errno = e;
		return -1;
	}
	free(p);
	if (stat(path, &st) < 0)
		return -1;
	if (!S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		return -1;
	}
	return 0;
}

int mkdir_owned(const char *path, mode_t mode)
{
	struct stat st;

	if (mkdir_p(path, mode) < 0)
		return -1;
	if (lstat(path, &st) < 0)
		return -1;
	if (S_ISLNK(st.st_mode)) {
		errno = ELOOP;
		return -1;
	}
	return 0;
}

int remove_dead_tmp(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *ent;
	int removed = 0;

	while (d && (ent = readdir(d)) != NULL) {
		long pid = tmp_writer(ent->d_name);
		struct stat st;
		char *full;

		if (pid < 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		full = xasprintf("%s/%s", dir, ent->d_name);
		if (lstat(full, &st) == 0 && S_ISREG(st.st_mode) && unlink(full) == 0)
			removed++;
		free(full);
	}
	if (d)
		closedir(d);
	return removed;
}

int path_is_confined(const char *rel)
{
	const char *s = rel;

	if (rel == NULL || *rel == '\0' || *rel == '/')
		return 0;
	while (*s) {
		const char *e = strchr(s, '/');
		size_t n = e ? (size_t)(e - s) : strlen(s);

		if (n == 2 && s[0] == '.' && s[1] == '.')
			return 0;
		s += n;
		while (*s == '/')
			s++;
	}
	return 1;
}

char *path_under(const char *dir, const char *rel)
{
	if (!path_is_confined(rel)) {
		errno = EINVAL;
		return NULL;
	}
	return xasprintf("%s/%s", dir, rel);
}

int name_is_safe(const char *s)
{
	size_t n;

	if (s == NULL || *s == '\0' || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
		return 0;
	for (n = 0; s[n]; n++) {
		unsigned char c = (unsigned char)s[n];
		if (!(isalnum(c) || c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return n <= 128;
}

size_t utf8_valid_prefix(const char *str, size_t n)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;

	while (i < n) {
		unsigned c = s[i];
		size_t len;
		unsigned cp;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			len = 2;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			len = 3;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			len = 4;
			cp = c & 0x07;
		} else {
			return i; /* a continuation byte, 0xc0/0xc1 (overlong) or > 0xf4 */
		}
		if (n - i < len)
			return i;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return i;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return i;
		i += len;
	}
	return n;
}

char *slugify(const char *s, int strip_org)
{
	const char *slash = strip_org ? strrchr(s, '/') : NULL;
	const char *p = slash ? slash + 1 : s;
	char *out = xmalloc(strlen(p) + 1);
	size_t n = 0;
	int pending = 0;

	for (; *p; p++) {
		unsigned char c = (unsigned char)*p;

		if (isalnum(c) && c < 128) {
			if (pending && n > 0)
				out[n++] = '_';
			pending = 0;
			out[n++] = (char)tolower(c);
		} else {
			pending = 1;
		}
	}
	out[n] = '\0';
	return out;
}

void utc_now_iso(char *buf, size_t n)
{
	time_t t = time(NULL);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

double now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), i, j;
	int *row, d;

	if (la > 256 || lb > 256)
		return INT_MAX;
	row = xmalloc((lb + 1) * sizeof *row);
	for (j = 0; j <= lb; j++)
		row[j] = (int)j;
	for (i = 1; i <= la; i++) {
		int diag = row[0];
		row[0] = (int)i;
		for (j = 1; j <= lb; j++) {
			int up = row[j];
			int best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	d = row[lb];
	free(row);
	return d;
}

const char *closest_name(const char *s, const char *const *names, int n)
{
	const char *best = NULL;
	int best_d = 0;

	for (int i = 0; i < n; i++) {
		int d = edit_distance(s, names[i]);
		size_t la = strlen(s), lb = strlen(names[i]);
		int limit = (int)((la > lb ? la : lb) / 2);

		if (d <= (limit > 2 ? limit : 2) && (!best || d < best_d)) {
			best = names[i];
			best_d = d;
		}
	}
	return best;
}

void list_names(char *buf, size_t n, const char *const *names, int count)
{
	size_t used = 0;

	buf[0] = '\0';
	for (int i = 0; i < count && used < n; i++)
		used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "", names[i]);
}

char *poros_exe_dir(void)
{
	char exe[4096], *slash;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);

	if (n <= 0)
		return NULL;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash == NULL)
		return NULL;
	*slash = '\0';
	return xstrdup(exe);
}

char *poros_resource(const char *rel)
{
	const char *home = getenv("POROS_HOME");
	char *dir, *cand;

	if (home && *home) {
		cand = xasprintf("%s/%s", home, rel);
		if (access(cand, F_OK) == 0)
			return cand;
		free(cand);
	}
	if ((dir = poros_exe_dir()) == NULL)
		return NULL;
	cand = xasprintf("%s/../%s", dir, rel);
	if (access(cand, F_OK) == 0) {
		free(dir);
		return cand;
	}
	free(cand);
	cand = xasprintf("%s/../share/poros/%s", dir, rel);
	free(dir);
	if (access(cand, F_OK) == 0)
		return cand;
	free(cand);
	return NULL;
}
