/* tools/lib/text/tokenizer_gguf.c: a tokenizer from a GGUF file's
 * tokenizer.ggml.* metadata, as llama.cpp reads it, put in tokenizer.json's
 * shape so the one loader (tokenizer_load.c) builds it.  What GGUF says:
 * the model ("gpt2": byte-level BPE), the pre-tokenizer by name (its Split
 * regex and ignore_merges, gguf.h), the tokens with their types (normal:
 * the BPE vocabulary; control and user-defined: added tokens, special or
 * not; unused ids left out), the merges in rank order, the BOS put in
 * front when add_bos_token, and the EOS.  GGUF carries no normalizer, so
 * none is applied, as in llama.cpp. */
#include "tokenizer_int.h"

#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/util.h"

static const cJSON *key(const cJSON *md, const char *name)
{
	return cJSON_GetObjectItemCaseSensitive(md, name);
}

static cJSON *pre_tokenizer(const struct gguf_pre_tokenizer *p)
{
	cJSON *seq = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(seq, "pretokenizers");
	cJSON *split = cJSON_CreateObject(), *bl = cJSON_CreateObject();

	cJSON_AddStringToObject(seq, "type", "Sequence");
	cJSON_AddStringToObject(split, "type", "Split");
	cJSON_AddStringToObject(cJSON_AddObjectToObject(split, "pattern"), "Regex", p->split_regex);
	cJSON_AddStringToObject(split, "behavior", "Isolated");
	cJSON_AddFalseToObject(split, "invert");
	cJSON_AddStringToObject(bl, "type", "ByteLevel");
	cJSON_AddFalseToObject(bl, "add_prefix_space");
	cJSON_AddFalseToObject(bl, "use_regex");
	cJSON_AddItemToArray(list, split);
	cJSON_AddItemToArray(list, bl);
	return seq;
}

/* BOS then the text, as TemplateProcessing names it. */
static cJSON *bos_template(const char *bos, int id)
{
	cJSON *tp = cJSON_CreateObject(), *single = cJSON_AddArrayToObject(tp, "single"), *piece, *entry;

	cJSON_AddStringToObject(tp, "type", "TemplateProcessing");
	piece = cJSON_CreateObject();
	cJSON_AddStringToObject(cJSON_AddObjectToObject(piece, "SpecialToken"), "id", bos);
	cJSON_AddItemToArray(single, piece);
	piece = cJSON_CreateObject();
	cJSON_AddStringToObject(cJSON_AddObjectToObject(piece, "Sequence"), "id", "A");
	cJSON_AddItemToArray(single, piece);
	entry = cJSON_AddObjectToObject(cJSON_AddObjectToObject(tp, "special_tokens"), bos);
	cJSON_AddStringToObject(entry, "id", bos);
	cJSON_AddItemToArray(cJSON_AddArrayToObject(entry, "ids"), cJSON_CreateNumber(id));
	cJSON_AddItemToArray(cJSON_AddArrayToObject(entry, "tokens"), cJSON_CreateString(bos));
	return tp;
}

static int token_id(const cJSON *md, const char *name, int n, int *id, char *err, size_t errsz)
{
	const cJSON *v = key(md, name);

	*id = -1;
	if (v == NULL)
		return 0;
	if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= n)
		return set_error(err, errsz, "%s is not a token id below %d", name, n);
	*id = (int)v->valuedouble;
	return 0;
}

/* The tokens into model.vocab and added_tokens, by type. */
static int vocab_and_added(cJSON *root, cJSON *model, const cJSON *tokens, const cJSON *types, char *err, size_t errsz)
{
	cJSON *vocab = cJSON_AddObjectToObject(model, "vocab"), *added = cJSON_AddArrayToObject(root, "added_tokens");
	int n = cJSON_GetArraySize(tokens), i = 0;
	const cJSON *tok, *type;

	if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != n)
		return set_error(err, errsz, "tokenizer.ggml.token_type: not one type per token (%d tokens)", n);
	type = types->child;
	cJSON_ArrayForEach(tok, tokens) {
		int tt = cJSON_IsNumber(type) ? (int)type->valuedouble : -1;

		if (!cJSON_IsString(tok) || tt < 0)
			return set_error(err, errsz, "tokenizer.ggml.tokens / token_type: entry %d is not a string and a type", i);
		if (tt == GGUF_TOKEN_NORMAL) {
			cJSON_AddNumberToObject(vocab, tok->valuestring, i);
		} else if (tt == GGUF_TOKEN_CONTROL || tt == GGUF_TOKEN_USER_DEFINED) {
			cJSON *a = cJSON_CreateObject();

			cJSON_AddNumberToObject(a, "id", i);
			cJSON_AddStringToObject(a, "content", tok->valuestring);
			cJSON_AddBoolToObject(a, "special", tt == GGUF_TOKEN_CONTROL);
			cJSON_AddItemToArray(added, a);
		} else if (tt != GGUF_TOKEN_UNUSED) {
			return set_error(err, errsz, "tokenizer.ggml.token_type %d (id %d, \"%s\") is not read (normal, control, "
			                 "user-defined and unused are)", tt, i, tok->valuestring);
		}
		type = type->next;
		i++;
	}
	return 0;
}

