/* tools/lib/dataset.c: local dataset files -> tokenized documents -> packed
 * rows (see dataset.h for the formats and the packing rule). */
#include "dataset.h"

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

#include "chat_template.h"
#include "hf_cache.h"
#include "jinja.h"
#include "util.h"

/* A document before tokenization: text to encode, a rendered chat, or
 * ids as given; all_targets: every token is a target (else the chat's
 * answers only). */
struct pending_doc {
	char *text;
	size_t len;
	struct chat_render *chat;
	int all_targets;
	struct token_ids ids;
	uint8_t *sup;        /* (ids.n) after tokenizing */
};

struct dataset {
	const struct tokenizer *tok;
	int seq_len, eos_id, shuffle;
	enum train_on train_on;
	struct chat_template *chat; /* loaded at the first messages record */
	char *chat_date;            /* strftime_now's date, "YYYY-MM-DD", or NULL */
	unsigned long long seed;
	struct pending_doc *pending;
	size_t n_pending, cap_pending;
	int prepared;
	int32_t *tokens;     /* every document's tokens, back to back */
	uint8_t *sup;        /* (n_tokens) 1: a target when it is the next token */
	uint8_t *sep_sup;    /* (n_docs) the same for the EOS after document d */
	size_t n_tokens;
	size_t *doc_off;     /* document d: tokens[doc_off[d] .. doc_off[d+1]) */
	size_t n_docs;
	int max_id;
	/* where the packing stands: stream position and the same as
	 * (document in epoch order, offset; offset == length is its EOS) */
	size_t *order;
	long long epoch;      /* -1 before the first */
	size_t stream_pos, cur_doc, cur_off;
};

/* ---- building ------------------------------------------------------------ */

int dataset_set_chat_date(struct dataset *ds, const char *ymd, char *err, size_t errsz)
{
	struct tm t;
	char why[128];

	if (ds->n_pending || ds->prepared)
		return set_error(err, errsz, "the chat date is set before the first record");
	if (jinja_parse_date(&t, ymd, why, sizeof why) < 0)
		return set_error(err, errsz, "%s", why);
	free(ds->chat_date);
	ds->chat_date = xstrdup(ymd);
	return 0;
}

struct dataset *dataset_new(const struct tokenizer *tok, int seq_len, unsigned long long seed, int eos_id, int shuffle)
{
	struct dataset *ds = xcalloc(1, sizeof *ds);

	ds->tok = tok;
	ds->seq_len = seq_len;
	ds->seed = seed;
	ds->eos_id = eos_id;
	ds->shuffle = shuffle;
	ds->epoch = -1;
	ds->max_id = -1;
	return ds;
}

int dataset_set_train_on(struct dataset *ds, enum train_on mode)
{
	if (ds->n_pending || ds->prepared)
		return -1;
	ds->train_on = mode;
	return 0;
}

static struct pending_doc *new_pending(struct dataset *ds)
{
	if (ds->n_pending == ds->cap_pending) {
		ds->cap_pending = ds->cap_pending ? ds->cap_pending * 2 : 1024;
		ds->pending = xrealloc(ds->pending, ds->cap_pending * sizeof *ds->pending);
	}
	memset(&ds->pending[ds->n_pending], 0, sizeof *ds->pending);
	ds->pending[ds->n_pending].all_targets = 1;
	return &ds->pending[ds->n_pending++];
}

