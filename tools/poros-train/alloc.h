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
	int oom;             /* the last failure was out of memory (budget or device) */
	const char *purpose; /* tag of the next allocations (a static string) */
	int n, cap;
	struct dev_block *blocks;
	char err[320];       /* why the last request failed */
};

void dev_alloc_init(struct dev_alloc *a, const struct backend *be, size_t budget);
/* Device memory of `bytes` for what (printf-style, used in the error:
 * "allocating 2 slabs of 1.2 GiB: budget 1.0 GiB exceeded (3.0 MiB in use)").
 * NULL with a->err set and a->oom = 1 when it does not fit. */
void *dev_alloc(struct dev_alloc *a, size_t bytes, const char *what_fmt, ...) __attribute__((format(printf, 3, 4)));
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
void dev_alloc_release_all(struct dev_alloc *a);

/* "1.2 GiB", "512.0 MiB", "3.0 KiB", "100 B" into buf. */
const char *format_bytes(char *buf, size_t n, double bytes);

#define MIB (1024.0 * 1024.0)

#endif