cJSON *tokenizer_json_from_gguf(const char *path, int32_t *eos_id, char *err, size_t errsz)
{
	cJSON *md = gguf_read_metadata(path, err, errsz), *root = NULL, *model;
	const cJSON *m, *pre, *tokens, *merges, *add_bos;
	const struct gguf_pre_tokenizer *p = NULL;
	char why[512];
	int n, bos, eos;

	if (md == NULL)
		return NULL;
	m = key(md, "tokenizer.ggml.model");
	pre = key(md, "tokenizer.ggml.pre");
	tokens = key(md, "tokenizer.ggml.tokens");
	merges = key(md, "tokenizer.ggml.merges");
	if (!cJSON_IsString(m) || strcmp(m->valuestring, "gpt2") != 0) {
		set_error(why, sizeof why, "tokenizer.ggml.model is %s%s%s, not \"gpt2\" (the byte-level BPE Poros runs)",
		          cJSON_IsString(m) ? "\"" : "", cJSON_IsString(m) ? m->valuestring : "missing",
		          cJSON_IsString(m) ? "\"" : "");
		goto fail;
	}
	for (int i = 0; cJSON_IsString(pre) && i < n_gguf_pre_tokenizers; i++)
		if (strcmp(pre->valuestring, gguf_pre_tokenizers[i].name) == 0)
			p = &gguf_pre_tokenizers[i];
	if (p == NULL) {
		set_error(why, sizeof why, "tokenizer.ggml.pre %s%s%s is not one Poros reads (qwen2, llama-bpe)",
		          cJSON_IsString(pre) ? "\"" : "", cJSON_IsString(pre) ? pre->valuestring : "missing",
		          cJSON_IsString(pre) ? "\"" : "");
		goto fail;
	}
	if (!cJSON_IsArray(tokens) || !cJSON_IsArray(merges)) {
		set_error(why, sizeof why, "no tokenizer.ggml.tokens or tokenizer.ggml.merges array");
		goto fail;
	}
	n = cJSON_GetArraySize(tokens);
	root = cJSON_CreateObject();
	model = cJSON_AddObjectToObject(root, "model");
	cJSON_AddStringToObject(model, "type", "BPE");
	cJSON_AddBoolToObject(model, "ignore_merges", p->ignore_merges);
	cJSON_AddItemToObject(model, "merges", cJSON_Duplicate(merges, 1));
	if (vocab_and_added(root, model, tokens, key(md, "tokenizer.ggml.token_type"), why, sizeof why) < 0 ||
	    token_id(md, "tokenizer.ggml.bos_token_id", n, &bos, why, sizeof why) < 0 ||
	    token_id(md, "tokenizer.ggml.eos_token_id", n, &eos, why, sizeof why) < 0)
		goto fail;
	cJSON_AddNullToObject(root, "normalizer");
	cJSON_AddItemToObject(root, "pre_tokenizer", pre_tokenizer(p));
	add_bos = key(md, "tokenizer.ggml.add_bos_token");
	if (cJSON_IsTrue(add_bos)) {
		if (bos < 0) {
			set_error(why, sizeof why, "tokenizer.ggml.add_bos_token is true but there is no bos_token_id");
			goto fail;
		}
		cJSON_AddItemToObject(root, "post_processor",
		                      bos_template(cJSON_GetArrayItem(tokens, bos)->valuestring, bos));
	} else {
		cJSON_AddNullToObject(root, "post_processor");
	}
	cJSON_AddStringToObject(cJSON_AddObjectToObject(root, "decoder"), "type", "ByteLevel");
	*eos_id = eos;
	cJSON_Delete(md);
	return root;
fail:
	set_error(err, errsz, "%s: %s", path, why);
	cJSON_Delete(root);
	cJSON_Delete(md);
	return NULL;
}
