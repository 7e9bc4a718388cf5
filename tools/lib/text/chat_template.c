/* tools/lib/text/chat_template.c: a model's chat template (tools/lib/text/jinja.h)
 * applied to messages, and which tokens of the result are the answers. */
#include "chat_template.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "util/util.h"

struct chat_template {
	struct jinja_template *t;
	char *path;
	cJSON *special; /* the config's special tokens, as strings */
	int has_date;
	struct tm date; /* what strftime_now formats, when the run fixed one */
};

static char *beside(const char *tokenizer_json, const char *name)
{
	const char *slash = strrchr(tokenizer_json, '/');

	if (slash == NULL)
		return xstrdup(name);
	return xasprintf("%.*s/%s", (int)(slash - tokenizer_json), tokenizer_json, name);
}

/* A special token of the config: "<s>" or {"content": "<s>", ...}. */
static const char *token_string(const cJSON *v)
{
	if (cJSON_IsString(v))
		return v->valuestring;
	if (cJSON_IsObject(v)) {
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
		if (cJSON_IsString(c))
			return c->valuestring;
	}
	return NULL;
}

int chat_template_load(struct chat_template **out, const char *tokenizer_json, char *err, size_t errsz)
{
	static const char *const specials[] = { "bos_token", "eos_token", "unk_token", "pad_token", "sep_token",
						"cls_token", "mask_token", NULL };
	char *jinja_path = beside(tokenizer_json, "chat_template.jinja");
	char *cfg_path = beside(tokenizer_json, "tokenizer_config.json");
	char *src = NULL, *cfg_text, why[512];
	const char *path = NULL;
	size_t len = 0;
	cJSON *cfg = NULL;
	struct chat_template *ct;
	int rc = -1;

	*out = NULL;
	cfg_text = read_whole_file(cfg_path, &len);
	if (cfg_text) {
		cfg = cJSON_ParseWithLength(cfg_text, len);
		free(cfg_text);
		if (cfg == NULL) {
			set_error(err, errsz, "%s: not valid JSON", cfg_path);
			goto out;
		}
	} else if (errno != ENOENT) {
		set_error(err, errsz, "%s: %s", cfg_path, strerror(errno));
		goto out;
	}
	src = read_whole_file(jinja_path, &len);
	if (src) {
		path = jinja_path;
	} else if (errno != ENOENT) {
		set_error(err, errsz, "%s: %s", jinja_path, strerror(errno));
		goto out;
	} else {
		const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
		if (cJSON_IsArray(t)) { /* named templates: the default one */
			const cJSON *e, *found = NULL;
			cJSON_ArrayForEach(e, t) {
				const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
				if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0)
					found = cJSON_GetObjectItemCaseSensitive(e, "template");
			}
			if (!cJSON_IsString(found)) {
				set_error(err, errsz, "%s: \"chat_template\" is a list without a \"default\" template", cfg_path);
				goto out;
			}
			t = found;
		}
		if (t != NULL && !cJSON_IsString(t) && !cJSON_IsNull(t)) {
			set_error(err, errsz, "%s: \"chat_template\" is neither a string nor a list of named templates", cfg_path);
			goto out;
		}
		if (!cJSON_IsString(t)) {
			set_error(err, errsz, "no chat template beside %s (no %s, no \"chat_template\" in %s)", tokenizer_json,
			          jinja_path, cfg_path);
			rc = 0;
			goto out;
		}
		src = xstrdup(t->valuestring);
		len = strlen(src);
		path = cfg_path;
	}
	ct = xcalloc(1, sizeof *ct);
	ct->path = xstrdup(path);
	if (jinja_parse(&ct->t, src, len, why, sizeof why) < 0) {
		set_error(err, errsz, "%s: chat template %s", path, why);
		chat_template_free(ct);
		goto out;
	}
	ct->special = cJSON_CreateObject();
	for (int i = 0; specials[i]; i++) {
		const char *s = token_string(cJSON_GetObjectItemCaseSensitive(cfg, specials[i]));
		if (s)
			cJSON_AddStringToObject(ct->special, specials[i], s);
	}
	*out = ct;
	rc = 1;
