/* tools/poros-export/gguf_meta.c: the metadata keys of a GGUF export,
 * those llama.cpp reads for a llama, qwen2 or qwen3 decoder and its
 * byte-level BPE tokenizer ("gpt2" to llama.cpp).  What llama.cpp would
 * read differently from what transformers does is refused by name. */
#include "export.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "util/util.h"
#include "text/text.h"

struct vocab {
	int n;
	char **token;      /* [n]; NULL: no token has this id */
	int32_t *type;
	char **merges;
	int nmerges;
};

static void vocab_free(struct vocab *v)
{
	for (int i = 0; i < v->n; i++)
		free(v->token[i]);
	for (int i = 0; i < v->nmerges; i++)
		free(v->merges[i]);
	free(v->token);
	free(v->type);
	free(v->merges);
}

/* --- the model ----------------------------------------------------------- */

static void key(char *buf, size_t n, const struct job *j, const char *suffix)
{
	snprintf(buf, n, "%s.%s", j->mc.model_type, suffix);
}

uint32_t gguf_file_type(enum gguf_outtype t)
{
	return t == OUTTYPE_F32 ? 0 : t == OUTTYPE_F16 ? 1 : t == OUTTYPE_Q8_0 ? 7 : 32;
}

static int model_keys(struct job *j, struct gguf_writer *w)
{
	const struct model_config *m = &j->mc;
	const char *name = strrchr(m->checkpoint_dir, '/');
	char k[96];

	if (m->max_position_embeddings <= 0)
		return fail(j, EXIT_USAGE, "%s: no max_position_embeddings: GGUF needs %s.context_length", m->config_path,
		            m->model_type);
	/* llama3 scaling is a rope_freqs tensor (gguf_out.c), which llama.cpp's
	 * llama graph reads and its qwen2 / qwen3 graphs do not */
	if (strcmp(m->rope_scaling_type, "llama3") == 0 && strcmp(m->model_type, "llama") != 0)
		return fail(j, EXIT_USAGE, "%s: rope_scaling type \"llama3\" on %s: llama.cpp's %s reads no rope_freqs "
		            "tensor, so poros-export does not write it", m->config_path, m->model_type, m->model_type);
	if (strcmp(m->rope_scaling_type, "") != 0 && strcmp(m->rope_scaling_type, "linear") != 0 &&
	    strcmp(m->rope_scaling_type, "llama3") != 0)
		return fail(j, EXIT_USAGE, "%s: rope_scaling type \"%s\" is not written to GGUF by poros-export",
		            m->config_path, m->rope_scaling_type);
	gguf_kv_string(w, "general.architecture", m->model_type);
	gguf_kv_string(w, "general.name", name != NULL && name[1] != '\0' ? name + 1 : m->checkpoint_dir);
	gguf_kv_uint32(w, "general.alignment", GGUF_ALIGNMENT);
	gguf_kv_uint32(w, "general.file_type", gguf_file_type(j->o->outtype));
	key(k, sizeof k, j, "context_length"), gguf_kv_uint32(w, k, (uint32_t)m->max_position_embeddings);
	key(k, sizeof k, j, "embedding_length"), gguf_kv_uint32(w, k, (uint32_t)m->hidden_size);
	key(k, sizeof k, j, "block_count"), gguf_kv_uint32(w, k, (uint32_t)m->num_hidden_layers);
	key(k, sizeof k, j, "feed_forward_length"), gguf_kv_uint32(w, k, (uint32_t)m->intermediate_size);
	key(k, sizeof k, j, "attention.head_count"), gguf_kv_uint32(w, k, (uint32_t)m->num_attention_heads);
	key(k, sizeof k, j, "attention.head_count_kv"), gguf_kv_uint32(w, k, (uint32_t)m->num_key_value_heads);
	key(k, sizeof k, j, "rope.freq_base"), gguf_kv_float32(w, k, (float)m->rope_theta);
	key(k, sizeof k, j, "rope.dimension_count"), gguf_kv_uint32(w, k, (uint32_t)m->head_dim);
	key(k, sizeof k, j, "attention.layer_norm_rms_epsilon"), gguf_kv_float32(w, k, (float)m->rms_norm_eps);
	key(k, sizeof k, j, "vocab_size"), gguf_kv_uint32(w, k, (uint32_t)m->vocab_size);
	/* llama.cpp takes hidden / heads unless told: say it whenever the
	 * config does or the two differ (Qwen3's default is 128) */
	if (cJSON_HasObjectItem(j->config, "head_dim") || m->head_dim * m->num_attention_heads != m->hidden_size) {
		key(k, sizeof k, j, "attention.key_length"), gguf_kv_uint32(w, k, (uint32_t)m->head_dim);
		key(k, sizeof k, j, "attention.value_length"), gguf_kv_uint32(w, k, (uint32_t)m->head_dim);
	}
	if (strcmp(m->rope_scaling_type, "linear") == 0) {
		key(k, sizeof k, j, "rope.scaling.type"), gguf_kv_string(w, k, "linear");
		key(k, sizeof k, j, "rope.scaling.factor"), gguf_kv_float32(w, k, (float)m->rope_scaling_factor);
	}
	return 0;
}

