/* tools/lib/text/dataset_files.c: dataset files (.jsonl, .json, .txt, each
 * optionally .gz) and directories of them read into records for
 * dataset_add_record / dataset_add_text (man/poros-dataset.5 says which files a
 * directory gives). */
#include "dataset_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "util/util.h"

/* ---- files --------------------------------------------------------------- */

static int has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && strcmp(s + n - k, suffix) == 0;
}

enum file_kind { KIND_NONE, KIND_JSONL, KIND_JSON, KIND_TXT };

static enum file_kind file_kind(const char *path, int *gz)
{
	char *p = xstrdup(path);
	enum file_kind k = KIND_NONE;

	*gz = has_suffix(p, ".gz");
	if (*gz)
		p[strlen(p) - 3] = '\0';
	if (has_suffix(p, ".jsonl"))
		k = KIND_JSONL;
	else if (has_suffix(p, ".json"))
		k = KIND_JSON;
	else if (has_suffix(p, ".txt"))
		k = KIND_TXT;
	free(p);
	return k;
}

/* A dataset file read in chunks, gunzipped when gz: JSON Lines are taken a
 * line at a time, so a file is never held whole unless its format needs it
 * (a JSON array, text paragraphs). */
struct reader {
	const char *path;
	gzFile gz;        /* NULL for a plain file */
	int fd;
	char *buf;        /* cap + 1 bytes: room for a terminating NUL */
	size_t cap;
	size_t start, end; /* unconsumed bytes: buf[start .. end) */
	size_t scan;      /* buf[start .. scan) holds no newline */
	int eof;
	long long size;   /* the file's bytes (compressed, for .gz), for progress */
};

/* Bytes of the file consumed so far (of the compressed file, for .gz). */
static long long reader_offset(const struct reader *r)
{
	if (r->gz)
		return (long long)gzoffset(r->gz);
	return (long long)lseek(r->fd, 0, SEEK_CUR) - (long long)(r->end - r->start);
}

/* One read request: gzread takes an int count, read(2) gives at most ~2 GiB. */
#define READ_CHUNK ((size_t)1 << 30)

static int reader_open(struct reader *r, const char *path, int gz, char *err, size_t errsz)
{
	memset(r, 0, sizeof *r);
	r->path = path;
	r->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (r->fd < 0) {
		set_error(err, errsz, "%s: %s", path, strerror(errno));
		return -1;
	}
	{
		struct stat st;

		r->size = fstat(r->fd, &st) == 0 ? (long long)st.st_size : 0;
	}
	if (gz) {
		r->gz = gzdopen(r->fd, "rb");
		if (r->gz == NULL) {
			set_error(err, errsz, "%s: cannot open (out of memory)", path);
			close(r->fd);
			return -1;
		}
		r->fd = -1;
	}
	return 0;
}

static void reader_close(struct reader *r)
{
	if (r->gz)
		gzclose(r->gz);
	if (r->fd >= 0)
		close(r->fd);
	free(r->buf);
	memset(r, 0, sizeof *r);
	r->fd = -1;
}

/* Reads more bytes after buf[end], growing the buffer when it is full.
 * 0 (r->eof once the file is done) or -1 with err. */
static int reader_fill(struct reader *r, char *err, size_t errsz)
{
	size_t want;
	ssize_t got;

	if (r->start > 0 && r->start == r->end) {
		r->start = r->end = r->scan = 0;
	} else if (r->start > r->cap / 2) { /* keep the unconsumed tail at the front */
		memmove(r->buf, r->buf + r->start, r->end - r->start);
		r->end -= r->start;
		r->scan -= r->start;
		r->start = 0;
	}
	if (r->end == r->cap) {
		if (r->cap > SIZE_MAX / 2 - 1) {
			set_error(err, errsz, "%s: too large to read", r->path);
			return -1;
		}
		r->cap = r->cap ? r->cap * 2 : (size_t)1 << 20;
		r->buf = xrealloc(r->buf, r->cap + 1);
	}
	want = r->cap - r->end < READ_CHUNK ? r->cap - r->end : READ_CHUNK;
	if (r->gz) {
		int n = gzread(r->gz, r->buf + r->end, (unsigned)want);
		if (n < 0) {
			int zerr;
			const char *why = gzerror(r->gz, &zerr);
			set_error(err, errsz, "%s: %s", r->path, zerr == Z_ERRNO ? strerror(errno) : why);
			return -1;
		}
		got = n;
	} else {
		do
			got = read(r->fd, r->buf + r->end, want);
		while (got < 0 && errno == EINTR);
		if (got < 0) {
			set_error(err, errsz, "%s: %s", r->path, strerror(errno));
			return -1;
		}
	}
	if (got == 0)
		r->eof = 1;
	r->end += (size_t)got;
	return 0;
}

