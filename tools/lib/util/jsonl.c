/* tools/lib/util/jsonl.c: JSON Lines of any length in, compact lines out. */
#include "jsonl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

void jsonl_init(struct jsonl_reader *r, FILE *f, const char *name)
{
	memset(r, 0, sizeof *r);
	r->f = f;
	r->name = name;
}

void jsonl_free(struct jsonl_reader *r)
{
	free(r->buf);
	r->buf = NULL;
	r->cap = 0;
}

static int blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
			return 0;
	return 1;
}

int jsonl_next(struct jsonl_reader *r, cJSON **out)
{
	for (;;) {
		ssize_t n;
		const char *end = NULL;
		cJSON *obj;

		errno = 0;
		n = getline(&r->buf, &r->cap, r->f);
		if (n < 0) {
			if (ferror(r->f)) {
				snprintf(r->err, sizeof r->err, "read error: %s", strerror(errno ? errno : EIO));
				return -1;
			}
			return 0;
		}
		r->line++;
		if (memchr(r->buf, '\0', (size_t)n) != NULL) {
			snprintf(r->err, sizeof r->err, "contains a NUL byte");
			return -1;
		}
		if (r->buf[n - 1] != '\n') {
			if (blank(r->buf, (size_t)n))
				return 0;
			snprintf(r->err, sizeof r->err, "line does not end in a newline (truncated?)");
			return -1;
		}
		if (blank(r->buf, (size_t)n))
			continue;
		obj = cJSON_ParseWithLengthOpts(r->buf, (size_t)n, &end, 0);
		if (obj == NULL) {
			long col = end ? (long)(end - r->buf) + 1 : 1;
			const char *ep = cJSON_GetErrorPtr();
			if (ep && ep >= r->buf && ep <= r->buf + n)
				col = (long)(ep - r->buf) + 1;
			snprintf(r->err, sizeof r->err, "not valid JSON at column %ld", col);
			return -1;
		}
		if (!blank(end, (size_t)(r->buf + n - end))) {
			cJSON_Delete(obj);
			snprintf(r->err, sizeof r->err, "more than one JSON value on the line (column %ld)",
			         (long)(end - r->buf) + 1);
			return -1;
		}
		if (!cJSON_IsObject(obj)) {
			cJSON_Delete(obj);
			snprintf(r->err, sizeof r->err, "not a JSON object");
			return -1;
		}
		*out = obj;
		return 1;
	}
}

char *jsonl_format(const cJSON *obj)
{
	char *s = cJSON_PrintUnformatted(obj);
	size_t n;
	char *line;

	if (s == NULL)
		die(EXIT_RUNTIME, "out of memory formatting JSON");
	n = strlen(s);
	line = xmalloc(n + 2);
	memcpy(line, s, n);
	line[n] = '\n';
	line[n + 1] = '\0';
	cJSON_free(s);
	return line;
}

int jsonl_write(FILE *out, const cJSON *obj)
{
	char *line = jsonl_format(obj);
	size_t n = strlen(line);
	int rc = fwrite(line, 1, n, out) == n ? 0 : -1;

	free(line);
	return rc;
}

static void close_stdout(void)
{
	int bad = fflush(stdout) != 0;

	bad |= ferror(stdout) != 0;
	bad |= fclose(stdout) != 0;
	if (bad) {
		fprintf(stderr, "%s: writing output failed: %s\n", progname, strerror(errno ? errno : EIO));
		_exit(EXIT_USAGE);
	}
}

void stdout_check_at_exit(void)
{
	atexit(close_stdout);
}

cJSON *json_read_file(const char *path, char *err, size_t errsz)
{
	size_t len;
	char *text = read_whole_file(path, &len);
	const char *end = NULL;
	cJSON *v;

	if (text == NULL) {
		snprintf(err, errsz, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (memchr(text, '\0', len) != NULL) {
		snprintf(err, errsz, "%s: contains a NUL byte (not a JSON file)", path);
		free(text);
		return NULL;
	}
	v = cJSON_ParseWithLengthOpts(text, len, &end, 0);
	if (v == NULL || !blank(end, (size_t)(text + len - end))) {
		const char *at = v ? end : cJSON_GetErrorPtr();
		long line = 1, col = 1;
		if (at == NULL || at < text || at > text + len)
			at = text;
		for (const char *p = text; p < at; p++) {
			if (*p == '\n') {
				line++;
				col = 1;
			} else {
				col++;
			}
		}
		snprintf(err, errsz, "%s:%ld:%ld: not valid JSON", path, line, col);
		cJSON_Delete(v);
		free(text);
		return NULL;
	}
	free(text);
	return v;
}

const cJSON *json_finite(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);

	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return NULL;
	return v;
}

cJSON *json_number_or_null(double v)
{
	return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}
