/* tools/poros-merge/append.c: --append-to, the one safe way for the
 * driver to add a result line: a whole line per write(2), fsync'd. */
#include "merge.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jsonl.h"
#include "util.h"

/* Holds an exclusive flock(2) on path (created if need be) so that the
 * torn-line check below and the append are one step for every writer that
 * goes through here: without it, a concurrent writer's line in progress
 * looks torn.  Returns the locked fd, or -1 with errno. */
static int lock_file(const char *path)
{
	int fd = open(path, O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);

	if (fd < 0)
		return -1;
	while (flock(fd, LOCK_EX) < 0) {
		if (errno != EINTR) {
			int e = errno;
			close(fd);
			errno = e;
			return -1;
		}
	}
	return fd;
}

/* A file whose last byte is not a newline ends in a torn line (a writer
 * that was killed mid-line, or a full disk): start ours on a fresh line
 * so the fragment stays one malformed line instead of corrupting ours. */
static int ends_torn(int fd)
{
	struct stat st;
	char last;

	return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
	       pread(fd, &last, 1, st.st_size - 1) == 1 && last != '\n';
}

/* One line, whole, under the lock. */
static int append_locked(const char *path, const char *line)
{
	int fd = lock_file(path), rc;
	char *data = NULL;

	if (fd < 0)
		return -1;
	if (ends_torn(fd)) {
		warnmsg("warning: %s: last line is incomplete (a killed writer?); starting a new line", path);
		data = xasprintf("\n%s", line);
	}
	rc = append_line(path, data ? data : line, strlen(data ? data : line));
	free(data);
	/* Closing releases the lock, after append_line's fsync. */
	if (rc < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return close(fd);
}

int append_lines(const char *path, FILE *in, const char *in_name)
{
	struct jsonl_reader r;
	cJSON *obj;
	int got, status = EXIT_OK;

	jsonl_init(&r, in, in_name);
	while ((got = jsonl_next(&r, &obj)) != 0) {
		char *line;

		if (got < 0) {
			if (ferror(in)) {
				warnmsg("%s: %s", in_name, r.err);
				status = EXIT_RUNTIME;
				break;
			}
			warnmsg("%s:%ld: not appended: %s", in_name, r.line, r.err);
			status = EXIT_USAGE;
			continue;
		}
		line = jsonl_format(obj);
		cJSON_Delete(obj);
		if (line == NULL)
			die(EXIT_RUNTIME, "out of memory");
		if (strlen(line) > APPEND_LINE_MAX) {
			/* too big to append in one safe write: refused, the file untouched */
			warnmsg("%s:%ld: not appended: the record is %zu bytes, over the %d-byte bound on a line", in_name,
			        r.line, strlen(line), APPEND_LINE_MAX);
			status = EXIT_USAGE;
		} else if (append_locked(path, line) < 0) {
			warnsys("%s: appending a line failed", path);
			status = EXIT_RUNTIME;
		}
		free(line);
		if (status == EXIT_RUNTIME)
			break;
	}
	jsonl_free(&r);
	return status;
}
