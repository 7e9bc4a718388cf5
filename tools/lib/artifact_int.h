/* tools/lib/artifact_int.h: what the artifact's writer (artifact.c) and
 * its readers (artifact_read.c) share: the empty and freed states of its
 * parts, in one place. */
#ifndef POROS_ARTIFACT_INT_H
#define POROS_ARTIFACT_INT_H

#include "artifact.h"

void metrics_init(struct artifact_metrics *m);  /* every field not measured */
void env_init(struct artifact_env *e);          /* every field null */
void env_free(struct artifact_env *e);          /* and env_init */
int have_cell(const struct artifact *a);        /* a->cell holds a cell */

#endif