/* --- the tokenizer ------------------------------------------------------- */

/* The Split regex of tokenizer.json's pre_tokenizer (a Split, or one in a
 * Sequence), or NULL. */
static const char *split_regex(const cJSON *pre)
{
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(pre, "type"), *p;
	const cJSON *rx = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(pre, "pattern"), "Regex");
	const char *found;

	if (cJSON_IsString(type) && strcmp(type->valuestring, "Split") == 0)
		return cJSON_IsString(rx) ? rx->valuestring : NULL;
	cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers"))
		if ((found = split_regex(p)) != NULL)
			return found;
	return NULL;
}

static int pre_name(struct job *j, const char *path, const cJSON *tj, const char **name)
{
	const char *rx = split_regex(cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer"));

	const cJSON *im = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "ignore_merges");

	for (int i = 0; rx != NULL && i < n_gguf_pre_tokenizers; i++) {
		const struct gguf_pre_tokenizer *p = &gguf_pre_tokenizers[i];

		if (strcmp(rx, p->split_regex) != 0)
			continue;
		/* llama.cpp runs each pre type with its own ignore_merges */
		if (cJSON_IsTrue(im) != p->ignore_merges)
			return fail(j, EXIT_USAGE, "%s: model.ignore_merges is %s, but llama.cpp's \"%s\" pre-tokenizer (its "
			            "Split regex) runs with ignore_merges %s", path, cJSON_IsTrue(im) ? "true" : "false", p->name,
			            p->ignore_merges ? "true" : "false");
		*name = p->name;
		return 0;
	}
	return fail(j, EXIT_USAGE, "%s: the pre-tokenizer's Split regex is not Qwen2's or Llama-3's, the ones "
	            "tokenizer.ggml.pre can name for llama.cpp", path);
}

static int put_token(struct job *j, const char *path, struct vocab *v, const char *text, double id, int type)
{
	int i = (int)id;

	if (id != (double)i || i < 0 || i >= v->n)
		return fail(j, EXIT_USAGE, "%s: token \"%s\" has id %g, outside the model's vocab_size %d", path, text, id,
		            v->n);
	free(v->token[i]);
	v->token[i] = xstrdup(text);
	v->type[i] = type;
	return 0;
}

