/* tests/fuzz/fuzz_gguf.c: a GGUF file's metadata read back
 * (gguf_read_metadata) and a tokenizer loaded from it (tokenizer_load
 * takes a GGUF file by its magic).  A bad file must come back refused with
 * a message, never a crash or a read past the input; a tokenizer that
 * loads must encode a text into ids of its own vocabulary. */
#include "fuzz_common.h"

#include "model/model.h"
#include "text/text.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[512];
	const char *path = fuzz_write_file("model.gguf", data, size);
	struct tokenizer *tok = NULL;
	cJSON *md;

	err[0] = '\0';
	if ((md = gguf_read_metadata(path, err, sizeof err)) == NULL) {
		if (err[0] == '\0')
			abort();
	}
	cJSON_Delete(md);
	err[0] = '\0';
	if (tokenizer_load(&tok, path, err, sizeof err) < 0) {
		if (tok != NULL || err[0] == '\0')
			abort();
		return 0;
	}
	struct tok_workspace *ws = tok_workspace_new(tok);
	struct token_ids ids = { 0 };
	const char *text = "Hello, world! caf\xc3\xa9 <|im_start|>";
	if (tokenizer_encode(tok, ws, text, strlen(text), TOK_ADD_SPECIAL, &ids, err, sizeof err) == 0)
		for (size_t i = 0; i < ids.n; i++)
			if (ids.v[i] < 0 || ids.v[i] >= tokenizer_vocab_size(tok))
				abort();
	token_ids_free(&ids);
	tok_workspace_free(ws);
	tokenizer_free(tok);
	return 0;
}
