/* tools/poros-parity/compare.h: comparing two training runs (their
 * events.jsonl and adapter/) into a parity record. */
#ifndef POROS_PARITY_COMPARE_H
#define POROS_PARITY_COMPARE_H

#include <stddef.h>

#include "records/records.h"

/* The per-step losses of one run, in file order. */
struct run_events {
	char *path;              /* RUN/events.jsonl, for messages */
	long n;
	long *step;
	double *loss;            /* NaN where the event says null */
	unsigned char *loss_null;
};

/* Reads RUN/events.jsonl.  Returns 0, or an exit code (EXIT_USAGE for a
 * missing or malformed file, EXIT_RUNTIME for a read error) with err set. */
int events_load(struct run_events *ev, const char *run_dir, char *err, size_t errsz);
void events_free(struct run_events *ev);

/* Compares run_a with run_b into p (run_a, run_b, steps, losses, adapter
 * tensors, bitwise_exact; the labels are left alone).  Runs that do not
 * match (step count or numbers, tensor names or shapes, rank) are an error,
 * never a partial compare.  Returns 0, or an exit code with err set. */
int compare_runs(struct parity *p, const char *run_a, const char *run_b, char *err, size_t errsz);

/* Sets the "parity" field of DIR/poros_<arch>_<precision>.json and
 * DIR/resident_<arch>_<precision>.json, those that exist, from p (whose
 * arch and precision must be set); *updated counts them.  Returns 0, or
 * -1 with err set (a file that is not an artifact, a write that failed). */
int parity_update_artifacts(const char *dir, const struct parity *p, int *updated, char *err, size_t errsz);

#endif