int dataset_add_text(struct dataset *ds, const char *text, size_t len, const char *where, char *err, size_t errsz)
{
	size_t ok;
	struct pending_doc *d;

	if (ds->prepared) {
		set_error(err, errsz, "%s: the dataset is already prepared", where);
		return -1;
	}
	if (ds->tok == NULL) {
		set_error(err, errsz, "%s: text needs a tokenizer, and none was given", where);
		return -1;
	}
	if (ds->train_on == TRAIN_ON_ASSISTANT) {
		set_error(err, errsz, "%s: train_on \"assistant\" needs \"messages\" records, and this one is text", where);
		return -1;
	}
	ok = utf8_valid_prefix(text, len);
	if (ok != len) {
		set_error(err, errsz, "%s: invalid UTF-8 at byte %zu of the text", where, ok);
		return -1;
	}
	if (len == 0)
		return 0; /* an empty document would only add a stray EOS */
	d = new_pending(ds);
	d->text = xmalloc(len + 1);
	memcpy(d->text, text, len);
	d->text[len] = '\0';
	d->len = len;
	return 0;
}

/* A messages record, rendered by the model's own chat template. */
static int add_chat(struct dataset *ds, const cJSON *messages, const cJSON *kwargs, const char *where, char *err,
		    size_t errsz)
{
	struct pending_doc *d;
	struct chat_render *r;
	char why[1024];

	if (ds->tok == NULL) {
		set_error(err, errsz, "%s: messages need the model's tokenizer and chat template, and there is none", where);
		return -1;
	}
	if (ds->chat == NULL) {
		int rc = chat_template_load(&ds->chat, tokenizer_path(ds->tok), why, sizeof why);
		if (rc <= 0) {
			set_error(err, errsz, rc == 0 ? "%s: the data has messages, but the model has no chat template: %s"
						   : "%s: %s", where, why);
			return -1;
		}
		if (ds->chat_date && chat_template_set_date(ds->chat, ds->chat_date, why, sizeof why) < 0) {
			set_error(err, errsz, "%s: %s", where, why);
			return -1;
		}
	}
	r = xcalloc(1, sizeof *r);
	if (chat_template_render(r, ds->chat, messages, kwargs, why, sizeof why) < 0) {
		set_error(err, errsz, "%s: %s", where, why);
		free(r);
		return -1;
	}
	if (r->len == 0) {
		chat_render_free(r);
		free(r);
		return 0;
	}
	d = new_pending(ds);
	d->chat = r;
	d->text = r->text;
	d->len = r->len;
	d->all_targets = ds->train_on == TRAIN_ON_ALL;
	return 0;
}

static int add_ids(struct dataset *ds, const cJSON *ids, const char *where, char *err, size_t errsz)
{
	const cJSON *v;
	struct token_ids t = { 0 };
	int vocab = ds->tok ? tokenizer_vocab_size(ds->tok) : INT32_MAX;
	size_t i = 0;

	if (!cJSON_IsArray(ids)) {
		set_error(err, errsz, "%s: \"input_ids\" is not an array", where);
		return -1;
	}
	cJSON_ArrayForEach(v, ids) {
		if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= vocab ||
		    v->valuedouble != (double)(int32_t)v->valuedouble) {
			set_error(err, errsz, "%s: input_ids[%zu] is not a token id in [0, %d)", where, i, vocab);
			token_ids_free(&t);
			return -1;
		}
		token_ids_push(&t, (int32_t)v->valuedouble);
		i++;
	}
	if (t.n == 0)
		return 0;
	new_pending(ds)->ids = t;
	return 0;
}

int dataset_add_record(struct dataset *ds, const cJSON *rec, const char *where, char *err, size_t errsz)
{
	const cJSON *ids = cJSON_GetObjectItemCaseSensitive(rec, "input_ids");
	const cJSON *messages = cJSON_GetObjectItemCaseSensitive(rec, "messages");
	const cJSON *text = cJSON_GetObjectItemCaseSensitive(rec, "text");

	if (!cJSON_IsObject(rec)) {
		set_error(err, errsz, "%s: not a JSON object", where);
		return -1;
	}
	if (ds->prepared) {
		set_error(err, errsz, "%s: the dataset is already prepared", where);
		return -1;
	}
	if (ids && ds->train_on == TRAIN_ON_ASSISTANT) {
		set_error(err, errsz, "%s: train_on \"assistant\" needs \"messages\" records, and this one is input_ids",
		          where);
		return -1;
	}
	if (ids)
		return add_ids(ds, ids, where, err, errsz);
	if (messages)
		return add_chat(ds, messages, cJSON_GetObjectItemCaseSensitive(rec, "chat_template_kwargs"), where, err,
				errsz);
	if (cJSON_IsString(text))
		return dataset_add_text(ds, text->valuestring, strlen(text->valuestring), where, err, errsz);
	set_error(err, errsz, "%s: no \"text\" (string), \"messages\" or \"input_ids\" field", where);
	return -1;
}

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
};

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

	while ((got = reader_line(r, &s, &n, err, errsz)) > 0)
		if (add_jsonl_line(ds, r, ++line, s, n, err, errsz) < 0)
			return -1;
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

