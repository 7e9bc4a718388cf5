/* tools/poros-merge/merge.h: the three things poros-merge does. */
#ifndef POROS_MERGE_H
#define POROS_MERGE_H

#include <stdio.h>

#include "report.h"

/* Reads every input into s (latest artifact per cell wins).  Returns the
 * exit status so far: 0, EXIT_USAGE when a line or file was malformed
 * (reported and skipped), EXIT_RUNTIME when an input could not be read. */
int merge_inputs(struct result_set *s, char *const *paths, int n);

/* One compact artifact line per cell on out. */
int merge_write(FILE *out, const struct result_set *s);

enum compare_format { COMPARE_JSONL, COMPARE_MD };

/* Per cell in a or b: s/step, tokens/s and VRAM peak of each side, the
 * delta b - a and the ratio b / a; cells of one side only are marked so.
 * Warns on stderr (and in Markdown, in the table's caption) when the two
 * runs' environments differ. */
int compare_write(FILE *out, const struct result_set *a, const struct result_set *b, const char *name_a,
                  const char *name_b, enum compare_format format);

/* Appends each JSON object line of in to path, one write(2) + fsync per
 * line, so a killed writer leaves only whole lines.  Returns the exit
 * status: 0, EXIT_USAGE when an input line was malformed (reported, not
 * appended), EXIT_RUNTIME when the file could not be written. */
int append_lines(const char *path, FILE *in, const char *in_name);

#endif