/* A buffer grown for one long line goes back to a small one once that line
 * is consumed, so a single huge record does not keep its copy alive. */
static void reader_shrink(struct reader *r)
{
	size_t left = r->end - r->start, cap = (size_t)1 << 20;

	if (r->cap <= ((size_t)8 << 20) || left > cap)
		return;
	memmove(r->buf, r->buf + r->start, left);
	r->buf = xrealloc(r->buf, cap + 1);
	r->cap = cap;
	r->end = left;
	r->scan -= r->start;
	r->start = 0;
}

/* The next line, without its newline: 1 and *s, *n (valid until the next
 * call), 0 at the end of the file, -1 with err. */
static int reader_line(struct reader *r, const char **s, size_t *n, char *err, size_t errsz)
{
	for (;;) {
		char *nl = r->scan < r->end ? memchr(r->buf + r->scan, '\n', r->end - r->scan) : NULL;
		if (nl != NULL || (r->eof && r->end > r->start)) {
			size_t stop = nl ? (size_t)(nl - r->buf) : r->end;
			*s = r->buf + r->start;
			*n = stop - r->start;
			r->start = r->scan = stop + (nl != NULL);
			return 1;
		}
		if (r->eof)
			return 0;
		r->scan = r->end;
		if (reader_fill(r, err, errsz) < 0)
			return -1;
	}
}

/* The rest of the file, NUL-terminated, in r's buffer; NULL with err. */
static char *reader_rest(struct reader *r, size_t *len, char *err, size_t errsz)
{
	while (!r->eof)
		if (reader_fill(r, err, errsz) < 0)
			return NULL;
	if (r->buf == NULL)
		r->buf = xmalloc(1);
	r->buf[r->end] = '\0';
	*len = r->end - r->start;
	return r->buf + r->start;
}

/* Python's json module, and so HF datasets, keeps the LAST value of a key
 * given twice; cJSON's lookups find the first: drop the earlier ones, in
 * every object of v. */
struct keyed {
	const char *key;
	size_t index;
	cJSON *item;
};

static int cmp_keyed(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;
	int c = strcmp(x->key, y->key);
	return c ? c : (x->index > y->index) - (x->index < y->index);
}

static void last_key_wins(cJSON *v)
{
	cJSON *c;
	size_t n = 0;

	if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
		return;
	for (c = v->child; c; c = c->next) {
		last_key_wins(c); /* cJSON's nesting limit bounds the depth */
		n++;
	}
	if (!cJSON_IsObject(v) || n < 2)
		return;
	struct keyed *k = xmalloc(n * sizeof *k);
	size_t i = 0;
	for (c = v->child; c; c = c->next, i++)
		k[i] = (struct keyed){ c->string ? c->string : "", i, c };
	if (n > 1) /* qsort may not take a NULL base, even for 0 */
		qsort(k, n, sizeof *k, cmp_keyed);
	for (i = 0; i + 1 < n; i++)
		if (strcmp(k[i].key, k[i + 1].key) == 0)
			cJSON_Delete(cJSON_DetachItemViaPointer(v, k[i].item));
	free(k);
}

/* One JSON Lines record: s[0 .. n) is line of r's file, valid until r is
 * read again. */
