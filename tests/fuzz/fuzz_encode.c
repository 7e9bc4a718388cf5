/* tests/fuzz/fuzz_encode.c: encode and decode with the fixture tokenizers
 * (tests/fixtures/tokenizer/: Qwen-like with NFC, Llama-3-like without a
 * normalizer).  The input is text:
 *   - not valid UTF-8: encode refuses it, saying where;
 *   - valid: decode(encode(text)) gives the text back (NFC-normalized where
 *     the tokenizer normalizes, so there encoding that again gives the same
 *     ids); ids stay in the vocabulary.
 * The input read as int32 ids (modulo the vocabulary) must decode to valid
 * UTF-8, whatever the ids (HF puts U+FFFD for broken bytes). */
#include "fuzz_common.h"

#include "records/records.h" /* utf8_valid_prefix */
#include "text/text.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const fixtures[] = {
	"tests/fixtures/tokenizer/llama3_like", /* no normalizer: exact round trip */
	"tests/fixtures/tokenizer/qwen_like",   /* NFC */
	"tests/fixtures/tokenizer/tiny",        /* NFC */
};
#define N_FIXTURES (sizeof fixtures / sizeof fixtures[0])

static struct tokenizer *toks[N_FIXTURES];
static struct tok_workspace *wss[N_FIXTURES];

static void load_once(void)
{
	char err[512];

	if (toks[0] != NULL)
		return;
	for (size_t i = 0; i < N_FIXTURES; i++) {
		if (tokenizer_load(&toks[i], fixtures[i], err, sizeof err) < 0) {
			fprintf(stderr, "%s (run from the repository root)\n", err);
			abort();
		}
		wss[i] = tok_workspace_new(toks[i]);
	}
}

static void encode_or_die(size_t t, const char *text, size_t len, struct token_ids *ids)
{
	char err[512];

	if (tokenizer_encode(toks[t], wss[t], text, len, 0, ids, err, sizeof err) < 0) {
		fprintf(stderr, "%s: valid UTF-8 refused: %s\n", fixtures[t], err);
		abort();
	}
}

static void round_trip(size_t t, const char *text, size_t len)
{
	struct token_ids ids = { 0 }, again = { 0 };
	char err[512];
	size_t back_len = 0;
	int vocab = tokenizer_vocab_size(toks[t]);

	encode_or_die(t, text, len, &ids);
	for (size_t k = 0; k < ids.n; k++)
		if (ids.v[k] < 0 || ids.v[k] >= vocab)
			abort();
	char *back = tokenizer_decode(toks[t], ids.v, ids.n, 0, &back_len, err, sizeof err);
	if (back == NULL) {
		fprintf(stderr, "%s: its own ids do not decode: %s\n", fixtures[t], err);
		abort();
	}
	if (t == 0) {
		if (back_len != len || (len > 0 && memcmp(back, text, len) != 0)) {
			fprintf(stderr, "%s: decode(encode(text)) differs from the text\n", fixtures[t]);
			abort();
		}
	} else {
		/* NFC is idempotent: the decoded text encodes to the same ids */
		encode_or_die(t, back, back_len, &again);
		if (again.n != ids.n || (ids.n > 0 && memcmp(again.v, ids.v, ids.n * sizeof *ids.v) != 0)) {
			fprintf(stderr, "%s: encode(decode(encode(text))) differs from encode(text)\n", fixtures[t]);
			abort();
		}
	}
	free(back);
	token_ids_free(&ids);
	token_ids_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	size_t ok = utf8_valid_prefix(text, size);
	char err[512];

	load_once();
	for (size_t t = 0; t < N_FIXTURES; t++) {
		if (ok == size) {
			round_trip(t, text, size);
		} else {
			struct token_ids ids = { 0 };
			err[0] = '\0';
			if (tokenizer_encode(toks[t], wss[t], text, size, 0, &ids, err, sizeof err) == 0 ||
			    strstr(err, "invalid UTF-8") == NULL) {
				fprintf(stderr, "%s: invalid UTF-8 at byte %zu not refused (\"%s\")\n", fixtures[t], ok, err);
				abort();
			}
			token_ids_free(&ids);
		}
		/* the same bytes as ids */
		int vocab = tokenizer_vocab_size(toks[t]);
		size_t n = size / 4, len = 0;
		int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
		for (size_t k = 0; k < n; k++) {
			uint32_t v;
			memcpy(&v, data + 4 * k, 4);
			ids[k] = (int32_t)(v % (uint32_t)vocab);
		}
		char *dec = tokenizer_decode(toks[t], ids, n, size > 0 && (data[0] & 1) ? TOK_SKIP_SPECIAL : 0, &len, err, sizeof err);
		/* an id of the range that names no token (a gap) is refused, with a message */
		if (dec == NULL ? err[0] == '\0' : utf8_valid_prefix(dec, len) != len)
			abort();
		free(dec);
		free(ids);
	}
	return 0;
}
