/* tools/poros-expand/output.h: writing a run's files all or nothing. */
#ifndef POROS_EXPAND_OUTPUT_H
#define POROS_EXPAND_OUTPUT_H

#include <stddef.h>

/* What one run has created or replaced so far, so a failure can take it
 * all back: a replaced file's earlier content is kept until the log is
 * freed, and a rollback writes it back. */
struct output_log {
	char **files;
	char **before;  /* per file: its earlier content, or NULL (it was new) */
	size_t *before_len;
	size_t n_files;
	char **dirs;   /* in creation order, parents first */
	size_t n_dirs;
};

/* mkdir -p that records each directory it creates.  0, or -1 with errno. */
int output_mkdirs(struct output_log *log, const char *path);
/* atomic_write, recorded (with what path held before).  0, or -1 with errno. */
int output_write(struct output_log *log, const char *path, const char *data, size_t len);
/* Puts back every replaced file's earlier content and removes every new
 * file, then every recorded directory, newest first. */
void output_rollback(struct output_log *log);
void output_log_free(struct output_log *log);

#endif