static int add_jsonl_line(struct dataset *ds, struct reader *r, long line, const char *s, size_t n, char *err,
			  size_t errsz)
{
	char where[PATH_MAX + 32];
	size_t k = 0;
	cJSON *rec;
	int rc;

	while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r'))
		k++;
	if (k == n)
		return 0;
	snprintf(where, sizeof where, "%s:%ld", r->path, line);
	rec = cJSON_ParseWithLength(s, n);
	if (rec == NULL) {
		const char *at = cJSON_GetErrorPtr();
		long col = at && at >= s && at <= s + n ? (long)(at - s) + 1 : 1;
		set_error(err, errsz, "%s:%ld: not valid JSON", where, col);
		return -1;
	}
	/* the line is parsed: a buffer grown for it goes before the record is
	 * copied into the dataset */
	reader_shrink(r);
	last_key_wins(rec);
	rc = dataset_add_record(ds, rec, where, err, errsz);
	cJSON_Delete(rec);
	return rc;
}

/* JSON Lines from r, one line at a time. */
static int add_jsonl(struct dataset *ds, struct reader *r, char *err, size_t errsz)
{
	const char *s;
	size_t n;
	long line = 0;
	int got;

	while ((got = reader_line(r, &s, &n, err, errsz)) > 0) {
		if (add_jsonl_line(ds, r, ++line, s, n, err, errsz) < 0)
			return -1;
		if ((line & 1023) == 0) /* the clock, every thousand lines */
			dataset_progress_read(ds, r->path, reader_offset(r), r->size);
	}
	return got;
}

static int add_json(struct dataset *ds, struct reader *r, char *err, size_t errsz)
{
	const char *path = r->path, *buf;
	size_t k, len;
	cJSON *arr, *rec;
	int i = 0;

	/* HF's "json" files are usually JSON Lines: look at the first byte that
	 * is not white space, reading no more than it takes to find it */
	for (;;) {
		k = r->start;
		while (k < r->end && (r->buf[k] == ' ' || r->buf[k] == '\t' || r->buf[k] == '\r' || r->buf[k] == '\n'))
			k++;
		if (k < r->end || r->eof)
			break;
		if (reader_fill(r, err, errsz) < 0)
			return -1;
	}
	if (k == r->end || r->buf[k] != '[')
		return add_jsonl(ds, r, err, errsz);
	buf = reader_rest(r, &len, err, errsz);
	if (buf == NULL)
		return -1;
	arr = cJSON_ParseWithLength(buf, len);
	if (arr == NULL) {
		set_error(err, errsz, "%s: not valid JSON", path);
		return -1;
	}
	last_key_wins(arr);
	cJSON_ArrayForEach(rec, arr) {
		char where[PATH_MAX + 32];
		snprintf(where, sizeof where, "%s: [%d]", path, i++);
		if (dataset_add_record(ds, rec, where, err, errsz) < 0) {
			cJSON_Delete(arr);
			return -1;
		}
	}
	cJSON_Delete(arr);
	return 0;
}

/* One document per paragraph: runs of lines separated by blank lines (only
 * white space).  A paragraph keeps its inner newlines, not its last one. */
static int add_txt(struct dataset *ds, struct reader *r, char *err, size_t errsz)
{
	const char *path = r->path, *buf;
	size_t pos = 0, para = 0, len;
	long line = 0, para_line = 1;
	int in_para = 0;

	buf = reader_rest(r, &len, err, errsz);
	if (buf == NULL)
		return -1;
	while (pos <= len) {
		const char *s = buf + pos, *nl = pos < len ? memchr(s, '\n', len - pos) : NULL;
		size_t n = nl ? (size_t)(nl - s) : len - pos, k = 0;
		int blank;

		line++;
		while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r' || s[k] == '\f' || s[k] == '\v'))
			k++;
		blank = k == n;
		if (!blank && !in_para) {
			in_para = 1;
			para = pos;
			para_line = line;
		}
		if ((blank || nl == NULL) && in_para) {
			size_t end = blank ? pos - 1 : pos + n; /* drop the newline ending the paragraph */
			char where[PATH_MAX + 32];
			snprintf(where, sizeof where, "%s:%ld", path, para_line);
			if (dataset_add_text(ds, buf + para, end - para, where, err, errsz) < 0)
				return -1;
			in_para = 0;
		}
		if (nl == NULL)
			break;
		pos += n + 1;
	}
	return 0;
}

