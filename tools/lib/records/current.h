/* tools/lib/records/current.h: a spec.json (poros-expand) as the judge of which
 * artifacts measure its cells as they are now.  poros-merge --spec and
 * poros-cell state ask it the same question, so they cannot disagree. */
#ifndef POROS_CURRENT_H
#define POROS_CURRENT_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "artifact.h"

/* Its cells in spec order and their config_hash, the identity of what
 * each cell measures now, and its models as it names them now. */
struct current_spec {
	cJSON *json;
	const cJSON *cells;   /* ["cell_id", ...] */
	const cJSON *hashes;  /* {"cell_id": "sha256:...", ...} */
	const cJSON *models;  /* [{"arch": ..., "display_name": ...}, ...] */
};

/* 0, or -1 with err set (unreadable, not a spec.json, no config_hashes,
 * no models list). */
int current_spec_load(struct current_spec *cs, const char *path, char *err, size_t errsz);
void current_spec_free(struct current_spec *cs);

/* Where cell_id stands among the spec's cells, or -1. */
int current_spec_index(const struct current_spec *cs, const char *cell_id);
/* The spec's config_hash of cell_id, or NULL. */
const char *current_spec_hash(const struct current_spec *cs, const char *cell_id);

/* True when a measured the spec's cell as it is now: both the hash it
 * records and the hash of the cell it carries are the spec's. */
int artifact_is_current(const struct current_spec *cs, const struct artifact *a);

#endif
