/* tools/poros-merge/merge.h: the three things poros-merge does. */
#ifndef POROS_MERGE_H
#define POROS_MERGE_H

#include <stdio.h>

#include "records/records.h"

/* Reads every input into s (latest artifact per cell wins).  With cs, an
 * artifact counts only when it measured one of cs's cells as it is now
 * (its config_hash, recorded and recomputed, is the spec's); the others
 * are counted in a note on stderr, s is put in spec order and each
 * model's display_name is the spec's now (it is not in config_hash, so a
 * renamed model's cells are not measured again).  Returns
 * the exit status so far: 0, EXIT_USAGE when a line or file was malformed
 * (reported and skipped), EXIT_RUNTIME when an input could not be read. */
int merge_inputs(struct result_set *s, char *const *paths, int n, const struct current_spec *cs);

/* One compact artifact line per cell on out. */
int merge_write(FILE *out, const struct result_set *s);

enum compare_format { COMPARE_JSONL, COMPARE_MD, COMPARE_TABLE };

/* Per cell in a or b (a's order, then b's cells a lacks): s/step,
 * tokens/s and VRAM peak of each side, the delta b - a and the ratio
 * b / a, marked as noise when the two sides' s/step spreads (min..max)
 * overlap; cells of one side only are marked so.  Warns on stderr (and
 * in Markdown, under the title) for each cell whose configuration
 * differs, naming the fields, and when the runs' environments differ.
 * COMPARE_TABLE is a plain aligned table for a terminal. */
int compare_write(FILE *out, const struct result_set *a, const struct result_set *b, const char *name_a,
                  const char *name_b, enum compare_format format);

/* Appends each JSON object line of in to path, one write(2) + fsync per
 * line, so a killed writer leaves only whole lines.  Returns the exit
 * status: 0, EXIT_USAGE when an input line was malformed (reported, not
 * appended), EXIT_RUNTIME when the file could not be written. */
int append_lines(const char *path, FILE *in, const char *in_name);

/* --if-missing: appends each record of inputs (artifact files, "-" for
 * JSON Lines on stdin; stdin when n is 0) that path lacks, a record being
 * its cell_id and finished_at, all under one lock on path.  Exit status as
 * append_lines (EXIT_USAGE also for a record without those two strings). */
int append_missing(const char *path, char *const *inputs, int n);

#endif