/* The file's identity, for dataset_same_files, and its path and name,
 * for dataset_file. */
static void note_file(struct dataset *ds, const char *path, const char *name)
{
	struct stat st;

	if (stat(path, &st) != 0)
		return;
	ds->files = xrealloc(ds->files, (ds->n_files + 1) * sizeof *ds->files);
	ds->file_paths = xrealloc(ds->file_paths, (ds->n_files + 1) * sizeof *ds->file_paths);
	ds->file_names = xrealloc(ds->file_names, (ds->n_files + 1) * sizeof *ds->file_names);
	ds->file_paths[ds->n_files] = xstrdup(path);
	ds->file_names[ds->n_files] = xstrdup(name);
	ds->files[ds->n_files++] = (struct file_id){ st.st_dev, st.st_ino };
}

/* name: the path under the directory read, or NULL for a file given
 * alone (its kind stands for it: "jsonl", "json.gz"). */
static int add_file(struct dataset *ds, const char *path, const char *name, char *err, size_t errsz)
{
	static const char *const kind_names[] = { [KIND_JSONL] = "jsonl", [KIND_JSON] = "json", [KIND_TXT] = "txt" };
	int gz, rc;
	enum file_kind kind = file_kind(path, &gz);
	struct reader r;
	char kind_name[16];

	if (kind == KIND_NONE) {
		set_error(err, errsz, "%s: not a dataset file (expected .jsonl, .json or .txt, optionally .gz)", path);
		return -1;
	}
	if (reader_open(&r, path, gz, err, errsz) < 0)
		return -1;
	snprintf(kind_name, sizeof kind_name, "%s%s", kind_names[kind], gz ? ".gz" : "");
	note_file(ds, path, name ? name : kind_name);
	if (kind == KIND_JSONL)
		rc = add_jsonl(ds, &r, err, errsz);
	else if (kind == KIND_JSON)
		rc = add_json(ds, &r, err, errsz);
	else
		rc = add_txt(ds, &r, err, errsz);
	reader_close(&r);
	return rc;
}

struct path_list {
	char **v;
	size_t n, cap;
};

static void path_list_add(struct path_list *l, char *p)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 32;
		l->v = xrealloc(l->v, l->cap * sizeof *l->v);
	}
	l->v[l->n++] = p;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* HF's metadata files, which are JSON but not data. */
static int is_metadata(const char *name)
{
	static const char *const names[] = { "dataset_info.json", "dataset_infos.json", "dataset_dict.json",
					     "state.json", NULL };
	for (int i = 0; names[i]; i++)
		if (strcmp(name, names[i]) == 0)
			return 1;
	return 0;
}

/* The directories from the root down to the one being read: a link back
 * to one of them would make the walk go round forever. */
struct dir_chain {
	dev_t dev;
	ino_t ino;
	const struct dir_chain *up;
	int depth;
};

/* Deeper than any dataset layout (HF's are two or three levels). */
#define WALK_MAX_DEPTH 32

/* Data files under dir (relative paths, sorted per directory: a sorted
 * walk); *others counts files of other kinds (.parquet, .arrow, ...).
 * Symbolic links are followed (a HF snapshot is made of them), but a
 * dangling one, a loop or a walk deeper than WALK_MAX_DEPTH is an error. */
