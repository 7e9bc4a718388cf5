/* tools/poros-expand/output.c: directories and files of one run, recorded
 * so that a failure part way leaves nothing of this run behind. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "output.h"
#include "util/util.h"

static void push(char ***list, size_t *n, const char *s)
{
	*list = xrealloc(*list, (*n + 1) * sizeof **list);
	(*list)[(*n)++] = xstrdup(s);
}

int output_mkdirs(struct output_log *log, const char *path)
{
	char *p = xstrdup(path);
	size_t len = strlen(p);
	int rc = 0;

	/* Each prefix ending at a '/' (past a leading one), then the whole. */
	for (size_t i = 1; i <= len && rc == 0; i++) {
		struct stat st;
		char saved;

		if (i < len && p[i] != '/')
			continue;
		saved = p[i];
		p[i] = '\0';
		if (mkdir(p, 0777) == 0)
			push(&log->dirs, &log->n_dirs, p);
		else if (errno != EEXIST)
			rc = -1;
		else if (stat(p, &st) != 0)
			rc = -1;
		else if (!S_ISDIR(st.st_mode))
			rc = -1, errno = ENOTDIR;
		p[i] = saved;
	}
	free(p);
	return rc;
}

int output_write(struct output_log *log, const char *path, const char *data, size_t len)
{
	size_t before_len = 0;
	char *before = NULL;
	struct stat st;

	/* A file of the previous run (a cell, spec.json) is replaced only
	 * once its content is in hand: a rollback must restore it. */
	if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (before = read_whole_file(path, &before_len)) == NULL)
		return -1;
	if (atomic_write(path, data, len) < 0) {
		int e = errno;
		free(before);
		errno = e;
		return -1;
	}
	log->before = xrealloc(log->before, (log->n_files + 1) * sizeof *log->before);
	log->before_len = xrealloc(log->before_len, (log->n_files + 1) * sizeof *log->before_len);
	log->before[log->n_files] = before;
	log->before_len[log->n_files] = before_len;
	push(&log->files, &log->n_files, path);
	return 0;
}

void output_rollback(struct output_log *log)
{
	for (size_t i = log->n_files; i-- > 0;) {
		if (log->before[i] != NULL) {
			if (atomic_write(log->files[i], log->before[i], log->before_len[i]) < 0)
				warnsys("cannot restore %s", log->files[i]);
		} else if (unlink(log->files[i]) < 0 && errno != ENOENT) {
			warnsys("cannot remove %s", log->files[i]);
		}
	}
	for (size_t i = log->n_dirs; i-- > 0;)
		if (rmdir(log->dirs[i]) < 0 && errno != ENOENT)
			warnsys("cannot remove %s", log->dirs[i]);
}

void output_log_free(struct output_log *log)
{
	for (size_t i = 0; i < log->n_files; i++) {
		free(log->files[i]);
		free(log->before[i]);
	}
	free(log->before);
	free(log->before_len);
	for (size_t i = 0; i < log->n_dirs; i++)
		free(log->dirs[i]);
	free(log->files);
	free(log->dirs);
	memset(log, 0, sizeof *log);
}
