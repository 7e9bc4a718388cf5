/* tests/fuzz/fuzz_tokenizer.c: tokenizer_load on an arbitrary tokenizer.json
 * (what poros-train and poros-tokenize read from a model directory).  A bad
 * file must come back as -1 with a message, never a crash; one that loads
 * must encode a few texts into ids of its vocabulary, and decode those ids
 * again (they are its own, so decoding cannot fail). */
#include "fuzz_common.h"

#include "records/records.h" /* utf8_valid_prefix */
#include "text/text.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const texts[] = {
	"Hello, world! It's 2026.",
	"  leading and trailing  \n\n",
	"caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 e\xcc\x81",
	"<|endoftext|><|im_start|>user\nhi<|im_end|>",
	"",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	struct tokenizer *tok = NULL;
	const char *path = fuzz_write_file("tokenizer.json", data, size);

	err[0] = '\0';
	if (tokenizer_load(&tok, path, err, sizeof err) < 0) {
		if (tok != NULL || err[0] == '\0')
			abort();
		return 0;
	}
	int vocab = tokenizer_vocab_size(tok);
	struct tok_workspace *ws = tok_workspace_new(tok);
	for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
		struct token_ids ids = { 0 };
		err[0] = '\0';
		if (tokenizer_encode(tok, ws, texts[i], strlen(texts[i]), TOK_ADD_SPECIAL, &ids, err, sizeof err) < 0) {
			/* a regex that fails at run time (PCRE2's limits) is reported */
			if (err[0] == '\0')
				abort();
			token_ids_free(&ids);
			continue;
		}
		for (size_t k = 0; k < ids.n; k++) {
			if (ids.v[k] < 0 || ids.v[k] >= vocab) {
				fprintf(stderr, "text %zu: id %d outside the vocabulary of %d\n", i, ids.v[k], vocab);
				abort();
			}
		}
		size_t len = 0;
		char *back = tokenizer_decode(tok, ids.v, ids.n, 0, &len, err, sizeof err);
		if (back == NULL) {
			fprintf(stderr, "text %zu: its own ids do not decode: %s\n", i, err);
			abort();
		}
		if (utf8_valid_prefix(back, len) != len || strlen(back) > len)
			abort();
		free(back);
		token_ids_free(&ids);
	}
	(void)tokenizer_eos_id(tok);
	tok_workspace_free(ws);
	tokenizer_free(tok);
	return 0;
}
