/* tools/poros-train/host_plan.h: the host memory a run takes beyond what
 * it holds when the plan is made, by purpose, from the model's shape and
 * the run's settings alone (nothing allocated), and the check that
 * refuses a run whose total does not fit before its first large
 * allocation.  docs/engine.md ("Host memory") lists the items. */
#ifndef POROS_TRAIN_HOST_PLAN_H
#define POROS_TRAIN_HOST_PLAN_H

#include <stddef.h>

#include "alloc.h"
#include "ckpt_disk.h"
#include <cjson/cJSON.h>
#include "model/model.h"
#include "train.h"

enum { HOST_PLAN_MAX = 16 };

struct host_plan {
	int n;
	const char *name[HOST_PLAN_MAX]; /* "base_layers", "checkpoints", ... (static strings) */
	size_t bytes[HOST_PLAN_MAX];
	size_t base, checkpoints; /* weights.c's and plan.c's own checks refuse either alone over the host
	                             (checkpoints: the host's records and the disk's bounce slots) */
	size_t load_peak;  /* while the base loads: base + weight_load */
	size_t train;      /* the training phase's sum: every item but weight_load */
	size_t total;      /* the run's peak: the larger of load_peak and the training phase's sum */
	int local_ranks;   /* every figure is for the host: its ranks (train_config's local_ranks, 1 alone) */
	int base_shared;   /* 1: the host's ranks hold one base (shared_base.h), counted once */
};

/* The plan for run c of model mc on its host (c->local_ranks ranks: the
 * base once when c->shared_base, every other part once a rank): device_bytes is the device plan's total
 * (host memory on the CPU backend: cpu_backend 1), tier blockwise's
 * checkpoint records (engine_plan; NULL: none): those the host holds, and
 * the bounce slots of those on disk.  0, or -1 with err (bad input). */
int host_plan_make(struct host_plan *hp, const struct train_config *c, const struct model_config *mc,
                   size_t device_bytes, int cpu_backend, const struct ckpt_tier *tier, char *err, size_t errsz);
/* {"base_layers":12.000,...} in MiB, 3 decimals; its length, or -1 when buf is too small. */
int host_plan_json(const struct host_plan *hp, char *buf, size_t n);
/* -1 with "the run needs 130.2 GiB of host memory, 124.5 GiB available
 * (MemAvailable); the largest: base_layers 41.4 GiB, ..." in err when the
 * total is over what the host has; 0 when it fits or nothing is known. */
int host_plan_check(const struct host_plan *hp, char *err, size_t errsz);
/* The run's host plan beside its device plan (engine_plan's), for the
 * backend named: host_plan_make.  0, or -1 with err. */
int host_plan_for_run(struct host_plan *hp, const struct train_config *c, const struct model_config *mc,
                      const struct dev_alloc *plan, const char *backend, const struct ckpt_tier *tier, char *err,
                      size_t errsz);
/* host_plan_mb and host_breakdown_mb into o. */
void host_plan_add_json(cJSON *o, const struct host_plan *hp);
/* The process's resident set now (VmRSS) and its peak (VmHWM), bytes; 0
 * where /proc/self/status cannot be read. */
size_t host_rss_now(void);
size_t host_rss_peak(void);

#endif
