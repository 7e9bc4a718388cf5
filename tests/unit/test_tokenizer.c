/* tests/unit/test_tokenizer.c: tools/lib/text/tokenizer against hand-computed ids
 * on the hand-made fixtures of tests/fixtures/tokenizer/make_tiny.py (ids:
 * a byte's id is its value; 256 he, 257 ll, 258 hell, 259 hello, 260 Ġw,
 * 261 or, 262 Ġwor, 263 Ġworl, 264 ĠĠ, 265 "8E E1", 266 Ġworld; added
 * 300-304 and 310-311).  Run from the repository root. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "text/text.h"
#include "util/util.h"
#include "test_common.h"

#define TINY "tests/fixtures/tokenizer/tiny"
#define TINY_LLAMA3 "tests/fixtures/tokenizer/tiny_llama3"

static void print_ids(const char *label, const int32_t *v, size_t n)
{
	fprintf(stderr, "  %s [", label);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, i ? ",%d" : "%d", v[i]);
	fprintf(stderr, "]\n");
}

/* Encodes text (len bytes) and compares with the expected ids; -1 ends them. */
static void expect_ids_flags(const struct tokenizer *tok, struct tok_workspace *ws, int line, const char *text,
			     size_t len, int flags, ...)
{
	struct token_ids got = { 0 };
	int32_t want[4096];
	size_t nwant = 0;
	char err[256];
	va_list ap;
	int v;

	va_start(ap, flags);
	while ((v = va_arg(ap, int)) != -1 && nwant < 4096)
		want[nwant++] = v;
	va_end(ap);
	if (tokenizer_encode(tok, ws, text, len, flags, &got, err, sizeof err) < 0) {
		fprintf(stderr, "%s:%d: encode failed: %s\n", __FILE__, line, err);
		failures++;
		return;
	}
	if (got.n != nwant || (nwant > 0 && memcmp(got.v, want, nwant * sizeof *want) != 0)) {
		fprintf(stderr, "%s:%d: wrong ids for \"%.*s\"\n", __FILE__, line, (int)(len > 60 ? 60 : len), text);
		print_ids("want", want, nwant);
		print_ids("got ", got.v, got.n);
		failures++;
	}
	token_ids_free(&got);
}

#define EXPECT(tok, ws, text, ...) expect_ids_flags(tok, ws, __LINE__, text, strlen(text), 0, __VA_ARGS__, -1)
#define EXPECT_FLAGS(tok, ws, flags, text, ...) \
	expect_ids_flags(tok, ws, __LINE__, text, strlen(text), flags, __VA_ARGS__, -1)

static void expect_decode(const struct tokenizer *tok, int line, int flags, const int32_t *ids, size_t n,
			  const char *want, size_t want_len)
{
	char err[256];
	size_t len = 0;
	char *got = tokenizer_decode(tok, ids, n, flags, &len, err, sizeof err);

	if (got == NULL) {
		fprintf(stderr, "%s:%d: decode failed: %s\n", __FILE__, line, err);
		failures++;
		return;
	}
	if (len != want_len || memcmp(got, want, len) != 0) {
		fprintf(stderr, "%s:%d: decoded \"%.*s\" (%zu bytes), want \"%s\" (%zu bytes)\n", __FILE__, line, (int)len,
			got, len, want, want_len);
		failures++;
	}
	free(got);
}

#define DECODE(tok, flags, want, ...)                                                               \
	do {                                                                                        \
		const int32_t ids_[] = { __VA_ARGS__ };                                             \
		expect_decode(tok, __LINE__, flags, ids_, sizeof ids_ / sizeof *ids_, want, sizeof want - 1); \
	} while (0)

static struct tokenizer *load(const char *path)
{
	struct tokenizer *tok = NULL;
	char err[512];

	if (tokenizer_load(&tok, path, err, sizeof err) < 0) {
		fprintf(stderr, "cannot load %s: %s (run from the repository root)\n", path, err);
		exit(1);
	}
	return tok;
}

static void test_queries(const struct tokenizer *tok)
{
	CHECK(tokenizer_vocab_size(tok) == 305);
	CHECK(tokenizer_eos_id(tok) == 300);
	CHECK(tokenizer_token_id(tok, "hello") == 259);
	CHECK(tokenizer_token_id(tok, "<|im_end|>") == 302);
	CHECK(tokenizer_token_id(tok, "nope") == -1);
	CHECK(strcmp(tokenizer_id_token(tok, 260), "\xc4\xa0w") == 0); /* Ġw */
	CHECK(tokenizer_id_token(tok, 280) == NULL);                   /* a hole in the ids */
	CHECK(tokenizer_id_token(tok, 305) == NULL);
	CHECK(tokenizer_is_special(tok, 300) && !tokenizer_is_special(tok, 303) && !tokenizer_is_special(tok, 104));
}

