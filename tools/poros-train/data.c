/* tools/poros-train/data.c: synthetic token streams, raw token files, and
 * tools/lib/text/dataset for everything else. */
#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model_hash.h"
#include "text/text.h"
#include "ops.h"
#include "util/util.h"

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int open_raw(struct token_source *d, const char *path, int width, char *err, size_t errsz)
{
	size_t len;
	unsigned char *buf = (unsigned char *)read_whole_file(path, &len);

	if (buf == NULL)
		return set_error(err, errsz, "dataset %s: %s", path, strerror(errno));
	if (len % (size_t)width != 0) {
		free(buf);
		return set_error(err, errsz, "%s: %zu bytes is not a whole number of %d-byte tokens", path, len, width);
	}
	d->n = len / (size_t)width;
	d->tokens = xmalloc((d->n ? d->n : 1) * sizeof *d->tokens);
	for (size_t i = 0; i < d->n; i++) {
		const unsigned char *p = buf + i * (size_t)width;
		uint32_t t = width == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8
		                        : (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;

		if (t >= (uint32_t)d->vocab) {
			free(buf);
			return set_error(err, errsz, "%s: token %u at index %zu (byte %zu) >= vocabulary size %d", path, t, i,
			              i * (size_t)width, d->vocab);
		}
		d->tokens[i] = t;
	}
	free(buf);
	return 0;
}

/* One period of distinct tokens, so the next token is a function of the
 * current one and a model can learn the cycle. */
static void make_repeat(struct token_source *d)
{
	int period = d->vocab < REPEAT_PERIOD ? d->vocab : REPEAT_PERIOD;
	uint64_t draw = 0;

	d->tokens = xmalloc((size_t)period * sizeof *d->tokens);
	while (d->n < (size_t)period) {
		uint32_t t = (uint32_t)(poros_mix64(d->key ^ draw++) % (uint64_t)d->vocab);
		size_t i;

		for (i = 0; i < d->n && d->tokens[i] != t; i++)
			;
		if (i == d->n)
			d->tokens[d->n++] = t;
	}
}

/* tools/lib/text/dataset: documents tokenized with the model's tokenizer when
 * it has one (records of input_ids need none). */
static int open_dataset(struct token_source *d, const char *spec, const struct model_config *mc, uint64_t seed,
                        enum train_on train_on, const char *chat_date, const char *split, char *err, size_t errsz)
{
	char why[512] = "", lerr[1024];
	int eos;

	/* a tokenizer given for the run must load: no quiet fall back to the model's */
	if (mc->tokenizer_path != NULL) {
		if (tokenizer_load(&d->tok, mc->tokenizer_path, lerr, sizeof lerr) < 0)
			return set_error(err, errsz, "--tokenizer: %s", lerr);
	} else if (tokenizer_resolve(&d->tok, mc->checkpoint_dir ? mc->checkpoint_dir : mc->model_id, why,
	                             sizeof why) < 0) {
		d->tok = NULL;
	}
	eos = d->tok ? tokenizer_eos_id(d->tok) : -1;
	if (eos < 0)
		eos = mc->eos_token_id;
	if (dataset_open(&d->ds, spec, d->tok, d->seq_len, seed, eos, train_on, chat_date, split, lerr, sizeof lerr) < 0) {
		if (d->tok == NULL && strstr(lerr, "tokenizer") != NULL)
			return set_error(err, errsz, "%s (the model has none: %s; --tokenizer gives one)", lerr, why);
		return set_error(err, errsz, "%s", lerr);
	}
	if (dataset_max_token_id(d->ds) >= d->vocab)
		return set_error(err, errsz, "dataset %s: token %d >= vocabulary size %d of %s", spec,
		              dataset_max_token_id(d->ds), d->vocab, mc->model_id);
	return 0;
}

static int has_raw_suffix(const char *spec, int *width)
{
	*width = ends_with(spec, ".u32") ? 4 : 2;
	return ends_with(spec, ".u16") || ends_with(spec, ".bin") || ends_with(spec, ".u32");
}

int token_source_has_splits(const char *spec)
{
	struct stat st;
	int width;

	if (strncmp(spec, "synthetic", 9) == 0 || has_raw_suffix(spec, &width))
		return 0;
	/* what is no local path is looked up in the HF cache: a directory */
	return stat(spec, &st) != 0 || S_ISDIR(st.st_mode);
}

int token_source_open(struct token_source *d, const char *spec, const struct model_config *mc, int seq_len,
                      uint64_t seed, enum train_on train_on, const char *chat_date, const char *split, char *err,
                      size_t errsz)
{
	int width, rc;

	memset(d, 0, sizeof *d);
	d->name = xstrdup(spec);
	d->vocab = mc->vocab_size;
	d->seq_len = seq_len;
	d->key = poros_mix64(seed ^ 0xda7a5eedull);
	d->seq = xmalloc(((size_t)seq_len + 1) * sizeof *d->seq);
	/* token streams are never tokenized: a tokenizer there would be ignored */
	if (mc->tokenizer_path != NULL &&
	    (strcmp(spec, "synthetic") == 0 || strcmp(spec, "synthetic:repeat") == 0 || has_raw_suffix(spec, &width))) {
		token_source_free(d);
		return set_error(err, errsz, "--tokenizer: dataset %s is token ids already (a tokenizer is used for text and "
		              "messages datasets only)", spec);
	}
	if (chat_date != NULL &&
	    (strcmp(spec, "synthetic") == 0 || strcmp(spec, "synthetic:repeat") == 0 || has_raw_suffix(spec, &width))) {
		token_source_free(d);
		return set_error(err, errsz, "--chat-date: dataset %s is token ids already (the date is for chat templates "
		              "of messages records)", spec);
	}
	if (train_on == TRAIN_ON_ASSISTANT && (strncmp(spec, "synthetic", 9) == 0 || has_raw_suffix(spec, &width))) {
		rc = set_error(err, errsz, "dataset %s: train_on \"assistant\" needs chat (messages) records", spec);
		token_source_free(d);
		return rc;
	}
	if (strcmp(spec, "synthetic") == 0) {
		d->kind = SOURCE_SYNTHETIC;
		return 0;
	}
	if (strcmp(spec, "synthetic:repeat") == 0) {
		d->kind = SOURCE_REPEAT;
		make_repeat(d);
		return 0;
	}
	if (has_raw_suffix(spec, &width)) {
		d->kind = SOURCE_RAW;
		rc = open_raw(d, spec, width, err, errsz);
		if (rc == 0 && d->n == 0)
			rc = set_error(err, errsz, "dataset %s: holds no tokens", spec);
	} else {
		/* never a silent fallback to synthetic data: what cannot be
		 * found is an error that names it */
		d->kind = SOURCE_DATASET;
		rc = open_dataset(d, spec, mc, seed, train_on, chat_date, split, err, errsz);
	}
	if (rc < 0)
		token_source_free(d);
	return rc;
}

/* Sequence `index` of the synthetic or raw stream: S+1 tokens. */
static void stream_sequence(const struct token_source *d, uint64_t index, int32_t *out)
{
	int len = d->seq_len + 1;
	uint64_t start = index * (uint64_t)len;

	for (int i = 0; i < len; i++) {
		uint64_t pos = start + (uint64_t)i;

		out[i] = d->kind == SOURCE_SYNTHETIC ? (int32_t)(poros_mix64(d->key ^ pos) % (uint64_t)d->vocab)
		                                      : (int32_t)d->tokens[pos % d->n];
	}
}

int token_source_next(struct token_source *d, int32_t *tokens, int32_t *targets, int32_t *pos, int batch, char *err,
                      size_t errsz)
{
	int S = d->seq_len;

	if (d->kind == SOURCE_DATASET)
		return dataset_next(d->ds, tokens, targets, pos, batch, err, errsz);
	for (int b = 0; b < batch; b++) {
		stream_sequence(d, d->next_seq++, d->seq);
		memcpy(tokens + (size_t)b * S, d->seq, (size_t)S * sizeof *tokens);
		memcpy(targets + (size_t)b * S, d->seq + 1, (size_t)S * sizeof *targets);
		for (int t = 0; pos && t < S; t++)
			pos[(size_t)b * S + t] = t;
	}
	return 0;
}

void token_source_free(struct token_source *d)
{
	free(d->name);
	free(d->tokens);
	free(d->seq);
	dataset_close(d->ds);
	if (d->tok)
		tokenizer_free(d->tok);
	memset(d, 0, sizeof *d);
}

static long long source_size(const struct token_source *d)
{
	if (d->kind == SOURCE_RAW)
		return (long long)d->n;
	return d->kind == SOURCE_DATASET ? dataset_tokens(d->ds) : 0;
}

void token_source_tell(const struct token_source *d, struct token_cursor *cur)
{
	memset(cur, 0, sizeof *cur);
	cur->next_seq = d->next_seq;
	cur->size = source_size(d);
	if (d->kind == SOURCE_DATASET)
		dataset_tell(d->ds, &cur->ds);
	else
		cur->ds.epoch = -1;
}

int token_source_seek(struct token_source *d, const struct token_cursor *cur, char *err, size_t errsz)
{
	char why[512];

	if (cur->size != source_size(d))
		return set_error(err, errsz, "dataset %s: holds %lld tokens, the checkpoint's had %lld", d->name,
		              source_size(d), cur->size);
	if (d->kind != SOURCE_DATASET) {
		d->next_seq = cur->next_seq;
		return 0;
	}
	if (dataset_seek(d->ds, &cur->ds, why, sizeof why) < 0)
		return set_error(err, errsz, "dataset %s: %s", d->name, why);
	return 0;
}

long token_source_rows(const struct token_source *d)
{
	long n;

	if (d->kind == SOURCE_DATASET)
		return (long)dataset_rows_per_epoch(d->ds);
	if (d->kind != SOURCE_RAW)
		return -1;
	n = (long)(d->n / ((size_t)d->seq_len + 1));
	return n > 0 ? n : 1;
}

int token_source_hold_out(struct token_source *d, struct token_source *held, double fraction, char *err,
                          size_t errsz)
{
	char why[512];

	memset(held, 0, sizeof *held);
	if (d->kind != SOURCE_DATASET)
		return set_error(err, errsz, "dataset %s: --eval-fraction holds out documents, and a token stream has "
		                 "none (give --eval-dataset)", d->name);
	if (dataset_hold_out(d->ds, fraction, &held->ds, why, sizeof why) < 0)
		return set_error(err, errsz, "dataset %s: %s", d->name, why);
	held->kind = SOURCE_DATASET;
	held->name = xasprintf("%s (held out)", d->name);
	if (dataset_supervised(held->ds) == 0 || dataset_supervised(d->ds) == 0) {
		set_error(err, errsz, "dataset %s: --eval-fraction %g leaves the %s no supervised token", d->name, fraction,
		          dataset_supervised(d->ds) == 0 ? "training set" : "evaluation set");
		token_source_free(held);
		return -1;
	}
	held->vocab = d->vocab;
	held->seq_len = d->seq_len;
	held->seq = xmalloc(((size_t)d->seq_len + 1) * sizeof *held->seq);
	return 0;
}

int token_source_same_data(const struct token_source *a, const struct token_source *b)
{
	struct stat sa, sb;

	if (a->kind != b->kind)
		return 0;
	if (a->kind == SOURCE_DATASET)
		return dataset_same_files(a->ds, b->ds);
	if (a->kind == SOURCE_RAW)
		return stat(a->name, &sa) == 0 && stat(b->name, &sb) == 0 && sa.st_dev == sb.st_dev &&
		       sa.st_ino == sb.st_ino;
	return 0;
}

/* name, a colon, then the file's size and bytes */
static int hash_named_file(struct content_hash *h, const char *name, const char *path, size_t *bytes, char *err,
                           size_t errsz)
{
	content_hash_update(h, name, strlen(name));
	content_hash_update(h, ":", 1);
	return content_hash_file(h, path, bytes, err, errsz);
}

static void hash_final(struct content_hash *h, char out[DATA_HASH_LEN + 1])
{
	char hex[65];

	content_hash_final(h, hex);
	snprintf(out, DATA_HASH_LEN + 1, "f64x4:%s", hex);
}

int token_source_hash(char out[DATA_HASH_LEN + 1], size_t *bytes, const struct token_source *d, char *err,
                      size_t errsz)
{
	struct content_hash h;
	int width;

	*bytes = 0;
	out[0] = '\0';
	if (d->kind == SOURCE_SYNTHETIC || d->kind == SOURCE_REPEAT)
		return 0;
	content_hash_init(&h);
	if (d->kind == SOURCE_RAW) {
		has_raw_suffix(d->name, &width);
		if (hash_named_file(&h, width == 4 ? "u32" : "u16", d->name, bytes, err, errsz) < 0)
			return -1;
	}
	for (size_t i = 0; d->kind == SOURCE_DATASET && i < dataset_file_count(d->ds); i++) {
		const char *name, *path = dataset_file(d->ds, i, &name);

		if (hash_named_file(&h, name, path, bytes, err, errsz) < 0)
			return -1;
	}
	hash_final(&h, out);
	return 1;
}

int token_source_tokenizer_hash(char out[DATA_HASH_LEN + 1], size_t *bytes, const struct token_source *d, char *err,
                                size_t errsz)
{
	static const char *const beside[] = { "tokenizer_config.json", "chat_template.jinja" };
	const char *file = d->tok ? tokenizer_path(d->tok) : NULL, *slash;
	struct content_hash h;

	*bytes = 0;
	out[0] = '\0';
	if (file == NULL)
		return 0;
	content_hash_init(&h);
	if (hash_named_file(&h, "tokenizer", file, bytes, err, errsz) < 0)
		return -1;
	slash = strrchr(file, '/');
	for (size_t i = 0; i < sizeof beside / sizeof *beside; i++) {
		char *path = slash ? xasprintf("%.*s/%s", (int)(slash - file), file, beside[i]) : xstrdup(beside[i]);
		struct stat st;
		int rc = 0;

		if (stat(path, &st) == 0)
			rc = hash_named_file(&h, beside[i], path, bytes, err, errsz);
		else /* absent is a content too: a file added later changes it */
			content_hash_update(&h, beside[i], strlen(beside[i]));
		free(path);
		if (rc < 0)
			return -1;
	}
	hash_final(&h, out);
	return 1;
}

double token_source_epoch_rows(const struct token_source *d)
{
	if (d->kind == SOURCE_DATASET)
		return (double)dataset_rows_per_epoch(d->ds);
	if (d->kind == SOURCE_RAW) /* the stream wraps at the file's end, not at a row's */
		return (double)d->n / (d->seq_len + 1);
	return 0;
}

void token_source_describe(const struct token_source *d, char *buf, size_t n)
{
	if (d->kind == SOURCE_DATASET)
		snprintf(buf, n, "%lld documents, %lld tokens, %lld supervised; %lld rows of %d per epoch",
		         dataset_documents(d->ds), dataset_tokens(d->ds), dataset_supervised(d->ds),
		         dataset_rows_per_epoch(d->ds), d->seq_len);
	else if (d->kind == SOURCE_RAW)
		snprintf(buf, n, "%zu tokens, all supervised; %.6g rows of %d per epoch", d->n, token_source_epoch_rows(d),
		         d->seq_len);
	else
		snprintf(buf, n, "an endless stream, all supervised");
}
