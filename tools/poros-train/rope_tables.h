/* tools/poros-train/rope_tables.h: HF's RoPE tables for a model
 * (rope_tables.c), used by the plan (plan.c) and by a run's checks
 * (run.c). */
#ifndef POROS_TRAIN_ROPE_TABLES_H
#define POROS_TRAIN_ROPE_TABLES_H

#include <stddef.h>

#include "model/model.h"

/* HF's RoPE tables (S, D/2) for the model, fp32, with the rope_scaling
 * types poros-train implements; -1 with err for any other. */
int rope_tables(float *cos_t, float *sin_t, const struct model_config *mc, int S, char *err, size_t errsz);

#endif
