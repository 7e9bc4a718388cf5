/* tools/poros-merge/append.c: --append-to, the one safe way for the
 * driver to add a result line: a whole line per write(2), fsync'd; with
 * --if-missing only the records the file lacks (the "heal" of a run killed
 * between an artifact and its line). */
#include "merge.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/util.h"

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

/* One line, whole; fd holds the lock. */
static int append_under_lock(int fd, const char *path, const char *line)
{
	char *data = NULL;
	int rc;

	if (ends_torn(fd)) {
		warnmsg("warning: %s: last line is incomplete (a killed writer?); starting a new line", path);
		data = xasprintf("\n%s", line);
	}
	rc = append_line(path, data ? data : line, strlen(data ? data : line));
	free(data);
	return rc;
}

/* One line, whole, under the lock. */
static int append_locked(const char *path, const char *line)
{
	int fd = lock_file(path), rc;

	if (fd < 0)
		return -1;
	rc = append_under_lock(fd, path, line);
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

/* --- --if-missing ---------------------------------------------------------- */

/* A record's identity in a results file: its cell and when it finished. */
struct record_key {
	char *cell_id, *finished_at;
};

struct key_set {
	struct record_key *k;
	int n;
};

/* 0 and the two strings of obj (not copied), or -1. */
static int key_of(const cJSON *obj, const char **cell_id, const char **finished_at)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(obj, "cell_id");
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, "finished_at");

	if (!cJSON_IsString(c) || !cJSON_IsString(f))
		return -1;
	*cell_id = c->valuestring;
	*finished_at = f->valuestring;
	return 0;
}

static void keys_add(struct key_set *ks, const char *cell_id, const char *finished_at)
{
	ks->k = xrealloc(ks->k, (size_t)(ks->n + 1) * sizeof *ks->k);
	ks->k[ks->n].cell_id = xstrdup(cell_id);
	ks->k[ks->n].finished_at = xstrdup(finished_at);
	ks->n++;
}

static int keys_have(const struct key_set *ks, const char *cell_id, const char *finished_at)
{
	for (int i = 0; i < ks->n; i++)
		if (strcmp(ks->k[i].cell_id, cell_id) == 0 && strcmp(ks->k[i].finished_at, finished_at) == 0)
			return 1;
	return 0;
}

static void keys_free(struct key_set *ks)
{
	for (int i = 0; i < ks->n; i++) {
		free(ks->k[i].cell_id);
		free(ks->k[i].finished_at);
	}
	free(ks->k);
}

/* The keys of path's lines (held locked).  A line that does not parse is
 * no record of anything: the readers report it, here it only is not a
 * match.  0, or -1 with errno. */
static int keys_read(struct key_set *ks, const char *path)
{
	size_t len;
	char *text = read_whole_file(path, &len), *line, *end;

	if (text == NULL)
		return -1;
	for (line = text; line < text + len; line = end + 1) {
		const char *cell_id, *finished_at;
		cJSON *obj;

		end = memchr(line, '\n', (size_t)(text + len - line));
		if (end == NULL)
			end = text + len;
		obj = cJSON_ParseWithLength(line, (size_t)(end - line));
		if (obj && key_of(obj, &cell_id, &finished_at) == 0)
			keys_add(ks, cell_id, finished_at);
		cJSON_Delete(obj);
	}
	free(text);
	return 0;
}

/* One record: appended unless the file (or an earlier input) has it. */
static int append_one_missing(int fd, const char *path, struct key_set *ks, const cJSON *obj, const char *where)
{
	const char *cell_id, *finished_at;
	char *line;
	int status = EXIT_OK;

	if (key_of(obj, &cell_id, &finished_at) < 0) {
		warnmsg("%s: not appended: no \"cell_id\" and \"finished_at\" strings (expected an artifact)", where);
		return EXIT_USAGE;
	}
	if (keys_have(ks, cell_id, finished_at))
		return EXIT_OK;
	line = jsonl_format(obj);
	if (line == NULL)
		die(EXIT_RUNTIME, "out of memory");
	if (strlen(line) > APPEND_LINE_MAX) {
		warnmsg("%s: not appended: the record is %zu bytes, over the %d-byte bound on a line", where,
		        strlen(line), APPEND_LINE_MAX);
		status = EXIT_USAGE;
	} else if (append_under_lock(fd, path, line) < 0) {
		warnsys("%s: appending a line failed", path);
		status = EXIT_RUNTIME;
	} else {
		keys_add(ks, cell_id, finished_at);
	}
	free(line);
	return status;
}

static int worse(int a, int b)
{
	return a > b ? a : b;
}

/* The records of one input: an artifact file (one JSON object), or JSON
 * Lines on stdin for "-". */
static int append_input_missing(int fd, const char *path, struct key_set *ks, const char *input)
{
	char err[512];
	int status = EXIT_OK;

	if (strcmp(input, "-") == 0) {
		struct jsonl_reader r;
		cJSON *obj;
		int got;

		jsonl_init(&r, stdin, "<stdin>");
		while (status != EXIT_RUNTIME && (got = jsonl_next(&r, &obj)) != 0) {
			char *where;

			if (got < 0) {
				warnmsg("<stdin>:%ld: not appended: %s", r.line, r.err);
				status = ferror(stdin) ? EXIT_RUNTIME : EXIT_USAGE;
				continue;
			}
			where = xasprintf("<stdin>:%ld", r.line);
			status = worse(status, append_one_missing(fd, path, ks, obj, where));
			free(where);
			cJSON_Delete(obj);
		}
		jsonl_free(&r);
		return status;
	}
	{
		cJSON *obj = json_read_file(input, err, sizeof err);

		if (obj == NULL) {
			warnmsg("not appended: %s", err);
			return access(input, R_OK) == 0 ? EXIT_USAGE : EXIT_RUNTIME;
		}
		if (!cJSON_IsObject(obj)) {
			warnmsg("%s: not appended: not a JSON object (expected an artifact)", input);
			status = EXIT_USAGE;
		} else {
			status = append_one_missing(fd, path, ks, obj, input);
		}
		cJSON_Delete(obj);
	}
	return status;
}

int append_missing(const char *path, char *const *inputs, int n)
{
	static char *const from_stdin[] = { "-" };
	struct key_set ks = { NULL, 0 };
	int fd = lock_file(path), status = EXIT_OK;

	if (fd < 0) {
		warnsys("%s: cannot open", path);
		return EXIT_RUNTIME;
	}
	/* read, compare and append under one lock: two healers append once */
	if (keys_read(&ks, path) < 0) {
		warnsys("%s: cannot read", path);
		close(fd);
		return EXIT_RUNTIME;
	}
	if (n == 0) {
		inputs = from_stdin;
		n = 1;
	}
	for (int i = 0; i < n && status != EXIT_RUNTIME; i++)
		status = worse(status, append_input_missing(fd, path, &ks, inputs[i]));
	keys_free(&ks);
	if (close(fd) < 0 && status == EXIT_OK) {
		warnsys("%s", path);
		status = EXIT_RUNTIME;
	}
	return status;
}
