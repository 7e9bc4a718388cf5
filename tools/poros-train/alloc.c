/* tools/poros-train/alloc.c: counted, budgeted device allocations. */
#include "alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

const char *format_bytes(char *buf, size_t n, double bytes)
{
	static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB" };
	int u = -1;

	while (bytes >= 1024.0 && u < 3) {
		bytes /= 1024.0;
		u++;
	}
	if (u < 0)
		snprintf(buf, n, "%.0f B", bytes);
	else
		snprintf(buf, n, "%.1f %s", bytes, unit[u]);
	return buf;
}

void dev_alloc_init(struct dev_alloc *a, const struct backend *be, size_t budget)
{
	memset(a, 0, sizeof *a);
	a->be = be;
	a->budget = budget;
}

void dev_alloc_init_dry(struct dev_alloc *a)
{
	memset(a, 0, sizeof *a);
	a->dry = 1;
}

/* The budget check shared by both ways of taking memory: 0, or -1 with
 * a->err and a->oom set. */
static int within_budget(struct dev_alloc *a, size_t bytes, const char *what)
{
	char have[32], used[32];

	if (a->frozen) {
		/* a programming error, not a user's: the step loop must not allocate */
		fprintf(stderr, "%s: internal error: device allocation after setup\n", progname);
		abort();
	}
	if (a->budget && (bytes > a->budget || a->current > a->budget - bytes)) {
		snprintf(a->err, sizeof a->err, "allocating %s: budget %s exceeded (%s in use)", what,
		         format_bytes(have, sizeof have, (double)a->budget),
		         format_bytes(used, sizeof used, (double)a->current));
		a->oom = 1;
		return -1;
	}
	return 0;
}

static void record(struct dev_alloc *a, void *p, size_t bytes)
{
	if (a->n == a->cap) {
		a->cap = a->cap ? 2 * a->cap : 32;
		a->blocks = xrealloc(a->blocks, (size_t)a->cap * sizeof *a->blocks);
	}
	a->blocks[a->n].p = p;
	a->blocks[a->n].bytes = bytes;
	a->blocks[a->n].purpose = a->purpose ? a->purpose : "other";
	a->n++;
	a->current += bytes;
	if (a->current > a->peak)
		a->peak = a->current;
}

int dev_alloc(struct dev_alloc *a, void **p, size_t bytes, const char *what_fmt, ...)
{
	char what[160], need[32], used[32];
	va_list ap;

	*p = NULL;
	va_start(ap, what_fmt);
	vsnprintf(what, sizeof what, what_fmt, ap);
	va_end(ap);
	if (within_budget(a, bytes, what) < 0)
		return -1;
	if (!a->dry && (a->be->device_alloc(p, bytes) != 0 || *p == NULL)) {
		*p = NULL;
		snprintf(a->err, sizeof a->err, "allocating %s (%s): out of %s memory (%s in use)", what,
		         format_bytes(need, sizeof need, (double)bytes), a->be->name,
		         format_bytes(used, sizeof used, (double)a->current));
		a->oom = 1;
		return -1;
	}
	record(a, *p, bytes); /* dry: NULL, nothing to free */
	return 0;
}

int dev_alloc_count_held(struct dev_alloc *a, size_t bytes, const char *what)
{
	if (within_budget(a, bytes, what) < 0)
		return -1;
	record(a, NULL, bytes); /* NULL: not ours to free */
	return 0;
}

void dev_alloc_freeze(struct dev_alloc *a)
{
	a->frozen = 1;
}

void dev_alloc_set_purpose(struct dev_alloc *a, const char *purpose)
{
	a->purpose = purpose;
}

int dev_alloc_breakdown(const struct dev_alloc *a, const char **name, size_t *bytes, int max)
{
	int n = 0;

	for (int i = 0; i < a->n; i++) {
		int j = 0;

		/* a handful of purposes: a linear search is the simple way */
		while (j < n && j < max && strcmp(name[j], a->blocks[i].purpose) != 0)
			j++;
		if (j == n) {
			if (n < max) {
				name[n] = a->blocks[i].purpose;
				bytes[n] = 0;
			}
			n++;
		}
		if (j < max)
			bytes[j] += a->blocks[i].bytes;
	}
	return n;
}

int dev_alloc_breakdown_json(const struct dev_alloc *a, char *buf, size_t n)
{
	const char *name[32];
	size_t bytes[32];
	int np = dev_alloc_breakdown(a, name, bytes, 32), off = 0;

	for (int i = 0; i <= np && i <= 32; i++) {
		int w = i == np || i == 32 ? snprintf(buf + off, n - (size_t)off, "}")
		                           : snprintf(buf + off, n - (size_t)off, "%s\"%s\":%.3f", i ? "," : "{", name[i],
		                                      (double)bytes[i] / MIB);

		if (w < 0 || (size_t)w >= n - (size_t)off)
			return -1;
		off += w;
	}
	return off;
}

const char *dev_alloc_largest(const struct dev_alloc *a, int n, char *buf, size_t bufsz)
{
	const char *name[32];
	size_t bytes[32], off = 0;
	int np = dev_alloc_breakdown(a, name, bytes, 32), taken[32] = { 0 };

	if (np > 32)
		np = 32;
	buf[0] = '\0';
	for (int i = 0; i < n && i < np && off < bufsz; i++) {
		int best = -1;
		char sz[32];

		/* the largest not yet named; a tie goes to the first allocated */
		for (int j = 0; j < np; j++)
			if (!taken[j] && (best < 0 || bytes[j] > bytes[best]))
				best = j;
		taken[best] = 1;
		off += (size_t)snprintf(buf + off, bufsz - off, "%s%s %s", i ? ", " : "", name[best],
		                        format_bytes(sz, sizeof sz, (double)bytes[best]));
	}
	return buf;
}

void dev_alloc_release_all(struct dev_alloc *a)
{
	/* in reverse, the way a stack allocator would */
	for (int i = a->n - 1; i >= 0; i--)
		if (a->blocks[i].p)
			a->be->device_free(a->blocks[i].p);
	free(a->blocks);
	a->blocks = NULL;
	a->n = a->cap = 0;
	a->current = 0;
	a->frozen = 0;
}