static void test_encode_qwen_like(const struct tokenizer *tok, struct tok_workspace *ws)
{
	char longword[1001];

	EXPECT(tok, ws, "hello world", 259, 263, 100);
	EXPECT(tok, ws, "hello", 259);
	/* equal ranks: the leftmost pair merges first */
	EXPECT(tok, ws, "lll", 257, 108);
	EXPECT(tok, ws, "llll", 257, 257);
	/* NFC: e + U+0301 becomes U+00E9 (C3 A9) before the bytes are split */
	EXPECT(tok, ws, "e\xcc\x81", 195, 169);
	EXPECT(tok, ws, "\xc3\xa9", 195, 169);
	/* white space: \s+(?!\S) leaves the last space to the next word */
	EXPECT(tok, ws, "a   b", 97, 264, 32, 98);
	EXPECT(tok, ws, "     x", 264, 264, 32, 120);
	EXPECT(tok, ws, "a\n\nb", 97, 10, 10, 98);
	/* contractions and single digits */
	EXPECT(tok, ws, "it's", 105, 116, 39, 115);
	EXPECT(tok, ws, "2024", 50, 48, 50, 52);
	/* U+180E is not white space to Oniguruma: one pre-token, so 8E E1 merges */
	EXPECT(tok, ws, "m\xe1\xa0\x8e\xe1\xa0\x8en", 109, 225, 160, 265, 160, 142, 110);
	/* added tokens come out of the raw text first, longest match wins */
	EXPECT(tok, ws, "<|im_start|>user\nhi<|im_end|>", 301, 117, 115, 101, 114, 10, 104, 105, 302);
	EXPECT(tok, ws, "<|im_x", 303, 120);
	EXPECT(tok, ws, "<|endoftext|><|endoftext|>", 300, 300);
	EXPECT(tok, ws, "<|endoftext", 60, 124, 101, 110, 100, 111, 102, 116, 101, 120, 116);
	/* lstrip swallows the white space before <mask> */
	EXPECT(tok, ws, "a <mask>", 97, 304);
	EXPECT(tok, ws, "", -1); /* -1 ends the list: no ids */
	/* a long word goes through the heap: 500 "ll" */
	memset(longword, 'l', 1000);
	longword[1000] = '\0';
	{
		struct token_ids got = { 0 };
		char err[128];
		int ok = 1;
		CHECK(tokenizer_encode(tok, ws, longword, 1000, 0, &got, err, sizeof err) == 0);
		for (size_t i = 0; i < got.n; i++)
			ok &= got.v[i] == 257;
		CHECK(got.n == 500 && ok);
		token_ids_free(&got);
	}
	/* the cache gives the same answer the second time, and so does no workspace */
	EXPECT(tok, ws, "hello world hello world", 259, 263, 100, 32, 259, 263, 100);
	EXPECT(tok, NULL, "hello world hello world", 259, 263, 100, 32, 259, 263, 100);
	/* no template in this tokenizer: add-special changes nothing */
	EXPECT_FLAGS(tok, ws, TOK_ADD_SPECIAL, "hello", 259);
}

static void test_invalid_utf8(const struct tokenizer *tok)
{
	struct token_ids got = { 0 };
	char err[128] = "";

	CHECK(tokenizer_encode(tok, NULL, "ab\xff", 3, 0, &got, err, sizeof err) < 0);
	CHECK(strstr(err, "invalid UTF-8 at byte 2") != NULL);
	CHECK(tokenizer_encode(tok, NULL, "\xed\xa0\x80", 3, 0, &got, err, sizeof err) < 0); /* a surrogate */
	CHECK(tokenizer_encode(tok, NULL, "\xc0\xaf", 2, 0, &got, err, sizeof err) < 0);      /* overlong */
	CHECK(tokenizer_encode(tok, NULL, "\xe2\x82", 2, 0, &got, err, sizeof err) < 0);      /* truncated */
	CHECK(got.n == 0);
	/* NUL is valid UTF-8 and a byte like any other */
	CHECK(tokenizer_encode(tok, NULL, "a\0b", 3, 0, &got, err, sizeof err) == 0 && got.n == 3 && got.v[1] == 0);
	token_ids_free(&got);
}

