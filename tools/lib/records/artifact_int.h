/* tools/lib/records/artifact_int.h: what the artifact's writer (artifact.c) and
 * its readers (artifact_read.c) share: the empty and freed states of its
 * parts and the walk over its table, in one place. */
#ifndef POROS_ARTIFACT_INT_H
#define POROS_ARTIFACT_INT_H

#include "artifact.h"

void metrics_init(struct artifact_metrics *m);  /* every field not measured */
void env_init(struct artifact_env *e);          /* every field null */
void env_free(struct artifact_env *e);          /* and env_init */
int have_cell(const struct artifact *a);        /* a->cell holds a cell */

/* By the table (artifact_fields): a section is an object's path ("metrics",
 * "env", "parity") or "" for the top level; base the struct holding its rows. */
const char *field_key(const struct artifact_field *f);           /* its key in its object */
int field_in(const struct artifact_field *f, const char *section); /* a key of section */
void section_null(void *base, const char *section);   /* every row null, nothing freed */
void section_free(void *base, const char *section);   /* what the rows own freed; then null */
const char *cell_copy_value(const struct cell *c, const char *path); /* cell.<path> as text */

#endif