out:
	cJSON_Delete(cfg);
	free(src);
	free(jinja_path);
	free(cfg_path);
	return rc;
}

void chat_template_free(struct chat_template *ct)
{
	if (ct == NULL)
		return;
	jinja_free(ct->t);
	cJSON_Delete(ct->special);
	free(ct->path);
	free(ct);
}

const char *chat_template_path(const struct chat_template *ct) { return ct->path; }

int chat_template_set_date(struct chat_template *ct, const char *ymd, char *err, size_t errsz)
{
	char why[128];

	if (jinja_parse_date(&ct->date, ymd, why, sizeof why) < 0)
		return set_error(err, errsz, "%s", why);
	ct->has_date = 1;
	return 0;
}

/* The names apply_chat_template sets itself, which a record's
 * chat_template_kwargs may not replace (Poros messages have no tools). */
static const char *const own_names[] = { "messages", "tools", "documents", "add_generation_prompt",
					 "continue_final_message", NULL };

int chat_template_render(struct chat_render *out, const struct chat_template *ct, const cJSON *messages,
			 const cJSON *kwargs, char *err, size_t errsz)
{
	const cJSON *m;
	cJSON *vars;
	struct jinja_output jo;
	char why[1024];
	int i = 0, rc, *is_assistant;
	size_t n_msg;

	memset(out, 0, sizeof *out);
	if (!cJSON_IsArray(messages)) {
		set_error(err, errsz, "\"messages\" is not an array");
		return -1;
	}
	n_msg = (size_t)cJSON_GetArraySize(messages);
	cJSON_ArrayForEach(m, messages) {
		const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
		const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
		if (!cJSON_IsString(role) || !cJSON_IsString(content)) {
			set_error(err, errsz, "messages[%d]: needs string \"role\" and \"content\"", i);
			return -1;
		}
		i++;
	}
	if (kwargs && !cJSON_IsObject(kwargs)) {
		set_error(err, errsz, "\"chat_template_kwargs\" is not an object");
		return -1;
	}
	if (kwargs) {
		const cJSON *k;
		cJSON_ArrayForEach(k, kwargs)
			for (int j = 0; own_names[j]; j++)
				if (strcmp(k->string, own_names[j]) == 0) {
					set_error(err, errsz, "chat_template_kwargs: \"%s\" is not a template variable a record "
							      "may set", k->string);
					return -1;
				}
	}
	vars = cJSON_Duplicate(ct->special, 1);
	/* as in transformers, the caller's variables win over the special tokens */
	if (kwargs) {
		const cJSON *k;
		cJSON_ArrayForEach(k, kwargs) {
			cJSON_DeleteItemFromObjectCaseSensitive(vars, k->string);
			cJSON_AddItemToObject(vars, k->string, cJSON_Duplicate(k, 1));
		}
	}
	cJSON_AddItemToObject(vars, "messages", cJSON_Duplicate(messages, 1));
	cJSON_AddNullToObject(vars, "tools");
	cJSON_AddNullToObject(vars, "documents");
	cJSON_AddFalseToObject(vars, "add_generation_prompt");
	rc = jinja_render(&jo, ct->t, vars, 1, ct->has_date ? &ct->date : NULL, why, sizeof why);
	cJSON_Delete(vars);
	if (rc < 0) {
		set_error(err, errsz, "%s: chat template %s", ct->path, why);
		return -1;
	}
	is_assistant = xcalloc(n_msg + 1, sizeof *is_assistant);
	i = 0;
	cJSON_ArrayForEach(m, messages) {
		is_assistant[i] = strcmp(cJSON_GetObjectItemCaseSensitive(m, "role")->valuestring, "assistant") == 0;
		i++;
	}
	/* only the assistant's contents are kept as origins */
	for (size_t k = 0; k < jo.len; k++)
		if (jo.origin[k] && !is_assistant[jo.origin[k] - 1])
			jo.origin[k] = 0;
	out->text = jo.text;
	out->len = jo.len;
	out->assistant = jo.origin;
	out->anchor_pos = jo.anchor_pos;
	out->anchor_msg = jo.anchor_origin;
	for (size_t k = 0; k < jo.n_anchor; k++)
		if (is_assistant[jo.anchor_origin[k] - 1]) {
			out->anchor_pos[out->n_anchor] = jo.anchor_pos[k];
			out->anchor_msg[out->n_anchor++] = jo.anchor_origin[k];
		}
	free(is_assistant);
	return 0;
}