static int add_file(struct dataset *ds, const char *path, char *err, size_t errsz)
{
	int gz, rc;
	enum file_kind kind = file_kind(path, &gz);
	struct reader r;

	if (kind == KIND_NONE) {
		set_error(err, errsz, "%s: not a dataset file (expected .jsonl, .json or .txt, optionally .gz)", path);
		return -1;
	}
	if (reader_open(&r, path, gz, err, errsz) < 0)
		return -1;
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

static int is_train_path(const char *rel)
{
	const char *p = rel;

	for (;;) {
		if (strncasecmp(p, "train", 5) == 0)
			return 1;
		p = strchr(p, '/');
		if (p == NULL)
			return 0;
		p++;
	}
}

static int add_dir(struct dataset *ds, const char *dir, char *err, size_t errsz)
{
	struct path_list files = { 0 };
	int others = 0, rc = 0, any_train = 0;

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
	for (size_t i = 0; i < files.n; i++)
		any_train |= is_train_path(files.v[i]);
	for (size_t i = 0; i < files.n && rc == 0; i++) {
		if (any_train && !is_train_path(files.v[i]))
			continue;
		char *full = xasprintf("%s/%s", dir, files.v[i]);
		rc = add_file(ds, full, err, errsz);
		free(full);
	}
out:
	for (size_t i = 0; i < files.n; i++)
		free(files.v[i]);
	free(files.v);
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
	return S_ISDIR(st.st_mode) ? add_dir(ds, path, err, errsz) : add_file(ds, path, err, errsz);
}

/* ---- tokenizing ---------------------------------------------------------- */

int dataset_prepare(struct dataset *ds, char *err, size_t errsz)
{
	size_t n = ds->n_pending, total = 0, d = 0;
	long first_bad = -1;
	char bad_err[256] = "";

	if (ds->prepared)
		return 0;
	if (ds->eos_id < 0) {
		set_error(err, errsz, "no EOS id to put between documents");
		return -1;
	}
	if (ds->tok && ds->eos_id >= tokenizer_vocab_size(ds->tok)) {
		set_error(err, errsz, "EOS id %d is beyond the tokenizer's vocabulary (%d)", ds->eos_id,
		          tokenizer_vocab_size(ds->tok));
		return -1;
	}
	if (ds->seq_len < 1) {
		set_error(err, errsz, "seq_len must be at least 1 (got %d)", ds->seq_len);
		return -1;
	}
	if (n == 0) {
		set_error(err, errsz, "no documents (every record was empty)");
		return -1;
	}
	/* Each thread its own workspace; documents are independent, and their
	 * ids land in their own slot, so the result is the same on any number of
	 * threads. */
#pragma omp parallel
	{
		struct tok_workspace *ws = ds->tok ? tok_workspace_new(ds->tok) : NULL;
		char why[256];
#pragma omp for schedule(dynamic, 16)
		for (size_t i = 0; i < n; i++) {
			struct pending_doc *p = &ds->pending[i];
			int rc = 0;
			if (p->text != NULL) {
				/* a chat is tokenized as apply_chat_template does it: the
				 * template wrote the special tokens it wants */
				rc = tokenizer_encode(ds->tok, ws, p->text, p->len, p->chat ? 0 : TOK_ADD_SPECIAL, &p->ids, why,
						      sizeof why);
			}
			p->sup = xmalloc(p->ids.n ? p->ids.n : 1);
			memset(p->sup, 1, p->ids.n);
			if (rc == 0 && p->chat && !p->all_targets)
				rc = chat_supervised(p->sup, ds->tok, p->ids.v, p->ids.n, p->chat, why, sizeof why);
			if (rc < 0) {
#pragma omp critical(dataset_error)
				if (first_bad < 0 || (long)i < first_bad) {
					first_bad = (long)i;
					snprintf(bad_err, sizeof bad_err, "%s", why);
				}
			}
			if (p->chat) {
				chat_render_free(p->chat); /* frees the text too */
				free(p->chat);
				p->chat = NULL;
			} else
				free(p->text);
			p->text = NULL;
		}
		tok_workspace_free(ws);
	}
	if (first_bad >= 0) {
		set_error(err, errsz, "document %ld: %s", first_bad + 1, bad_err);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		total += ds->pending[i].ids.n;
	ds->tokens = xmalloc((total ? total : 1) * sizeof *ds->tokens);
	ds->sup = xmalloc(total ? total : 1);
	ds->sep_sup = xmalloc(n ? n : 1);
	ds->doc_off = xmalloc((n + 1) * sizeof *ds->doc_off);
	ds->doc_off[0] = 0;
	ds->max_id = ds->eos_id;
	for (size_t i = 0; i < n; i++) {
		struct token_ids *t = &ds->pending[i].ids;
		if (t->n == 0) { /* text that encoded to nothing */
			free(ds->pending[i].sup);
			continue;
		}
		memcpy(ds->tokens + ds->doc_off[d], t->v, t->n * sizeof *t->v);
		memcpy(ds->sup + ds->doc_off[d], ds->pending[i].sup, t->n);
		/* the EOS between documents is an answer only where all is */
		ds->sep_sup[d] = (uint8_t)ds->pending[i].all_targets;
		free(ds->pending[i].sup);
		for (size_t k = 0; k < t->n; k++)
			if (t->v[k] > ds->max_id)
				ds->max_id = t->v[k];
		ds->doc_off[d + 1] = ds->doc_off[d] + t->n;
		d++;
		token_ids_free(t);
	}
	free(ds->pending);
	ds->pending = NULL;
	ds->n_pending = ds->cap_pending = 0;
	ds->n_docs = d;
	ds->n_tokens = ds->doc_off[d];
	if (d == 0) {
		set_error(err, errsz, "no documents (every text encoded to no tokens)");
		return -1;
	}
	ds->order = xmalloc(d * sizeof *ds->order);
	ds->prepared = 1;
	return 0;
}

/* ---- packing ------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [0, n) without modulo bias. */
static uint64_t uniform_below(uint64_t *state, uint64_t n)
{
	uint64_t threshold = (0 - n) % n, r;

	do
		r = splitmix64(state);
	while (r < threshold);
	return r % n;
}

static void start_epoch(struct dataset *ds)
{
	uint64_t state;

	ds->epoch++;
	for (size_t i = 0; i < ds->n_docs; i++)
		ds->order[i] = i;
	if (ds->shuffle) {
		state = (uint64_t)ds->seed ^ ((uint64_t)ds->epoch * 0xd1b54a32d192ed03ULL);
		(void)splitmix64(&state);
		for (size_t i = ds->n_docs; i > 1; i--) {
			size_t j = (size_t)uniform_below(&state, i);
			size_t tmp = ds->order[i - 1];
			ds->order[i - 1] = ds->order[j];
			ds->order[j] = tmp;
		}
	}
	ds->stream_pos = ds->cur_doc = ds->cur_off = 0;
}

/* The stream's token at the cursor, then one step on; -1 past the end.
 * *sup: whether it is a target; *off: its offset in its document. */
static int32_t stream_next(const struct dataset *ds, size_t *doc, size_t *off, uint8_t *sup, size_t *at)
{
	size_t d, len;

	*sup = 0;
	*at = 0;
	if (*doc >= ds->n_docs)
		return -1;
	d = ds->order[*doc];
	len = ds->doc_off[d + 1] - ds->doc_off[d];
	*at = *off;
	if (*off < len) {
		*sup = ds->sup[ds->doc_off[d] + *off];
		return ds->tokens[ds->doc_off[d] + (*off)++];
	}
	(*doc)++;
	*off = 0;
	*sup = ds->sep_sup[d];
	return ds->eos_id;
}

static void fill_row(struct dataset *ds, int32_t *tokens, int32_t *targets, int32_t *pos)
{
	int L = ds->seq_len, pad_start = -1;
	size_t stream_len = ds->n_tokens + ds->n_docs, prev_at, next_at;
	uint8_t prev_sup, next_sup;
	int32_t prev;

	/* a row needs an input and its target: two tokens left */
	if (ds->epoch < 0 || ds->stream_pos + 2 > stream_len)
		start_epoch(ds);
	prev = stream_next(ds, &ds->cur_doc, &ds->cur_off, &prev_sup, &prev_at);
	(void)prev_sup; /* an input's own flag does not matter, its target's does */
	for (int j = 0; j < L; j++) {
		size_t doc = ds->cur_doc, off = ds->cur_off;
		/* the row's last target is the next row's first input: peek it */
		int32_t next = j + 1 < L ? stream_next(ds, &ds->cur_doc, &ds->cur_off, &next_sup, &next_at)
					 : stream_next(ds, &doc, &off, &next_sup, &next_at);
		tokens[j] = prev >= 0 ? prev : ds->eos_id;
		/* no target across a document boundary: the next document's first
		 * token cannot be predicted from a context it does not attend to
		 * (as transformers' packing with position_ids drops it) */
		targets[j] = prev >= 0 && next >= 0 ? (next_sup && next_at > 0 ? next : -100) : -1;
		if (pos) {
			/* the place in the document, counted from the row's start
			 * when the document began in an earlier row; the padding
			 * is a document of its own */
			if (prev < 0 && pad_start < 0)
				pad_start = j;
			pos[j] = prev >= 0 ? (int32_t)(prev_at < (size_t)j ? prev_at : (size_t)j) : j - pad_start;
		}
		prev = next;
		prev_at = next_at;
	}
	ds->stream_pos += (size_t)L;
}

int dataset_next(struct dataset *ds, int32_t *tokens, int32_t *targets, int32_t *pos, int batch, char *err,
		 size_t errsz)
{
	if (!ds->prepared && dataset_prepare(ds, err, errsz) < 0)
		return -1;
	if (batch < 1) {
		set_error(err, errsz, "batch must be at least 1 (got %d)", batch);
		return -1;
	}
	for (int b = 0; b < batch; b++) {
		size_t o = (size_t)b * (size_t)ds->seq_len;
		fill_row(ds, tokens + o, targets + o, pos ? pos + o : NULL);
	}
	return 0;
}

long long dataset_documents(const struct dataset *ds) { return ds->prepared ? (long long)ds->n_docs : (long long)ds->n_pending; }
long long dataset_tokens(const struct dataset *ds) { return (long long)(ds->n_tokens + ds->n_docs); }
int dataset_max_token_id(const struct dataset *ds) { return ds->max_id; }

long long dataset_rows_per_epoch(const struct dataset *ds)
{
	long long t = dataset_tokens(ds);
	return t < 2 ? 0 : (t - 1 + ds->seq_len - 1) / ds->seq_len;
}

void dataset_close(struct dataset *ds)
{
	if (ds == NULL)
		return;
	for (size_t i = 0; i < ds->n_pending; i++) {
		if (ds->pending[i].chat) {
			chat_render_free(ds->pending[i].chat);
			free(ds->pending[i].chat);
		} else
			free(ds->pending[i].text);
		free(ds->pending[i].sup);
		token_ids_free(&ds->pending[i].ids);
	}
	chat_template_free(ds->chat);
	free(ds->chat_date);
	free(ds->sup);
	free(ds->sep_sup);
	free(ds->pending);
	free(ds->tokens);
	free(ds->doc_off);
	free(ds->order);
	free(ds);
}

/* ---- opening a spec ---------------------------------------------------- */

int dataset_open(struct dataset **out, const char *spec, const struct tokenizer *tok, int seq_len,
		 unsigned long long seed, int eos_id, enum train_on train_on, char *err, size_t errsz)
{
	struct dataset *ds;
	struct stat st;
	char why[1024], *snap = NULL;
	const char *path = spec;
	int rc;

	*out = NULL;
	if (spec == NULL || *spec == '\0') {
		set_error(err, errsz, "dataset: empty spec");
		return -1;
	}
	if (stat(spec, &st) != 0) {
		int local_errno = errno;
		snap = hf_cache_find("dataset", spec, why, sizeof why);
		if (snap == NULL) {
			set_error(err, errsz, "dataset \"%s\": not a local file or directory (%s), nor in the HF cache (%s)", spec,
			          strerror(local_errno), why);
			return -1;
		}
		path = snap;
	}
	ds = dataset_new(tok, seq_len, seed, eos_id, 1);
	ds->train_on = train_on;
	rc = dataset_add_path(ds, path, why, sizeof why);
	if (rc == 0)
		rc = dataset_prepare(ds, why, sizeof why);
	if (rc < 0) {
		/* name the spec when the message is about the whole of it */
		if (strncmp(why, path, strlen(path)) == 0)
			set_error(err, errsz, "dataset: %s", why);
		else
			set_error(err, errsz, "dataset \"%s\": %s", spec, why);
		dataset_close(ds);
		free(snap);
		return -1;
	}
	free(snap);
	*out = ds;
	return 0;
}

/* ---- the packing cursor (exact resume) ------------------------------------ */

void dataset_tell(const struct dataset *ds, struct dataset_cursor *cur)
{
	cur->epoch = ds->epoch;
	cur->stream_pos = ds->stream_pos;
	cur->doc = ds->cur_doc;
	cur->off = ds->cur_off;
}

int dataset_seek(struct dataset *ds, const struct dataset_cursor *cur, char *err, size_t errsz)
{
	size_t stream_len;

	if (!ds->prepared && dataset_prepare(ds, err, errsz) < 0)
		return -1;
	stream_len = ds->n_tokens + ds->n_docs;
	if (cur->epoch < -1 || cur->stream_pos > stream_len || cur->doc > ds->n_docs) {
		set_error(err, errsz, "cursor (epoch %lld, position %zu, document %zu) is outside this dataset's %zu tokens",
		          cur->epoch, cur->stream_pos, cur->doc, stream_len);
		return -1;
	}
	if (cur->epoch >= 0) {
		/* the epoch's document order comes from the seed alone */
		ds->epoch = cur->epoch - 1;
		start_epoch(ds);
		if (cur->doc < ds->n_docs &&
		    cur->off > ds->doc_off[ds->order[cur->doc] + 1] - ds->doc_off[ds->order[cur->doc]]) {
			set_error(err, errsz, "cursor offset %zu is past document %zu of epoch %lld", cur->off, cur->doc,
			          cur->epoch);
			return -1;
		}
	} else {
		ds->epoch = -1;
	}
	ds->stream_pos = cur->stream_pos;
	ds->cur_doc = cur->doc;
	ds->cur_off = cur->off;
	return 0;
}
