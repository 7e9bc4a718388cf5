/* tools/poros-train/profile.h: device time by op category, as a wrapper of
 * the backend (profile.c).  The profiled backend is a copy of the real one
 * whose ops (and compute-stream copies and waits) first mark their
 * category on the compute stream, then call the real ones: an event at
 * every change of category, the time between two events the category's.
 * The math is the same code with and without it. */
#ifndef POROS_TRAIN_PROFILE_H
#define POROS_TRAIN_PROFILE_H

#include <stddef.h>

#include "backend.h"

struct profile;

/* One profile per process at a time (the wrappers have the ops'
 * signatures, so they find it through a static pointer). */
struct profile *profile_create(const struct backend *real);
void profile_destroy(struct profile *p);
/* The timed backend (its ops categorised by op) and the ops table of the
 * head, where every op counts as head_ce. */
const struct backend *profile_backend(const struct profile *p);
const struct poros_ops *profile_head_ops(const struct profile *p);

/* Around one step: begin before its first op; close after its last one
 * (records the closing event); finish after close waits for the events
 * and adds up the times. */
void profile_begin(struct profile *p);
void profile_close(struct profile *p);
void profile_finish(struct profile *p);
/* The last finished step's profile as one JSON object (engine.h), or -1
 * (buf "") when no step has finished. */
int profile_json(const struct profile *p, char *buf, size_t n, long long ckpt_d2h, long long ckpt_h2d);

#endif
