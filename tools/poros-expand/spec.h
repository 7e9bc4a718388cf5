/* tools/poros-expand/spec.h: a bench spec (man/poros-spec.5), read from
 * YAML, every field checked, every default filled. */
#ifndef POROS_EXPAND_SPEC_H
#define POROS_EXPAND_SPEC_H

#include <stddef.h>
#include <cjson/cJSON.h>

#include "records/records.h"

/* A spec may list this many models; 64 x 5 methods x 2 precisions cells. */
#define SPEC_MAX_MODELS 64

struct spec_model {
	char *model_id;
	char *display_name;
	char *arch;               /* slugify(model_id, 1) */
	double param_count_b;     /* 0: not given and no model config to count from */
	int param_count_given;
	unsigned long line, col;  /* of the entry, for warnings */
};

struct spec {
	const char *file;
	/* Every value the cells share; model, method, precision and cell_id
	 * are left unset.  Each cell starts as a copy of this one struct, so
	 * the arms cannot differ in anything but what they are meant to. */
	struct cell shared;
	struct spec_model *models;
	size_t n_models;
	enum method methods[METHOD_COUNT];
	int n_methods;
	enum precision precisions[PRECISION_COUNT];
	int n_precisions;
	struct {
		int html, markdown, emit_json;
	} reporting;
};

/* Reads and checks the spec in file.  output_dir, when not NULL (-o),
 * replaces reporting.output_dir.  Any problem ends the program with exit 2
 * and one line "FILE:LINE:COL: what". */
void spec_load(struct spec *s, const char *file, const char *output_dir);
/* For each model: finds its config (a local checkpoint, the HF cache or
 * configs/models/<arch>.json); warns on stderr when there is none, and
 * counts its parameters when the spec did not give param_count_b. */
void spec_resolve_models(struct spec *s);
void spec_free(struct spec *s);

size_t spec_cell_count(const struct spec *s);
/* Cell i in the stable order: models in spec order, then methods, then
 * precisions.  c owns its strings (cell_free). */
void spec_cell(const struct spec *s, size_t i, struct cell *c);
/* The normalized spec ("poros.spec/1"): every value, defaults filled,
 * plus the cell ids; NULL when out of memory. */
cJSON *spec_to_json(const struct spec *s);

#endif