static int walk(const char *root, const char *rel, const struct dir_chain *up, struct path_list *out, int *others,
		char *err, size_t errsz)
{
	char *dir = rel[0] ? xasprintf("%s/%s", root, rel) : xstrdup(root);
	struct path_list names = { 0 };
	struct dir_chain here = { 0, 0, up, up ? up->depth + 1 : 0 };
	struct stat st;
	struct dirent *e;
	DIR *d;
	int rc = 0;

	if (stat(dir, &st) != 0) {
		set_error(err, errsz, "%s: %s", dir, strerror(errno));
		free(dir);
		return -1;
	}
	for (const struct dir_chain *c = up; c; c = c->up) {
		if (c->dev == st.st_dev && c->ino == st.st_ino) {
			set_error(err, errsz, "%s: a symbolic link loop (it leads back to a directory above it)", dir);
			free(dir);
			return -1;
		}
	}
	if (here.depth > WALK_MAX_DEPTH) {
		set_error(err, errsz, "%s: more than %d directories deep", dir, WALK_MAX_DEPTH);
		free(dir);
		return -1;
	}
	here.dev = st.st_dev;
	here.ino = st.st_ino;
	d = opendir(dir);
	if (d == NULL) {
		set_error(err, errsz, "%s: %s", dir, strerror(errno));
		free(dir);
		return -1;
	}
	errno = 0;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] != '.')
			path_list_add(&names, xstrdup(e->d_name));
		errno = 0;
	}
	if (errno != 0) {
		set_error(err, errsz, "%s: %s", dir, strerror(errno));
		rc = -1;
	}
	closedir(d);
	if (names.n > 1) /* qsort may not take a NULL base, even for 0 */
		qsort(names.v, names.n, sizeof *names.v, cmp_str);
	for (size_t i = 0; i < names.n && rc == 0; i++) {
		char *sub = rel[0] ? xasprintf("%s/%s", rel, names.v[i]) : xstrdup(names.v[i]);
		char *full = xasprintf("%s/%s", root, sub);
		int gz;
		if (stat(full, &st) != 0) {
			int e_stat = errno;
			struct stat lst;
			if (lstat(full, &lst) == 0 && S_ISLNK(lst.st_mode) && e_stat == ENOENT)
				/* in a HF snapshot: a blob not downloaded */
				set_error(err, errsz, "%s: a symbolic link to a missing file", full);
			else
				set_error(err, errsz, "%s: %s", full, strerror(e_stat));
			rc = -1;
		} else if (S_ISDIR(st.st_mode)) {
			rc = walk(root, sub, &here, out, others, err, errsz);
		} else if (S_ISREG(st.st_mode)) {
			if (file_kind(names.v[i], &gz) != KIND_NONE && !is_metadata(names.v[i])) {
				path_list_add(out, sub);
				sub = NULL;
			} else if (strcmp(names.v[i], "README.md") != 0)
				(*others)++;
		}
		free(sub);
		free(full);
	}
	for (size_t i = 0; i < names.n; i++)
		free(names.v[i]);
	free(names.v);
	free(dir);
	return rc;
}

/* The files of the split the dataset asks for (dataset.h's rules). */
static int add_dir(struct dataset *ds, const char *dir, char *err, size_t errsz)
{
	struct path_list files = { 0 };
	unsigned char *keep = NULL;
	int others = 0, rc = 0;
	char why[512];

	if (walk(dir, "", NULL, &files, &others, err, errsz) < 0) {
		rc = -1; /* the walk's own error, not "no files" */
		goto out;
	}
	if (files.n == 0) {
		set_error(err, errsz, "%s: no .jsonl, .json or .txt files in it%s", dir,
		          others ? " (other files are there: convert e.g. .parquet to .jsonl first)" : "");
		rc = -1;
		goto out;
	}
	keep = xcalloc(files.n, 1);
	if (dataset_select_split(files.v, files.n, ds->split ? ds->split : "train", keep, &ds->split_read, why,
	                         sizeof why) < 0) {
		set_error(err, errsz, "%s: %s", dir, why);
		rc = -1;
		goto out;
	}
	for (size_t i = 0; i < files.n && rc == 0; i++) {
		if (!keep[i])
			continue;
		char *full = xasprintf("%s/%s", dir, files.v[i]);
		rc = add_file(ds, full, files.v[i], err, errsz);
		free(full);
	}
out:
	for (size_t i = 0; i < files.n; i++)
		free(files.v[i]);
	free(files.v);
	free(keep);
	return rc < 0 ? -1 : 0;
}

int dataset_add_path(struct dataset *ds, const char *path, char *err, size_t errsz)
{
	struct stat st;

	if (stat(path, &st) != 0) {
		set_error(err, errsz, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (ds->prepared) {
		set_error(err, errsz, "%s: the dataset is already prepared", path);
		return -1;
	}
	return S_ISDIR(st.st_mode) ? add_dir(ds, path, err, errsz) : add_file(ds, path, NULL, err, errsz);
}
