/* tools/lib/records/current.c: which artifacts measure a spec.json's cells as
 * they are now. */
#include "current.h"

#include <stdio.h>
#include <string.h>

#include "cell_hash.h"
#include "util/util.h"

int current_spec_load(struct current_spec *cs, const char *path, char *err, size_t errsz)
{
	const cJSON *schema;

	memset(cs, 0, sizeof *cs);
	if ((cs->json = json_read_file(path, err, errsz)) == NULL)
		return -1;
	schema = cJSON_GetObjectItemCaseSensitive(cs->json, "schema");
	cs->cells = cJSON_GetObjectItemCaseSensitive(cs->json, "cells");
	cs->hashes = cJSON_GetObjectItemCaseSensitive(cs->json, "config_hashes");
	cs->models = cJSON_GetObjectItemCaseSensitive(cs->json, "models");
	if (!cJSON_IsString(schema) || strcmp(schema->valuestring, "poros.spec/1") != 0) {
		snprintf(err, errsz, "%s: not a spec.json (schema \"poros.spec/1\")", path);
	} else if (!cJSON_IsArray(cs->cells) || !cJSON_IsObject(cs->hashes)) {
		snprintf(err, errsz, "%s: no cells or config_hashes (written by an older poros-expand: "
		         "expand the spec again)", path);
	} else if (!cJSON_IsArray(cs->models)) {
		snprintf(err, errsz, "%s: no models list", path);
	} else {
		return 0;
	}
	current_spec_free(cs);
	return -1;
}

void current_spec_free(struct current_spec *cs)
{
	cJSON_Delete(cs->json);
	memset(cs, 0, sizeof *cs);
}

int current_spec_index(const struct current_spec *cs, const char *cell_id)
{
	const cJSON *id;
	int i = 0;

	cJSON_ArrayForEach(id, cs->cells) {
		if (cJSON_IsString(id) && strcmp(id->valuestring, cell_id) == 0)
			return i;
		i++;
	}
	return -1;
}

const char *current_spec_hash(const struct current_spec *cs, const char *cell_id)
{
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(cs->hashes, cell_id);

	return cJSON_IsString(h) ? h->valuestring : NULL;
}

int artifact_is_current(const struct current_spec *cs, const struct artifact *a)
{
	char hash[CELL_HASH_LEN + 1];
	const char *want = current_spec_hash(cs, a->cell_id);

	cell_config_hash(hash, &a->cell);
	return current_spec_index(cs, a->cell_id) >= 0 && want && strcmp(want, a->config_hash) == 0 &&
	       strcmp(hash, a->config_hash) == 0;
}