static void test_decode(const struct tokenizer *tok)
{
	char err[128] = "";
	size_t len;
	const int32_t bad[] = { 104, 280 };

	DECODE(tok, 0, "hello world", 259, 263, 100);
	DECODE(tok, 0, "<|im_start|>hi<|im_end|>", 301, 104, 105, 302);
	DECODE(tok, TOK_SKIP_SPECIAL, "hi", 301, 104, 105, 302);
	DECODE(tok, TOK_SKIP_SPECIAL, "<|im_x", 303, 120); /* not special: kept */
	DECODE(tok, 0, "\xc3\xa9", 195, 169);
	/* ill-formed bytes become U+FFFD, one per maximal subpart */
	DECODE(tok, 0, "\xef\xbf\xbd", 195);
	DECODE(tok, 0, "\xef\xbf\xbd" "A", 226, 130, 65);
	DECODE(tok, 0, "\xef\xbf\xbd\xef\xbf\xbd", 128, 128);
	DECODE(tok, 0, "a\0b", 97, 0, 98);
	CHECK(tokenizer_decode(tok, bad, 2, 0, &len, err, sizeof err) == NULL);
	CHECK(strstr(err, "id 280 at position 1") != NULL);
}

static void test_llama3_like(void)
{
	struct tokenizer *tok = load(TINY_LLAMA3 "/tokenizer.json");
	struct tok_workspace *ws = tok_workspace_new(tok);

	CHECK(tokenizer_eos_id(tok) == 311); /* eos_token given as {"content": ...} */
	/* ignore_merges: a word in the vocabulary is one token, merges or not */
	EXPECT(tok, ws, " world", 266);
	EXPECT(tok, ws, "hello world", 259, 266);
	EXPECT(tok, ws, " worlds", 263, 100, 115);
	EXPECT_FLAGS(tok, ws, TOK_ADD_SPECIAL, "hello world", 310, 259, 266);
	EXPECT_FLAGS(tok, ws, TOK_ADD_SPECIAL, "", 310);
	/* no normalizer: the combining accent stays */
	EXPECT(tok, ws, "e\xcc\x81", 101, 204, 129);
	DECODE(tok, TOK_SKIP_SPECIAL, "hello world", 310, 259, 266, 311);
	tok_workspace_free(ws);
	tokenizer_free(tok);
}

/* Writes the tiny tokenizer.json with one field replaced, loads it, and
 * checks the error names the problem. */
static void expect_load_error(const char *field, const char *json_value, const char *want)
{
	char err[512] = "", *text, path[] = "/tmp/poros-test-tok-XXXXXX";
	size_t len;
	cJSON *root;
	struct tokenizer *tok = NULL;
	int fd;

	text = read_whole_file(TINY "/tokenizer.json", &len);
	root = cJSON_Parse(text);
	free(text);
	json_put_path(root, field, cJSON_Parse(json_value));
	text = cJSON_PrintUnformatted(root);
	fd = mkstemp(path);
	CHECK(fd >= 0);
	close(fd);
	write_fixture(path, text);
	CHECK(tokenizer_load(&tok, path, err, sizeof err) < 0 && tok == NULL);
	if (strstr(err, want) == NULL || strncmp(err, path, strlen(path)) != 0) {
		fprintf(stderr, "%s: error \"%s\" does not start with the path and say \"%s\"\n", field, err, want);
		failures++;
	}
	unlink(path);
	free(text);
	cJSON_Delete(root);
}

static void test_load_errors(void)
{
	struct tokenizer *tok = NULL;
	char err[512] = "";

	expect_load_error("model.type", "\"WordPiece\"", "model \"WordPiece\" is not supported");
	expect_load_error("normalizer", "{\"type\":\"Lowercase\"}", "normalizer \"Lowercase\" is not supported");
	expect_load_error("pre_tokenizer", "{\"type\":\"Metaspace\"}", "pre_tokenizer \"Metaspace\" is not supported");
	expect_load_error("pre_tokenizer",
			  "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"MergedWithNothing\",\"invert\":false}",
			  "behavior \"MergedWithNothing\" is not supported");
	expect_load_error("pre_tokenizer", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a\"},\"behavior\":\"Isolated\"}",
			  "regex does not compile");
	expect_load_error("pre_tokenizer", "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[\\\\S]\"},\"behavior\":\"Isolated\"}",
			  "\\S inside a character class");
	expect_load_error("decoder", "{\"type\":\"WordPiece\"}", "decoder \"WordPiece\" is not supported");
	expect_load_error("post_processor", "{\"type\":\"BertProcessing\"}", "post_processor \"BertProcessing\"");
	expect_load_error("model.merges", "[\"h zz\"]", "merges[0]: \"zz\" is not in the vocabulary");
	expect_load_error("model.merges", "[\"h e l\"]", "merges[0]");
	expect_load_error("model.dropout", "0.1", "dropout");
	expect_load_error("added_tokens", "[{\"id\":1,\"content\":\"x\",\"single_word\":true}]", "single_word");
	CHECK(tokenizer_load(&tok, "/nonexistent/tokenizer.json", err, sizeof err) < 0);
	CHECK(strstr(err, "/nonexistent/tokenizer.json") != NULL && strstr(err, "No such file") != NULL);
}

