/* tools/poros-export/hf_files.c: the checkpoint's files beside the
 * weights: the shard index, config.json with its new dtype, and the
 * tokenizer files copied from the base. */
#include "export.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* Copied from the base when present: what transformers' tokenizer and
 * generate() read next to the weights. */
static const char *const tokenizer_files[] = {
	"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
	"chat_template.jinja", "chat_template.json", "generation_config.json", "vocab.json",
	"merges.txt", "tokenizer.model",
};
#define N_TOKENIZER_FILES (sizeof tokenizer_files / sizeof *tokenizer_files)
const size_t n_tokenizer_files = N_TOKENIZER_FILES;

static int cmp_name(const void *x, const void *y)
{
	return strcmp((*(const struct out_tensor *const *)x)->t->name, (*(const struct out_tensor *const *)y)->t->name);
}

/* model.safetensors.index.json as transformers writes it: total_size and
 * the weight_map, keys sorted. */
int write_index(struct job *j)
{
	const struct out_tensor **by_name = xcalloc((size_t)j->n + 1, sizeof *by_name);
	cJSON *root = cJSON_CreateObject(), *meta, *map;
	char *text;
	int rc;

	for (int i = 0; i < j->n; i++)
		by_name[i] = &j->t[i];
	qsort(by_name, (size_t)j->n, sizeof *by_name, cmp_name);
	meta = cJSON_AddObjectToObject(root, "metadata");
	cJSON_AddNumberToObject(meta, "total_size", (double)j->total_size);
	map = cJSON_AddObjectToObject(root, "weight_map");
	for (int i = 0; i < j->n; i++)
		cJSON_AddStringToObject(map, by_name[i]->t->name, j->shards[by_name[i]->shard].name);
	text = cJSON_Print(root);
	cJSON_Delete(root);
	free(by_name);
	if (text == NULL)
		die(EXIT_RUNTIME, "out of memory");
	text = xrealloc(text, strlen(text) + 2);
	strcat(text, "\n");
	rc = scratch_write(j, "model.safetensors.index.json", text, strlen(text));
	free(text);
	return rc;
}

/* config.json is edited as text, so everything but the dtype stays as the
 * base wrote it (10000.0 stays a float: cJSON would print 10000).  The
 * scanner walks the top-level object of text cJSON has already accepted. */
static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	return p;
}

/* p at '"': past the closing quote, or NULL. */
static const char *skip_string(const char *p)
{
	for (p++; *p != '\0' && *p != '"'; p++)
		if (*p == '\\' && p[1] != '\0')
			p++;
	return *p == '"' ? p + 1 : NULL;
}

static const char *skip_value(const char *p)
{
	int depth = 0;

	if (*p == '"')
		return skip_string(p);
	if (*p != '{' && *p != '[') {
		while (*p != '\0' && *p != ',' && *p != '}' && *p != ']' && !isspace((unsigned char)*p))
			p++;
		return p;
	}
	while (*p != '\0') {
		if (*p == '"') {
			if ((p = skip_string(p)) == NULL)
				return NULL;
			continue;
		}
		if (*p == '{' || *p == '[')
			depth++;
		else if ((*p == '}' || *p == ']') && --depth == 0)
			return p + 1;
		p++;
	}
	return NULL;
}

/* The value of the top-level key in [*vb, *ve); 0, or -1 when absent. */
static int find_key(const char *text, const char *key, const char **vb, const char **ve)
{
	const char *p = skip_ws(text), *ks, *ke;

	if (*p != '{')
		return -1;
	for (p = skip_ws(p + 1); *p == '"'; p = skip_ws(p)) {
		ks = p + 1;
		if ((ke = skip_string(p)) == NULL)
			return -1;
		p = skip_ws(ke);
		if (*p != ':')
			return -1;
		*vb = p = skip_ws(p + 1);
		if ((*ve = p = skip_value(p)) == NULL)
			return -1;
		if ((size_t)(ke - 1 - ks) == strlen(key) && strncmp(ks, key, strlen(key)) == 0)
			return 0;
		p = skip_ws(p);
		if (*p == ',')
			p++;
	}
	return -1;
}

/* text with key's value made "bfloat16", or the key added before the
 * first one (with its indentation); malloc'd, or NULL when the text is not
 * an object the scanner can follow. */
static char *set_dtype_key(const char *text, const char *key)
{
	const char *vb, *ve, *open, *first;

	if (find_key(text, key, &vb, &ve) == 0)
		return xasprintf("%.*s\"bfloat16\"%s", (int)(vb - text), text, ve);
	open = skip_ws(text);
	if (*open != '{')
		return NULL;
	first = skip_ws(open + 1);
	if (*first == '}')
		return xasprintf("%.*s\"%s\": \"bfloat16\"%s", (int)(open + 1 - text), text, key, open + 1);
	return xasprintf("%.*s\"%s\": \"bfloat16\",%.*s%s", (int)(first - text), text, key, (int)(first - open - 1),
	                 open + 1, first);
}

/* config.json is the base's with the dtype it now has, under the key its
 * transformers version reads: "dtype" from 5 on, "torch_dtype" before
 * (and when the config does not say); both when it has both. */
int write_config(struct job *j)
{
	const cJSON *ver = cJSON_GetObjectItemCaseSensitive(j->config, "transformers_version");
	int has_dtype = cJSON_HasObjectItem(j->config, "dtype"), has_torch = cJSON_HasObjectItem(j->config, "torch_dtype");
	char *text = read_whole_file(j->mc.config_path, NULL), *next;
	int rc;

	if (text == NULL)
		return fail(j, EXIT_RUNTIME, "%s: %s", j->mc.config_path, strerror(errno));
	if (!has_dtype && !has_torch) {
		if (cJSON_IsString(ver) && atoi(ver->valuestring) >= 5)
			has_dtype = 1;
		else
			has_torch = 1;
	}
	for (int k = 0; k < 2; k++) {
		const char *key = k ? "torch_dtype" : "dtype";

		if (!(k ? has_torch : has_dtype))
			continue;
		next = set_dtype_key(text, key);
		free(text);
		if (next == NULL)
			return fail(j, EXIT_USAGE, "%s: not a JSON object poros-export can edit", j->mc.config_path);
		text = next;
	}
	rc = scratch_write(j, "config.json", text, strlen(text));
	free(text);
	return rc;
}

int copy_tokenizer(struct job *j, int *copied)
{
	*copied = 0;
	for (size_t i = 0; i < N_TOKENIZER_FILES; i++) {
		char *src = xasprintf("%s/%s", j->mc.checkpoint_dir, tokenizer_files[i]), *data;
		size_t len;
		int rc;

		if (!is_file(src)) {
			free(src);
			continue;
		}
		data = read_whole_file(src, &len);
		if (data == NULL) {
			rc = fail(j, EXIT_RUNTIME, "%s: %s", src, strerror(errno));
			free(src);
			return rc;
		}
		rc = scratch_write(j, tokenizer_files[i], data, len);
		free(data);
		free(src);
		if (rc != 0)
			return rc;
		++*copied;
	}
	return 0;
}
