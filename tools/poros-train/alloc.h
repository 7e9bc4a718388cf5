/* tools/poros-train/alloc.h: the only way the engine gets device memory.
 * Counts current and peak bytes (the analogue of torch's
 * max_memory_allocated), enforces an optional budget, and is frozen once
 * the engine is set up so nothing is allocated inside the step loop. */
#ifndef POROS_TRAIN_ALLOC_H
#define POROS_TRAIN_ALLOC_H

#include <stddef.h>

#include "backend.h"

struct dev_block {
	void *p;
	size_t bytes;
	const char *purpose; /* what it is for, for the breakdown ("slabs") */
};

struct dev_alloc {
	const struct backend *be;
	size_t budget;       /* 0: no budget */
	size_t current, peak;
	int frozen;          /* set after setup: any further request is a bug */
	int dry;             /* a plan: counts sizes, allocates nothing (engine_plan) */
	int oom;             /* the last failure was out of memory (budget or device) */
	const char *purpose; /* tag of the next allocations (a static string) */
	int n, cap;
	struct dev_block *blocks;
	char err[320];       /* why the last request failed */
};

void dev_alloc_init(struct dev_alloc *a, const struct backend *be, size_t budget);
/* An allocator that only counts: every request succeeds with *p = NULL
 * and is recorded with its size exactly as a real one would be, so the
 * same carving code gives the plan (peak, breakdown) with no device. */
void dev_alloc_init_dry(struct dev_alloc *a);
/* Device memory of `bytes` for what (printf-style, used in the error:
 * "allocating 2 slabs of 1.2 GiB: budget 1.0 GiB exceeded (3.0 MiB in use)")
 * into *p.  0, or -1 with a->err set and a->oom = 1 when it does not fit. */
int dev_alloc(struct dev_alloc *a, void **p, size_t bytes, const char *what_fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Counts `bytes` someone else already holds on the device (a library's
 * workspace) under the current purpose, against the budget like an
 * allocation; released with the rest.  0, or -1 with a->err as above. */
int dev_alloc_count_held(struct dev_alloc *a, size_t bytes, const char *what);
void dev_alloc_freeze(struct dev_alloc *a);
/* Tags the allocations that follow (a static string, e.g. "slabs"); the
 * breakdown sums bytes by tag.  Untagged ones count as "other". */
void dev_alloc_set_purpose(struct dev_alloc *a, const char *purpose);
/* The bytes in use by purpose, in order of first allocation: fills up to
 * max (name, bytes) pairs and returns how many purposes there are. */
int dev_alloc_breakdown(const struct dev_alloc *a, const char **name, size_t *bytes, int max);
/* The breakdown as a JSON object of MiB (3 decimals), {"slabs":12.000,...};
 * its length, or -1 when buf is too small. */
int dev_alloc_breakdown_json(const struct dev_alloc *a, char *buf, size_t n);
/* "slabs 1.2 GiB, activations 512.0 MiB, lm_head 64.0 MiB": the n largest
 * purposes, largest first, into buf. */
const char *dev_alloc_largest(const struct dev_alloc *a, int n, char *buf, size_t bufsz);
void dev_alloc_release_all(struct dev_alloc *a);

/* "1.2 GiB", "512.0 MiB", "3.0 KiB", "100 B" into buf. */
const char *format_bytes(char *buf, size_t n, double bytes);

#define MIB (1024.0 * 1024.0)

#endif