void chat_render_free(struct chat_render *r)
{
	free(r->text);
	free(r->assistant);
	free(r->anchor_pos);
	free(r->anchor_msg);
	memset(r, 0, sizeof *r);
}

/* ---- tokens back to bytes ------------------------------------------------ */

/* GPT-2's byte-level alphabet, backwards: code point -> byte, -1 if none */
static int byte_of(unsigned cp)
{
	if ((cp >= 0x21 && cp <= 0x7e) || (cp >= 0xa1 && cp <= 0xac) || (cp >= 0xae && cp <= 0xff))
		return (int)cp;
	if (cp >= 256 && cp < 256 + 68) {
		/* the bytes outside the ranges above, in order, take 256.. */
		int k = (int)cp - 256;
		for (int b = 0; b < 256; b++) {
			int printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
			if (!printable && k-- == 0)
				return b;
		}
	}
	return -1;
}

/* The bytes of one token into buf (grown as needed); its length. */
static size_t token_bytes(const struct tokenizer *tok, int id, char **buf, size_t *cap)
{
	const char *s = tokenizer_id_token(tok, id);
	size_t n = s ? strlen(s) : 0, k = 0;

	if (*cap < n + 1) {
		*cap = n + 64;
		*buf = xrealloc(*buf, *cap);
	}
	if (s == NULL)
		return 0;
	if (!tokenizer_is_special(tok, id)) {
		for (size_t i = 0; i < n;) {
			unsigned char c = (unsigned char)s[i];
			unsigned cp;
			size_t len = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
			cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
			for (size_t j = 1; j < len && i + j < n; j++)
				cp = cp << 6 | ((unsigned char)s[i + j] & 0x3f);
			int b = byte_of(cp);
			if (b < 0) { /* not byte-level: an added token, as written */
				k = 0;
				break;
			}
			(*buf)[k++] = (char)b;
			i += len;
		}
		if (k > 0)
			return k;
	}
	memcpy(*buf, s, n);
	return n;
}

int chat_supervised(uint8_t *sup, const struct tokenizer *tok, const int32_t *ids, size_t n,
		    const struct chat_render *r, char *err, size_t errsz)
{
	size_t *start = xmalloc((n + 1) * sizeof *start), cap = 0, at = 0, a = 0;
	int *owner = xcalloc(n ? n : 1, sizeof *owner);
	char *buf = NULL;

	for (size_t i = 0; i < n; i++) {
		size_t len = token_bytes(tok, ids[i], &buf, &cap);
		if (at + len > r->len || memcmp(r->text + at, buf, len) != 0) {
			set_error(err, errsz, "token %zu (id %d) does not match the rendered text at byte %zu", i, ids[i], at);
			free(start);
			free(owner);
			free(buf);
			return -1;
		}
		start[i] = at;
		for (size_t k = at; k < at + len; k++)
			if (r->assistant[k])
				owner[i] = r->assistant[k];
		at += len;
	}
	start[n] = at;
	free(buf);
	if (at != r->len) {
		set_error(err, errsz, "the tokens spell %zu of the %zu bytes of the rendered text", at, r->len);
		free(start);
		free(owner);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		sup[i] = owner[i] != 0;
		/* the end of a turn: the special token right after a content */
		if (i > 0 && owner[i - 1] && owner[i] != owner[i - 1] && tokenizer_is_special(tok, ids[i]))
			sup[i] = 1;
	}
	/* an empty content: the special token that starts where it stood */
	for (size_t i = 0; i < n && a < r->n_anchor; i++) {
		while (a < r->n_anchor && r->anchor_pos[a] < start[i])
			a++;
		if (a < r->n_anchor && r->anchor_pos[a] == start[i] && tokenizer_is_special(tok, ids[i]) &&
		    (i == 0 || owner[i - 1] == 0))
			sup[i] = 1;
	}
	free(start);
	free(owner);
	return 0;
}