static int read_tokens(struct job *j, const char *path, const cJSON *tj, struct vocab *v)
{
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model"), *e;
	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
	int rc;

	if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0 || !cJSON_IsObject(vocab))
		return fail(j, EXIT_USAGE, "%s: not a BPE model with a vocab", path);
	cJSON_ArrayForEach(e, vocab)
		if (!cJSON_IsNumber(e) || (rc = put_token(j, path, v, e->string, e->valuedouble, GGUF_TOKEN_NORMAL)) != 0)
			return cJSON_IsNumber(e) ? rc : fail(j, EXIT_USAGE, "%s: vocab \"%s\": not an id", path, e->string);
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(tj, "added_tokens")) {
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
		const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");

		if (!cJSON_IsNumber(id) || !cJSON_IsString(content))
			return fail(j, EXIT_USAGE, "%s: an added token without an id and content", path);
		rc = put_token(j, path, v, content->valuestring, id->valuedouble,
		               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special")) ? GGUF_TOKEN_CONTROL
		                                                                            : GGUF_TOKEN_USER_DEFINED);
		if (rc != 0)
			return rc;
	}
	for (int i = 0; i < v->n; i++)
		if (v->token[i] == NULL) {
			v->token[i] = xasprintf("[PAD%d]", i);
			v->type[i] = GGUF_TOKEN_UNUSED;
		}
	return 0;
}

/* merges as "a b", from either of tokenizer.json's spellings */
static int read_merges(struct job *j, const char *path, const cJSON *tj, struct vocab *v)
{
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "merges");
	const cJSON *e;

	v->merges = xcalloc((size_t)cJSON_GetArraySize(merges) + 1, sizeof *v->merges);
	cJSON_ArrayForEach(e, merges) {
		const cJSON *a = cJSON_GetArrayItem(e, 0), *b = cJSON_GetArrayItem(e, 1);

		if (cJSON_IsString(e))
			v->merges[v->nmerges++] = xstrdup(e->valuestring);
		else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(a) && cJSON_IsString(b))
			v->merges[v->nmerges++] = xasprintf("%s %s", a->valuestring, b->valuestring);
		else
			return fail(j, EXIT_USAGE, "%s: merge %d is neither \"a b\" nor [\"a\", \"b\"]", path, v->nmerges);
	}
	return 0;
}

/* tokenizer_config.json's NAME token ("<|x|>" or {"content": ...}) as an id, or -1. */
static int special_id(const cJSON *tc, const char *name, const struct vocab *v)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(tc, name);

	if (cJSON_IsObject(t))
		t = cJSON_GetObjectItemCaseSensitive(t, "content");
	for (int i = 0; cJSON_IsString(t) && i < v->n; i++)
		if (v->type[i] != GGUF_TOKEN_UNUSED && strcmp(v->token[i], t->valuestring) == 0)
			return i;
	return -1;
}

/* added_bos: the id encoding puts in front, or -1 */
static void special_keys(struct job *j, struct gguf_writer *w, const cJSON *tc, const struct vocab *v, int added_bos)
{
	int bos = special_id(tc, "bos_token", v), eos = special_id(tc, "eos_token", v), pad = special_id(tc, "pad_token", v);

	/* tokenizer_config.json first, then the token the tokenizer adds,
	 * config.json for what they leave out */
	if (bos < 0)
		bos = added_bos >= 0 ? added_bos : j->mc.bos_token_id;
	if (eos < 0)
		eos = j->mc.eos_token_id;
	if (bos >= 0 && bos < v->n)
		gguf_kv_uint32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
	if (eos >= 0 && eos < v->n)
		gguf_kv_uint32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
	if (pad >= 0)
		gguf_kv_uint32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad);
}

/* The token encoding puts in front (Llama-3's BOS) as Poros' tokenizer,
 * the one training used, does with TOK_ADD_SPECIAL: its id, or -1. */
static int adds_bos(struct job *j, const char *path, int *added)
{
	struct token_ids plain = { 0 }, with = { 0 };
	struct tokenizer *tok;
	char lerr[768];
	int rc = 0;

	if (tokenizer_load(&tok, path, lerr, sizeof lerr) < 0)
		return fail(j, EXIT_USAGE, "%s", lerr);
	if (tokenizer_encode(tok, NULL, "a", 1, 0, &plain, lerr, sizeof lerr) < 0 ||
	    tokenizer_encode(tok, NULL, "a", 1, TOK_ADD_SPECIAL, &with, lerr, sizeof lerr) < 0)
		rc = fail(j, EXIT_USAGE, "%s", lerr);
	*added = rc == 0 && with.n > plain.n && with.v[0] != plain.v[0] ? with.v[0] : -1;
	token_ids_free(&plain);
	token_ids_free(&with);
	tokenizer_free(tok);
	return rc;
}

