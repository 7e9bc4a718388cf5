/* tools/poros-expand/output.h: writing a run's files all or nothing. */
#ifndef POROS_EXPAND_OUTPUT_H
#define POROS_EXPAND_OUTPUT_H

#include <stddef.h>

/* What one run has created so far, so a failure can take it all back. */
struct output_log {
	char **files;
	size_t n_files;
	char **dirs;   /* in creation order, parents first */
	size_t n_dirs;
};

/* mkdir -p that records each directory it creates.  0, or -1 with errno. */
int output_mkdirs(struct output_log *log, const char *path);
/* atomic_write, recorded.  0, or -1 with errno. */
int output_write(struct output_log *log, const char *path, const char *data, size_t len);
/* Removes every recorded file, then every recorded directory, newest first. */
void output_rollback(struct output_log *log);
void output_log_free(struct output_log *log);

#endif
