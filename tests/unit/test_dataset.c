/* tests/unit/test_dataset.c: tools/lib/text/dataset: formats, packing, shuffling,
 * where data is looked for, and the errors.  Token ids of the tiny
 * tokenizer are in tests/unit/test_tokenizer.c.  Run from the repository
 * root. */
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "text/text.h"
#include "util/util.h"
#include "test_common.h"

static char tmp[] = "/tmp/poros-test-dataset-XXXXXX";

/* Writes tmp/rel (directories made as needed); returns the malloc'd path. */
static char *put(const char *rel, const char *text)
{
	char *path = xasprintf("%s/%s", tmp, rel), *dir = xstrdup(path);

	*strrchr(dir, '/') = '\0';
	if (mkdir_p(dir, 0755) != 0 || atomic_write(path, text, strlen(text)) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
	free(dir);
	return path;
}

/* Compares a row with the expected values; n of them, then n targets. */
static void expect_row(int line, const int32_t *tokens, const int32_t *targets, int n, ...)
{
	va_list ap;
	int ok = 1;
	int32_t want[2][64];

	va_start(ap, n);
	for (int k = 0; k < 2; k++)
		for (int j = 0; j < n; j++)
			want[k][j] = va_arg(ap, int);
	va_end(ap);
	for (int j = 0; j < n; j++)
		ok &= tokens[j] == want[0][j] && targets[j] == want[1][j];
	if (!ok) {
		fprintf(stderr, "%s:%d: row differs\n  want tokens/targets:", __FILE__, line);
		for (int j = 0; j < n; j++)
			fprintf(stderr, " %d/%d", want[0][j], want[1][j]);
		fprintf(stderr, "\n  got  tokens/targets:");
		for (int j = 0; j < n; j++)
			fprintf(stderr, " %d/%d", tokens[j], targets[j]);
		fprintf(stderr, "\n");
		failures++;
	}
}

#define ROW(...) expect_row(__LINE__, tokens, targets, __VA_ARGS__)

static struct dataset *load_ids_dataset(int seq_len)
{
	char err[512];
	struct dataset *ds = dataset_new(NULL, seq_len, 0, 0, 0);
	char *p = put("ids/data.jsonl", "{\"input_ids\":[1,2,3]}\n{\"input_ids\":[4,5]}\n\n{\"input_ids\":[]}\n"
					"{\"input_ids\":[6]}\n");

	if (dataset_add_path(ds, p, err, sizeof err) < 0 || dataset_prepare(ds, err, sizeof err) < 0) {
		fprintf(stderr, "load_ids_dataset: %s\n", err);
		exit(1);
	}
	free(p);
	return ds;
}

/* stream: 1 2 3 EOS 4 5 EOS 6 EOS (EOS = 0), 9 tokens */
static void test_packing(void)
{
	int32_t tokens[16], targets[16];
	char err[256];
	struct dataset *ds = load_ids_dataset(4);

	CHECK(dataset_documents(ds) == 3 && dataset_tokens(ds) == 9 && dataset_rows_per_epoch(ds) == 2);
	CHECK(dataset_max_token_id(ds) == 6);
	CHECK(dataset_next(ds, tokens, targets, NULL, 1, err, sizeof err) == 0);
	ROW(4, 1, 2, 3, 0, 2, 3, 0, -100);
	CHECK(dataset_next(ds, tokens, targets, NULL, 1, err, sizeof err) == 0);
	ROW(4, 4, 5, 0, 6, 5, 0, -100, 0);
	/* the next epoch starts a new row (no shuffle here) */
	CHECK(dataset_next(ds, tokens, targets, NULL, 1, err, sizeof err) == 0);
	ROW(4, 1, 2, 3, 0, 2, 3, 0, -100);
	dataset_close(ds);

	/* a short last row: padded with EOS, targets masked */
	ds = load_ids_dataset(5);
	CHECK(dataset_rows_per_epoch(ds) == 2);
	CHECK(dataset_next(ds, tokens, targets, NULL, 2, err, sizeof err) == 0);
	ROW(5, 1, 2, 3, 0, 4, 2, 3, 0, -100, 5);
	expect_row(__LINE__, tokens + 5, targets + 5, 5, 5, 0, 6, 0, 0, 0, -100, 0, -1, -1);
	dataset_close(ds);

	/* rows overlap by one token: nothing is lost between them */
	ds = load_ids_dataset(3);
	CHECK(dataset_rows_per_epoch(ds) == 3);
	CHECK(dataset_next(ds, tokens, targets, NULL, 1, err, sizeof err) == 0);
	ROW(3, 1, 2, 3, 2, 3, 0);
	CHECK(dataset_next(ds, tokens, targets, NULL, 1, err, sizeof err) == 0);
	ROW(3, 0, 4, 5, -100, 5, 0);
	CHECK(dataset_next(ds, tokens, targets, NULL, 1, err, sizeof err) == 0);
	ROW(3, 0, 6, 0, -100, 0, -1);
	CHECK(dataset_next(ds, tokens, targets, NULL, 0, err, sizeof err) < 0 && strstr(err, "batch") != NULL);
	dataset_close(ds);
}

static void test_text_formats(const struct tokenizer *tok)
{
	int32_t tokens[32], targets[32];
	char err[512];
	struct dataset *ds = dataset_new(tok, 16, 0, 300, 0);
	int32_t pos[32];
	char *txt = put("fmt/a.txt", "hello world\n\nhello\nworld\n\n\n  \nlll\n");

	CHECK(dataset_add_path(ds, txt, err, sizeof err) == 0);
	CHECK(dataset_prepare(ds, err, sizeof err) == 0);
	CHECK(dataset_documents(ds) == 3);
	/* "hello world" | "hello\nworld" | "lll", each + EOS 300, then padding */
	CHECK(dataset_next(ds, tokens, targets, pos, 1, err, sizeof err) == 0);
	/* no target across documents: an EOS does not predict the next first token */
	ROW(16, 259, 263, 100, 300, 259, 10, 119, 261, 108, 100, 300, 257, 108, 300, 300, 300,
	    263, 100, 300, -100, 10, 119, 261, 108, 100, 300, -100, 108, 300, -1, -1, -1);
	{
		/* each document from 0, its EOS with it; the padding its own */
		static const int32_t want[16] = { 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 0, 1 };
		CHECK(memcmp(pos, want, sizeof want) == 0);
	}
	dataset_close(ds);
	free(txt);
}

/* Text is encoded as HF's tokenizer(text): Llama-3's BOS starts each document. */
static void test_bos(void)
{
	struct tokenizer *tok = NULL;
	char err[512], *p = put("bos/a.jsonl", "{\"text\":\"hello world\"}\n{\"input_ids\":[7]}\n");
	struct dataset *ds;
	int32_t tokens[6], targets[6];

	CHECK(tokenizer_load(&tok, "tests/fixtures/tokenizer/tiny_llama3", err, sizeof err) == 0);
	CHECK(dataset_open(&ds, p, tok, 6, 0, tokenizer_eos_id(tok), TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) == 0);
	CHECK(dataset_tokens(ds) == 6);
	CHECK(dataset_next(ds, tokens, targets, NULL, 1, err, sizeof err) == 0);
	/* either order of the two documents; ids are never given a BOS */
	if (tokens[0] == 310)
		ROW(6, 310, 259, 266, 311, 7, 311, 259, 266, 311, 7, 311, -1);
	else
		ROW(6, 7, 311, 310, 259, 266, 311, 311, -100, 259, 266, 311, -1);
	dataset_close(ds);
	tokenizer_free(tok);
	free(p);
}

static void test_json_and_gz(const struct tokenizer *tok)
{
	int32_t tokens[8], targets[8];
	char err[512];
	struct dataset *ds = dataset_new(tok, 4, 0, 300, 0);
	char *arr = put("j/a.json", " [ {\"text\": \"hello\"}, {\"input_ids\": [7, 8]} ]\n");
	char *gzpath = xasprintf("%s/j/b.jsonl.gz", tmp);
	gzFile gz = gzopen(gzpath, "wb");
	const char *line = "{\"text\":\"lll\"}\n";

	CHECK(gz != NULL && gzwrite(gz, line, (unsigned)strlen(line)) == (int)strlen(line) && gzclose(gz) == Z_OK);
	CHECK(dataset_add_path(ds, arr, err, sizeof err) == 0);
	CHECK(dataset_add_path(ds, gzpath, err, sizeof err) == 0);
	CHECK(dataset_next(ds, tokens, targets, NULL, 2, err, sizeof err) == 0);
	/* 259 EOS 7 8 EOS 257 108 EOS */
	ROW(4, 259, 300, 7, 8, 300, -100, 8, 300);
	expect_row(__LINE__, tokens + 4, targets + 4, 4, 300, 257, 108, 300, -100, 108, 300, -1);
	dataset_close(ds);
	free(arr);
	free(gzpath);
}

/* Every epoch holds each document once; the order depends on the seed only. */
static void test_shuffle(void)
{
	char err[512], *p;
	struct dataset *a, *b, *c;
	int32_t ta[100], ga[100], tb[100], gb[100], tc[100], gc[100];
	char buf[4096];
	size_t n = 0;
	int32_t first_epoch[99];
	int same_ab = 1, same_ac = 1, seen[51] = { 0 }, perm_ok = 1, in_order = 1;

	for (int i = 1; i <= 50; i++)
		n += (size_t)snprintf(buf + n, sizeof buf - n, "{\"input_ids\":[%d]}\n", i);
	p = put("shuf/train.jsonl", buf);
	free(p);
	/* one epoch is 100 tokens (50 docs + 50 EOS): one row of 99 + its target */
	p = xasprintf("%s/shuf", tmp);
	CHECK(dataset_open(&a, p, NULL, 99, 7, 0, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) == 0);
	CHECK(dataset_open(&b, p, NULL, 99, 7, 0, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) == 0);
	CHECK(dataset_open(&c, p, NULL, 99, 8, 0, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) == 0);
	free(p);
	for (int e = 0; e < 2; e++) {
		CHECK(dataset_next(a, ta, ga, NULL, 1, err, sizeof err) == 0);
		CHECK(dataset_next(b, tb, gb, NULL, 1, err, sizeof err) == 0);
		CHECK(dataset_next(c, tc, gc, NULL, 1, err, sizeof err) == 0);
		same_ab &= memcmp(ta, tb, sizeof ta[0] * 99) == 0 && memcmp(ga, gb, sizeof ga[0] * 99) == 0;
		same_ac &= memcmp(ta, tc, sizeof ta[0] * 99) == 0;
		memset(seen, 0, sizeof seen);
		in_order = 1;
		for (int j = 0; j < 99; j += 2) {
			perm_ok &= ta[j] >= 1 && ta[j] <= 50 && (j + 1 == 99 || ta[j + 1] == 0) && !seen[ta[j]];
			seen[ta[j]] = 1;
			in_order &= ta[j] == j / 2 + 1;
		}
		perm_ok &= ga[98] == 0; /* the last target is the last EOS */
		CHECK(!in_order);
		if (e == 0)
			memcpy(first_epoch, ta, sizeof first_epoch);
		else
			CHECK(memcmp(first_epoch, ta, sizeof first_epoch) != 0); /* each epoch its own order */
	}
	CHECK(same_ab);
	CHECK(!same_ac);
	CHECK(perm_ok);
	dataset_close(a);
	dataset_close(b);
	dataset_close(c);
}

static void test_directories(const struct tokenizer *tok)
{
	char err[1024], *p, *home;
	struct dataset *ds;
	int32_t tokens[4], targets[4];

	/* train files only, when there are any; README and metadata skipped */
	free(put("dir/README.md", "# not data\n"));
	free(put("dir/dataset_info.json", "{\"features\": {}}\n"));
	free(put("dir/data/test-00000.jsonl", "{\"input_ids\":[9]}\n"));
	free(put("dir/data/train-00001.jsonl", "{\"input_ids\":[2]}\n"));
	free(put("dir/data/train-00000.jsonl", "{\"input_ids\":[1]}\n"));
	p = xasprintf("%s/dir", tmp);
	ds = dataset_new(NULL, 4, 0, 0, 0);
	CHECK(dataset_add_path(ds, p, err, sizeof err) == 0);
	CHECK(dataset_next(ds, tokens, targets, NULL, 1, err, sizeof err) == 0);
	ROW(4, 1, 0, 2, 0, 0, -100, 0, -1); /* sorted: train-00000 before train-00001; no 9 */
	dataset_close(ds);
	free(p);

	/* a HF dataset id, from the local cache */
	home = xasprintf("%s/hf", tmp);
	free(put("hf/hub/datasets--Org--Data/snapshots/abc123/train.jsonl", "{\"text\":\"hello\"}\n"));
	setenv("HF_HOME", home, 1);
	unsetenv("HF_HUB_CACHE");
	CHECK(dataset_open(&ds, "Org/Data", tok, 2, 1, 300, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) == 0);
	CHECK(dataset_next(ds, tokens, targets, NULL, 1, err, sizeof err) == 0);
	ROW(2, 259, 300, 300, -1);
	dataset_close(ds);
	CHECK(dataset_open(&ds, "Org/Nope", tok, 2, 1, 300, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) < 0 && ds == NULL);
	p = xasprintf("%s/hub/datasets--Org--Nope/snapshots", home);
	CHECK(strstr(err, "Org/Nope") != NULL && strstr(err, p) != NULL);
	free(p);
	free(home);
}

static void expect_error(const struct tokenizer *tok, int line, const char *rel, const char *content, int eos,
			 const char *want)
{
	char err[1024] = "", *p = content ? put(rel, content) : xasprintf("%s/%s", tmp, rel);
	struct dataset *ds = NULL;

	if (dataset_open(&ds, p, tok, 8, 1, eos, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) == 0 || ds != NULL || strstr(err, want) == NULL) {
		fprintf(stderr, "%s:%d: %s: error \"%s\", want one saying \"%s\"\n", __FILE__, line, rel, err, want);
		failures++;
	}
	dataset_close(ds);
	free(p);
}

static void test_errors(const struct tokenizer *tok)
{
	char *bad_txt = xasprintf("e6/a.txt:3: invalid UTF-8 at byte 2");

	expect_error(tok, __LINE__, "e1/a.jsonl", "{\"text\":\"ok\"}\n{\"text\": oops}\n", 300, "e1/a.jsonl:2:");
	expect_error(tok, __LINE__, "e2/a.jsonl", "{\"txt\":\"x\"}\n", 300, "e2/a.jsonl:1: a record of keys \"txt\" is none of the shapes taken");
	expect_error(NULL, __LINE__, "e3/a.jsonl", "{\"text\":\"x\"}\n", 0, "needs a tokenizer");
	expect_error(tok, __LINE__, "e4/a.jsonl", "{\"input_ids\":[1,305]}\n", 300, "input_ids[1] is not a token id in [0, 305)");
	expect_error(tok, __LINE__, "e5/a.jsonl", "{\"text\":\"x\"}\n", -1, "no EOS id");
	expect_error(tok, __LINE__, "e6/a.txt", "ok\n\nab\xff\n", 300, bad_txt);
	expect_error(tok, __LINE__, "e7/a.parquet", "PAR1", 300, "not a dataset file");
	expect_error(tok, __LINE__, "e8", NULL, 300, "No such file");
	expect_error(tok, __LINE__, "e9/empty.jsonl", "\n\n{\"text\":\"\"}\n", 300, "no documents");
	expect_error(tok, __LINE__, "e10/x.jsonl", "[1,2]\n", 300, "not a JSON object");
	expect_error(tok, __LINE__, "e11/x.jsonl", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n", 300,
		     "x.jsonl:1: the data has messages, but the model has no chat template");
	free(put("e12/data.parquet", "PAR1"));
	expect_error(tok, __LINE__, "e12", NULL, 300, "no .jsonl, .json or .txt files in it (other files are there");
	free(bad_txt);
}

/* A .gz whose content is over 2 GiB: zlib reads at most INT_MAX bytes a
 * call, and a JSON Lines file is read a line at a time, not held whole.
 * Made of concatenated gzip members (one compressed block of blank lines,
 * written many times), so the file itself stays small. */
static void test_big_gz(void)
{
	char err[512];
	const size_t block = (size_t)64 << 20, line = (size_t)1 << 20;
	char *text = xmalloc(block), *p = xasprintf("%s/big/train.jsonl.gz", tmp);
	const char *rec = "{\"input_ids\":[5,6]}\n";
	z_stream z;
	unsigned char *gz;
	uLong gz_len;
	FILE *f;
	struct dataset *ds;
	int32_t tokens[4], targets[4];
	int copies = 33; /* 33 x 64 MiB = 2.06 GiB */

	/* lines of 1 MiB of spaces: blank, so skipped */
	memset(text, ' ', block);
	for (size_t i = line - 1; i < block; i += line)
		text[i] = '\n';
	memset(&z, 0, sizeof z);
	CHECK(deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
	gz_len = deflateBound(&z, (uLong)block);
	gz = xmalloc(gz_len);
	z.next_in = (unsigned char *)text;
	z.avail_in = (uInt)block;
	z.next_out = gz;
	z.avail_out = (uInt)gz_len;
	CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
	gz_len = z.total_out;
	deflateEnd(&z);
	free(put("big/README.md", "x\n"));
	f = fopen(p, "wb");
	CHECK(f != NULL);
	for (int i = 0; f && i < copies; i++)
		CHECK(fwrite(gz, 1, gz_len, f) == gz_len);
	/* the one record, as a last member */
	gzFile g = f ? gzdopen(dup(fileno(f)), "ab") : NULL;
	if (f)
		fflush(f);
	CHECK(g != NULL && gzwrite(g, rec, (unsigned)strlen(rec)) == (int)strlen(rec) && gzclose(g) == Z_OK);
	if (f)
		fclose(f);
	ds = dataset_new(NULL, 2, 0, 0, 0);
	CHECKF(dataset_add_path(ds, p, err, sizeof err) == 0, "%s", err);
	CHECK(dataset_documents(ds) == 1);
	CHECK(dataset_next(ds, tokens, targets, NULL, 1, err, sizeof err) == 0);
	ROW(2, 5, 6, 6, 0);
	dataset_close(ds);
	unlink(p);
	free(p);
	free(gz);
	free(text);
}

/* Lines longer than the read buffer, a last line without its newline,
 * CRLF, and line numbers that stay right after a long line. */
static void test_long_lines(void)
{
	char err[1024];
	size_t n_ids = 1500000, cap = n_ids * 2 + 256, n = 0;
	char *buf = xmalloc(cap), *p;
	struct dataset *ds;

	n += (size_t)snprintf(buf + n, cap - n, "{\"input_ids\":[");
	for (size_t i = 0; i < n_ids; i++) {
		buf[n++] = '3';
		buf[n++] = i + 1 < n_ids ? ',' : ']';
	}
	n += (size_t)snprintf(buf + n, cap - n, "}\r\n{\"input_ids\":[4]}\n{\"input_ids\":[5]}");
	p = put("long/a.jsonl", buf);
	ds = dataset_new(NULL, 4, 0, 0, 0);
	CHECKF(dataset_add_path(ds, p, err, sizeof err) == 0, "%s", err);
	CHECK(dataset_prepare(ds, err, sizeof err) == 0);
	CHECK(dataset_documents(ds) == 3);
	CHECK(dataset_tokens(ds) == (long long)n_ids + 2 + 3);
	dataset_close(ds);
	free(p);
	/* the same with a bad third line: its number, not the buffer's */
	memcpy(buf + n - strlen("{\"input_ids\":[5]}"), "{\"input_ids\":[5]x", strlen("{\"input_ids\":[5]}"));
	p = put("long/b.jsonl", buf);
	ds = dataset_new(NULL, 4, 0, 0, 0);
	CHECK(dataset_add_path(ds, p, err, sizeof err) < 0);
	CHECKF(strstr(err, "long/b.jsonl:3:17: not valid JSON") != NULL, "%s", err);
	dataset_close(ds);
	free(p);
	free(buf);
}

/* A key given twice: the last value counts, as in Python's json (HF). */
static void test_duplicate_keys(const struct tokenizer *tok)
{
	char err[512], *p;
	struct dataset *ds;
	int32_t tokens[8], targets[8];

	p = put("dup/a.jsonl", "{\"text\":\"hello\",\"text\":\"lll\"}\n"
			       "{\"input_ids\":[1],\"x\":{\"k\":1,\"k\":2},\"input_ids\":[7,8]}\n");
	ds = dataset_new(tok, 8, 0, 300, 0);
	CHECKF(dataset_add_path(ds, p, err, sizeof err) == 0, "%s", err);
	CHECK(dataset_next(ds, tokens, targets, NULL, 1, err, sizeof err) == 0);
	ROW(8, 257, 108, 300, 7, 8, 300, 300, 300, 108, 300, -100, 8, 300, -1, -1, -1);
	dataset_close(ds);
	free(p);
	/* in a JSON array file (messages need a chat template: tests/chat.bats) */
	p = put("dup/b.json", "[{\"input_ids\":[1],\"input_ids\":[2]},{\"text\":\"x\",\"text\":\"hello\"}]");
	char *q = put("dup/c.json", "[{\"input_ids\":[2]},{\"text\":\"hello\"}]");
	struct dataset *once = dataset_new(tok, 8, 0, 300, 0);
	int32_t t_once[8], g_once[8];
	ds = dataset_new(tok, 8, 0, 300, 0);
	CHECKF(dataset_add_path(ds, p, err, sizeof err) == 0, "%s", err);
	CHECKF(dataset_add_path(once, q, err, sizeof err) == 0, "%s", err);
	CHECK(dataset_next(ds, tokens, targets, NULL, 1, err, sizeof err) == 0);
	CHECK(dataset_next(once, t_once, g_once, NULL, 1, err, sizeof err) == 0);
	CHECK(tokens[0] == 2 && memcmp(tokens, t_once, sizeof tokens) == 0 && memcmp(targets, g_once, sizeof targets) == 0);
	dataset_close(ds);
	dataset_close(once);
	free(p);
	free(q);
}

/* A directory walk that fails says why: never "no documents". */
static void test_walk_errors(const struct tokenizer *tok)
{
	char *d, *deep;

	free(put("w1/train.jsonl", "{\"input_ids\":[1]}\n"));
	d = xasprintf("%s/w1/train-b.jsonl", tmp);
	CHECK(symlink("../blobs/missing", d) == 0);
	free(d);
	expect_error(tok, __LINE__, "w1", NULL, 300, "w1/train-b.jsonl: a symbolic link to a missing file");
	free(put("w2/a/x.jsonl", "{\"input_ids\":[1]}\n"));
	d = xasprintf("%s/w2/a/loop", tmp);
	CHECK(symlink("..", d) == 0);
	free(d);
	expect_error(tok, __LINE__, "w2", NULL, 300, "w2/a/loop: a symbolic link loop");
	free(put("w3/x.jsonl", "{\"input_ids\":[1]}\n"));
	d = xasprintf("%s/w3/p", tmp);
	CHECK(symlink("q", d) == 0);
	free(d);
	d = xasprintf("%s/w3/q", tmp);
	CHECK(symlink("p", d) == 0);
	free(d);
	expect_error(tok, __LINE__, "w3", NULL, 300, "w3/p: Too many levels of symbolic links");
	deep = xstrdup("w4");
	for (int i = 0; i < 40; i++) {
		char *next = xasprintf("%s/d", deep);
		free(deep);
		deep = next;
	}
	d = xasprintf("%s/x.jsonl", deep);
	free(put(d, "{\"input_ids\":[1]}\n"));
	free(d);
	free(deep);
	expect_error(tok, __LINE__, "w4", NULL, 300, "more than 32 directories deep");
	/* a link to a directory elsewhere is followed */
	free(put("w5/data/train.jsonl", "{\"input_ids\":[1]}\n"));
	free(put("w6/README.md", "x\n"));
	d = xasprintf("%s/w6/data", tmp);
	CHECK(symlink("../w5/data", d) == 0);
	{
		char err[512];
		struct dataset *ds = dataset_new(NULL, 2, 0, 0, 0);
		char *w6 = xasprintf("%s/w6", tmp);
		CHECKF(dataset_add_path(ds, w6, err, sizeof err) == 0, "%s", err);
		CHECK(dataset_documents(ds) == 1);
		dataset_close(ds);
		free(w6);
	}
	free(d);
}

/* Tokenizing on many threads gives what one thread gives. */
static void test_threads(const struct tokenizer *tok)
{
	char err[512], *buf = xmalloc(1 << 20), *p;
	size_t n = 0;
	struct dataset *one, *many;
	int32_t t1[512], g1[512], t2[512], g2[512];
	int same = 1;

	for (int i = 0; i < 3000; i++)
		n += (size_t)snprintf(buf + n, (1 << 20) - n, "{\"text\":\"hello world %d lll it's <|im_end|>\"}\n", i);
	p = put("thr/train.jsonl", buf);
	omp_set_num_threads(1);
	CHECK(dataset_open(&one, p, tok, 512, 3, 300, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) == 0);
	omp_set_num_threads(4);
	CHECK(dataset_open(&many, p, tok, 512, 3, 300, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) == 0);
	CHECK(dataset_tokens(one) == dataset_tokens(many));
	for (long long r = 0; r < dataset_rows_per_epoch(one); r++) {
		CHECK(dataset_next(one, t1, g1, NULL, 1, err, sizeof err) == 0);
		CHECK(dataset_next(many, t2, g2, NULL, 1, err, sizeof err) == 0);
		same &= memcmp(t1, t2, sizeof t1) == 0 && memcmp(g1, g2, sizeof g1) == 0;
	}
	CHECK(same);
	dataset_close(one);
	dataset_close(many);
	free(p);
	free(buf);
}

/* A chat through a ChatML template: which targets each train_on keeps.
 * Tiny ids: 301 <|im_start|>, 302 <|im_end|>, 300 EOS, 259 hello, 10 \n,
 * then the bytes of "user", "assistant", "hi". */
static void test_chat_targets(void)
{
	char err[1024], *data, *dir = xasprintf("%s/chat_tok", tmp);
	struct tokenizer *tok = NULL;
	int32_t tokens[32], targets[32], pos[32];
	static const char *const rec =
		"{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"hello\"}]}\n";

	free(put("chat_tok/tokenizer_config.json", "{\"eos_token\": \"<|endoftext|>\"}"));
	free(put("chat_tok/chat_template.jinja",
		 "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"));
	{
		size_t len;
		char *json = read_whole_file("tests/fixtures/tokenizer/tiny/tokenizer.json", &len);
		free(put("chat_tok/tokenizer.json", json));
		free(json);
	}
	data = put("chat/a.jsonl", rec);
	CHECK(tokenizer_load(&tok, dir, err, sizeof err) == 0);
	for (int mode = TRAIN_ON_DEFAULT; tok && mode <= TRAIN_ON_ALL; mode++) {
		struct dataset *ds = dataset_new(tok, 32, 0, 300, 0);
		int rc;
		CHECK(dataset_set_train_on(ds, (enum train_on)mode) == 0);
		rc = dataset_add_path(ds, data, err, sizeof err);
		CHECK(rc == 0);
		CHECK(dataset_next(ds, tokens, targets, pos, 1, err, sizeof err) == 0);
		/* <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n EOS */
		static const int32_t want_tokens[25] = { 301, 117, 115, 101, 114, 10, 104, 105, 302, 10, 301, 97, 115,
							 115, 105, 115, 116, 97, 110, 116, 10, 259, 302, 10, 300 };
		CHECK(memcmp(tokens, want_tokens, sizeof want_tokens) == 0);
		for (int j = 0; j < 24; j++) {
			/* the answer "hello" (259) and its <|im_end|> are what is predicted at 20 and 21 */
			int32_t want = mode == TRAIN_ON_ALL || j == 20 || j == 21 ? want_tokens[j + 1] : -100;
			CHECKF(targets[j] == want, "train_on %d: target %d is %d, want %d", mode, j, targets[j], want);
			CHECK(pos[j] == j);
		}
		CHECKF(targets[24] == -1 && pos[24] == 24 && pos[25] == 0, "after the chat: %d %d %d", targets[24], pos[24],
		       pos[25]);
		dataset_close(ds);
	}
	/* assistant refuses what is not a chat, and a late switch is refused */
	{
		struct dataset *ds = dataset_new(tok, 32, 0, 300, 0);
		char *txt = put("chat/b.txt", "hello\n");
		CHECK(dataset_set_train_on(ds, TRAIN_ON_ASSISTANT) == 0);
		CHECK(dataset_add_path(ds, txt, err, sizeof err) < 0 && strstr(err, "b.txt:1: train_on \"assistant\" needs"));
		CHECK(dataset_add_path(ds, data, err, sizeof err) == 0);
		CHECK(dataset_set_train_on(ds, TRAIN_ON_ALL) < 0);
		dataset_close(ds);
		free(txt);
	}
	tokenizer_free(tok);
	free(data);
	free(dir);
}

int main(void)
{
	struct tokenizer *tok = NULL;
	char err[512];

	if (tokenizer_load(&tok, "tests/fixtures/tokenizer/tiny", err, sizeof err) < 0) {
		fprintf(stderr, "%s (run from the repository root)\n", err);
		return 1;
	}
	if (scratch_make(tmp) < 0)
		return 1;
	test_packing();
	test_text_formats(tok);
	test_json_and_gz(tok);
	test_bos();
	test_shuffle();
	test_directories(tok);
	test_errors(tok);
	test_threads(tok);
	test_chat_targets();
	test_long_lines();
	test_duplicate_keys(tok);
	test_walk_errors(tok);
	test_big_gz();
	tokenizer_free(tok);
	scratch_remove(tmp);
	return test_verdict("test_dataset");
}