/* tokenizer_config.json's chat_template, else chat_template.jinja; malloc'd or NULL. */
static char *chat_template(const struct job *j, const cJSON *tc)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(tc, "chat_template");
	char *path, *text;

	if (cJSON_IsString(t))
		return xstrdup(t->valuestring);
	path = xasprintf("%s/chat_template.jinja", j->mc.checkpoint_dir);
	text = is_file(path) ? read_whole_file(path, NULL) : NULL;
	free(path);
	return text;
}

static int tokenizer_keys(struct job *j, struct gguf_writer *w, const cJSON *tj, const cJSON *tc, const char *path)
{
	struct vocab v = { .n = j->mc.vocab_size };
	const char *pre = NULL;
	const cJSON *norm;
	char *tmpl;
	int rc, bos = -1;

	v.token = xcalloc((size_t)v.n, sizeof *v.token);
	v.type = xcalloc((size_t)v.n, sizeof *v.type);
	if ((rc = pre_name(j, path, tj, &pre)) != 0 || (rc = read_tokens(j, path, tj, &v)) != 0 ||
	    (rc = read_merges(j, path, tj, &v)) != 0 || (rc = adds_bos(j, path, &bos)) != 0)
		goto out;
	norm = cJSON_GetObjectItemCaseSensitive(tj, "normalizer");
	if (norm != NULL && !cJSON_IsNull(norm)) {
		const cJSON *type = cJSON_GetObjectItemCaseSensitive(norm, "type");

		warnmsg("note: %s normalizes text (%s) before BPE and GGUF has no key for that: llama.cpp encodes text "
		        "that is not already normalized to other ids", path, cJSON_IsString(type) ? type->valuestring : "?");
	}
	gguf_kv_string(w, "tokenizer.ggml.model", "gpt2");
	gguf_kv_string(w, "tokenizer.ggml.pre", pre);
	gguf_kv_strings(w, "tokenizer.ggml.tokens", (const char *const *)v.token, (size_t)v.n);
	gguf_kv_int32s(w, "tokenizer.ggml.token_type", v.type, (size_t)v.n);
	gguf_kv_strings(w, "tokenizer.ggml.merges", (const char *const *)v.merges, (size_t)v.nmerges);
	special_keys(j, w, tc, &v, bos);
	gguf_kv_bool(w, "tokenizer.ggml.add_bos_token", bos >= 0);
	if ((tmpl = chat_template(j, tc)) != NULL)
		gguf_kv_string(w, "tokenizer.chat_template", tmpl);
	free(tmpl);
out:
	vocab_free(&v);
	return rc;
}

int gguf_metadata(struct job *j, struct gguf_writer *w)
{
	char *tpath = xasprintf("%s/tokenizer.json", j->mc.checkpoint_dir);
	char *cpath = xasprintf("%s/tokenizer_config.json", j->mc.checkpoint_dir), lerr[768];
	cJSON *tj = NULL, *tc = NULL;
	int rc;

	if ((rc = model_keys(j, w)) != 0)
		goto out;
	if (!is_file(tpath)) {
		rc = fail(j, EXIT_USAGE, "--base %s: no tokenizer.json (a GGUF file carries the tokenizer)", j->o->base);
		goto out;
	}
	if ((tj = json_read_file(tpath, lerr, sizeof lerr)) == NULL ||
	    (is_file(cpath) && (tc = json_read_file(cpath, lerr, sizeof lerr)) == NULL)) {
		rc = fail(j, EXIT_USAGE, "%s", lerr);
		goto out;
	}
	rc = tokenizer_keys(j, w, tj, tc, tpath);
out:
	cJSON_Delete(tj);
	cJSON_Delete(tc);
	free(tpath);
	free(cpath);
	return rc;
}