static void test_resolve(void)
{
	char home[] = "/tmp/poros-test-hf-XXXXXX", err[1024] = "";
	struct tokenizer *tok = NULL;
	char *snap, *dst, *src, *text;
	size_t len;

	CHECK(mkdtemp(home) != NULL);
	snap = xasprintf("%s/hub/models--Org--Tiny/snapshots/0123abcd", home);
	CHECK(mkdir_p(snap, 0755) == 0);
	src = read_whole_file(TINY "/tokenizer.json", &len);
	dst = xasprintf("%s/tokenizer.json", snap);
	CHECK(src && atomic_write(dst, src, len) == 0);
	setenv("HF_HOME", home, 1);
	unsetenv("HF_HUB_CACHE");
	CHECK(tokenizer_resolve(&tok, "Org/Tiny", err, sizeof err) == 0 && tok != NULL);
	if (tok)
		CHECK(tokenizer_token_id(tok, "hello") == 259 && strcmp(tokenizer_path(tok), dst) == 0);
	tokenizer_free(tok);
	tok = NULL;
	/* refs/main picks the snapshot, not the newest one */
	{
		char *newer = xasprintf("%s/hub/models--Org--Tiny/snapshots/ffff", home);
		char *ref = xasprintf("%s/hub/models--Org--Tiny/refs/main", home);
		char *refdir = xasprintf("%s/hub/models--Org--Tiny/refs", home);
		struct timespec later[2] = { { time(NULL) + 60, 0 }, { time(NULL) + 60, 0 } };
		CHECK(mkdir_p(newer, 0755) == 0 && mkdir_p(refdir, 0755) == 0);
		CHECK(utimensat(AT_FDCWD, newer, later, 0) == 0); /* newest whatever the clock's grain */
		CHECK(atomic_write(ref, "0123abcd\n", 9) == 0);
		CHECK(tokenizer_resolve(&tok, "Org/Tiny", err, sizeof err) == 0 && strcmp(tokenizer_path(tok), dst) == 0);
		tokenizer_free(tok);
		tok = NULL;
		unlink(ref);
		/* without it, the newest snapshot: here one without a tokenizer */
		CHECK(tokenizer_resolve(&tok, "Org/Tiny", err, sizeof err) < 0 && strstr(err, newer) != NULL);
		free(newer);
		free(ref);
		free(refdir);
	}
	/* a directory works too */
	CHECK(tokenizer_resolve(&tok, TINY, err, sizeof err) == 0 && tokenizer_eos_id(tok) == 300);
	tokenizer_free(tok);
	tok = NULL;
	CHECK(tokenizer_resolve(&tok, "Org/Missing", err, sizeof err) < 0 && tok == NULL);
	text = xasprintf("%s/hub/models--Org--Missing/snapshots", home);
	CHECK(strstr(err, text) != NULL);
	free(text);
	CHECK(tokenizer_resolve(&tok, "not-an-id", err, sizeof err) < 0 && strstr(err, "not a hub id") != NULL);
	unlink(dst);
	rmdir(snap);
	text = xasprintf("rm -rf '%s'", home);
	CHECK(system(text) == 0);
	free(text);
	free(src);
	free(dst);
	free(snap);
}

int main(void)
{
	struct tokenizer *tok = load(TINY);
	struct tok_workspace *ws = tok_workspace_new(tok);

	test_queries(tok);
	test_encode_qwen_like(tok, ws);
	test_invalid_utf8(tok);
	test_decode(tok);
	test_llama3_like();
	test_load_errors();
	test_resolve();
	tok_workspace_free(ws);
	tokenizer_free(tok);
	return test_verdict("test_tokenizer");
}
