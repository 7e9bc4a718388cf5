/* tools/lib/text/tokenizer_load.c: a tokenizer.json read and checked into a
 * struct tokenizer: added tokens, normalizer, pre-tokenizer (its regexes
 * compiled for PCRE2 as Oniguruma reads them), post-processor and decoder
 * (the model is tokenizer_bpe.c's); the files beside it; the queries; and
 * where a model id's tokenizer lives (tokenizer_resolve). */
#include "tokenizer_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "util/util.h"

/* ---- loading ------------------------------------------------------------- */

/* HF's regexes run in Oniguruma, where \s is Unicode white space (U+0009-000D,
 * U+0085, Z*).  PCRE2's \s also takes U+180E, so \s and \S are spelled out.
 * \S inside a class has no such spelling and is refused. */
#define ONIG_SPACE "\\x{9}-\\x{d}\\x{85}\\p{Z}"

static char *rewrite_space_classes(const char *pat, char *err, size_t errsz)
{
	size_t n = strlen(pat), o = 0;
	char *out = xmalloc(n * 24 + 1);
	int in_class = 0;

	for (size_t i = 0; i < n;) {
		char c = pat[i];
		if (c == '\\' && i + 1 < n) {
			char e = pat[i + 1];
			if (e == 'Q') { /* literal up to \E */
				const char *end = strstr(pat + i + 2, "\\E");
				size_t stop = end ? (size_t)(end - pat) + 2 : n;
				memcpy(out + o, pat + i, stop - i);
				o += stop - i;
				i = stop;
				continue;
			}
			if (e == 's') {
				o += (size_t)sprintf(out + o, in_class ? "%s" : "[%s]", ONIG_SPACE);
			} else if (e == 'S') {
				if (in_class) {
					set_error(err, errsz, "\\S inside a character class is not supported");
					free(out);
					return NULL;
				}
				o += (size_t)sprintf(out + o, "[^%s]", ONIG_SPACE);
			} else {
				out[o++] = c;
				out[o++] = e;
			}
			i += 2;
			continue;
		}
		if (c == '[' && !in_class) {
			in_class = 1;
			out[o++] = pat[i++];
			if (i < n && pat[i] == '^')
				out[o++] = pat[i++];
			if (i < n && pat[i] == ']') /* a literal ']' first in a class */
				out[o++] = pat[i++];
			continue;
		}
		if (c == '[' && in_class && i + 1 < n && pat[i + 1] == ':') { /* [:alpha:] */
			const char *end = strstr(pat + i + 2, ":]");
			size_t stop = end ? (size_t)(end - pat) + 2 : i + 1;
			memcpy(out + o, pat + i, stop - i);
			o += stop - i;
			i = stop;
			continue;
		}
		if (c == ']' && in_class)
			in_class = 0;
		out[o++] = pat[i++];
	}
	out[o] = '\0';
	return out;
}

static pcre2_code *compile_regex(const char *pat, int literal, char *err, size_t errsz)
{
	int ec;
	PCRE2_SIZE eoff;
	char *rewritten = NULL;
	pcre2_code *re;

	if (!literal) {
		rewritten = rewrite_space_classes(pat, err, errsz);
		if (rewritten == NULL)
			return NULL;
	}
	/* UCP gives classes their Unicode meaning; a literal has none, and PCRE2
	 * refuses UCP beside LITERAL */
	re = pcre2_compile((PCRE2_SPTR)(literal ? pat : rewritten), PCRE2_ZERO_TERMINATED,
			   PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP), &ec, &eoff, NULL);
	free(rewritten);
	if (re == NULL) {
		PCRE2_UCHAR msg[160];
		pcre2_get_error_message(ec, msg, sizeof msg);
		set_error(err, errsz, "regex does not compile: %s", (char *)msg);
		return NULL;
	}
	/* JIT is a speed-up only: without it pcre2_match interprets. */
	(void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	return re;
}

static const char GPT2_PATTERN[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef int (*step_loader)(struct tokenizer *t, const cJSON *node, char *err, size_t errsz);

/* The part of a normalizer's or pre-tokenizer's (what) node both share:
 * none (absent or null), or a "Sequence" of them under list_key, each
 * through load, is 0 with *type NULL; a step of its own *type (n_steps
 * taken so far) is 0 for the caller to load; -1 after an error. */
static int load_step(struct tokenizer *t, const cJSON *node, const char *what, const char *list_key,
		     step_loader load, int n_steps, const char **type, char *err, size_t errsz)
{
	*type = NULL;
	if (node == NULL || cJSON_IsNull(node))
		return 0;
	*type = json_type_str(node, "type");
	if (*type == NULL)
		return set_error(err, errsz, "%s: no \"type\"", what);
	if (strcmp(*type, "Sequence") == 0) {
		const cJSON *list = cJSON_GetObjectItemCaseSensitive(node, list_key), *item;
		*type = NULL;
		if (!cJSON_IsArray(list))
			return set_error(err, errsz, "%s: Sequence without a \"%s\" array", what, list_key);
		cJSON_ArrayForEach(item, list)
			if (load(t, item, err, errsz) < 0)
				return -1;
		return 0;
	}
	if (n_steps == MAX_STEPS)
		return set_error(err, errsz, "%s: more than %d steps", what, MAX_STEPS);
	return 0;
}

static int load_normalizer(struct tokenizer *t, const cJSON *n, char *err, size_t errsz)
{
	const char *type;

	if (load_step(t, n, "normalizer", "normalizers", load_normalizer, t->n_norm, &type, err, errsz) < 0)
		return -1;
	if (type == NULL)
		return 0;
	if (strcmp(type, "NFC") == 0)
		t->norm[t->n_norm++] = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
	else if (strcmp(type, "NFD") == 0)
		t->norm[t->n_norm++] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
	else if (strcmp(type, "NFKC") == 0)
		t->norm[t->n_norm++] = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
	else if (strcmp(type, "NFKD") == 0)
		t->norm[t->n_norm++] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
	else {
		set_error(err, errsz, "normalizer \"%s\" is not supported (supported: NFC, NFD, NFKC, NFKD, Sequence)", type);
		return -1;
	}
	return 0;
}

static const char *const SPLIT_BEHAVIORS[] = {
	[SPLIT_ISOLATED] = "Isolated",
	[SPLIT_REMOVED] = "Removed",
	[SPLIT_MERGED_WITH_PREVIOUS] = "MergedWithPrevious",
	[SPLIT_MERGED_WITH_NEXT] = "MergedWithNext",
	[SPLIT_CONTIGUOUS] = "Contiguous",
};

/* A Split step: its pattern, a regex or a literal string (HF escapes
 * the string into a regex, so it matches itself, leftmost first). */
static int load_split(struct pre_step *s, const cJSON *p, char *err, size_t errsz)
{
	const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
	const char *behavior = json_type_str(p, "behavior");
	const char *rx = json_type_str(pat, "Regex"), *lit = json_type_str(pat, "String");
	size_t b, n_behaviors = sizeof SPLIT_BEHAVIORS / sizeof SPLIT_BEHAVIORS[0];
	char why[256];

	if (rx == NULL && lit == NULL)
		return set_error(err, errsz, "pre_tokenizer Split: \"pattern\" is neither {\"Regex\": ...} nor {\"String\": ...}");
	if (lit != NULL && lit[0] == '\0')
		return set_error(err, errsz, "pre_tokenizer Split: an empty \"String\" pattern is not supported");
	for (b = 0; b < n_behaviors; b++)
		if (behavior != NULL && strcmp(behavior, SPLIT_BEHAVIORS[b]) == 0)
			break;
	if (b == n_behaviors)
		return set_error(err, errsz,
				 "pre_tokenizer Split: behavior \"%s\" is not supported (supported: Isolated, Removed, "
				 "MergedWithPrevious, MergedWithNext, Contiguous)",
				 behavior ? behavior : "(none)");
	s->kind = PRE_SPLIT;
	s->behavior = (enum split_behavior)b;
	s->invert = json_flag(p, "invert");
	s->re = compile_regex(rx ? rx : lit, rx == NULL, why, sizeof why);
	if (s->re == NULL)
		return set_error(err, errsz, "pre_tokenizer Split: %s", why);
	return 0;
}

static int load_pre_tokenizer(struct tokenizer *t, const cJSON *p, char *err, size_t errsz)
{
	const char *type;
	struct pre_step *s;

	if (load_step(t, p, "pre_tokenizer", "pretokenizers", load_pre_tokenizer, t->n_pre, &type, err, errsz) < 0)
		return -1;
	if (type == NULL)
		return 0;
	s = &t->pre[t->n_pre];
	memset(s, 0, sizeof *s);
	if (strcmp(type, "Split") == 0) {
		if (load_split(s, p, err, errsz) < 0)
			return -1;
	} else if (strcmp(type, "ByteLevel") == 0) {
		char why[256];
		s->kind = PRE_BYTELEVEL;
		s->add_prefix_space = json_flag(p, "add_prefix_space");
		/* use_regex defaults to true in HF */
		const cJSON *ur = cJSON_GetObjectItemCaseSensitive(p, "use_regex");
		if (ur == NULL || cJSON_IsTrue(ur)) {
			s->re = compile_regex(GPT2_PATTERN, 0, why, sizeof why);
			if (s->re == NULL) {
				set_error(err, errsz, "pre_tokenizer ByteLevel: %s", why);
				return -1;
			}
		}
	} else {
		set_error(err, errsz, "pre_tokenizer \"%s\" is not supported (supported: Split, ByteLevel, Sequence)", type);
		return -1;
	}
	t->n_pre++;
	return 0;
}

static int token_text_id(const struct tokenizer *t, const char *s);

static int load_post_processor(struct tokenizer *t, const cJSON *p, char *err, size_t errsz)
{
	const char *type;

	if (p == NULL || cJSON_IsNull(p))
		return 0;
	type = json_type_str(p, "type");
	if (type == NULL) {
		set_error(err, errsz, "post_processor: no \"type\"");
		return -1;
	}
	if (strcmp(type, "ByteLevel") == 0) /* only trims offsets: ids unchanged */
		return 0;
	if (strcmp(type, "Sequence") == 0) {
		const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "processors"), *item;
		cJSON_ArrayForEach(item, list)
			if (load_post_processor(t, item, err, errsz) < 0)
				return -1;
		return 0;
	}
	if (strcmp(type, "TemplateProcessing") == 0) {
		const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single"), *piece;
		const cJSON *specials = cJSON_GetObjectItemCaseSensitive(p, "special_tokens");
		int seen_seq = 0;
		if (!cJSON_IsArray(single)) {
			set_error(err, errsz, "post_processor TemplateProcessing: no \"single\" array");
			return -1;
		}
		t->n_tmpl_pre = t->n_tmpl_post = 0;
		cJSON_ArrayForEach(piece, single) {
			const cJSON *sp = cJSON_GetObjectItemCaseSensitive(piece, "SpecialToken");
			if (cJSON_GetObjectItemCaseSensitive(piece, "Sequence")) {
				seen_seq = 1;
				continue;
			}
			const char *name = json_type_str(sp, "id");
			const cJSON *entry = name ? cJSON_GetObjectItemCaseSensitive(specials, name) : NULL;
			const cJSON *ids = cJSON_GetObjectItemCaseSensitive(entry, "ids"), *idv;
			if (name == NULL || !cJSON_IsArray(ids)) {
				set_error(err, errsz, "post_processor TemplateProcessing: special token %s has no \"ids\"",
				       name ? name : "(unnamed)");
				return -1;
			}
			cJSON_ArrayForEach(idv, ids) {
				int *n = seen_seq ? &t->n_tmpl_post : &t->n_tmpl_pre;
				int32_t *dst = seen_seq ? t->tmpl_post : t->tmpl_pre;
				if (!cJSON_IsNumber(idv) || idv->valuedouble < 0 || idv->valuedouble >= INT32_MAX) {
					set_error(err, errsz, "post_processor TemplateProcessing: %s: bad id", name);
					return -1;
				}
				if (*n == MAX_TEMPLATE) {
					set_error(err, errsz, "post_processor TemplateProcessing: more than %d special ids", MAX_TEMPLATE);
					return -1;
				}
				dst[(*n)++] = (int32_t)idv->valuedouble;
			}
		}
		return 0;
	}
	set_error(err, errsz, "post_processor \"%s\" is not supported (supported: ByteLevel, TemplateProcessing, Sequence)",
	       type);
	return -1;
}

static int load_decoder(struct tokenizer *t, const cJSON *d, char *err, size_t errsz)
{
	const char *type;

	if (d == NULL || cJSON_IsNull(d))
		return 0;
	type = json_type_str(d, "type");
	if (type != NULL && strcmp(type, "ByteLevel") == 0) {
		t->decoder_bytelevel = 1;
		return 0;
	}
	set_error(err, errsz, "decoder \"%s\" is not supported (supported: ByteLevel)", type ? type : "(no type)");
	return -1;
}

static void added_set_build(struct tokenizer *t, struct added_set *set, int normalized)
{
	memset(set, 0, sizeof *set);
	for (int i = 0; i < t->n_added; i++) {
		const struct added_token *a = &t->added[i];
		if (a->normalized != normalized || a->len == 0)
			continue;
		unsigned char f = (unsigned char)a->content[0];
		set->by_first[f] = xrealloc(set->by_first[f], (size_t)(set->n_first[f] + 1) * sizeof(int));
		set->by_first[f][set->n_first[f]++] = i;
		set->any = 1;
	}
	/* longest first, so the first hit at a position is the longest */
	for (int f = 0; f < 256; f++) {
		int *v = set->by_first[f];
		for (int i = 1; i < set->n_first[f]; i++)
			for (int j = i; j > 0 && t->added[v[j]].len > t->added[v[j - 1]].len; j--) {
				int tmp = v[j];
				v[j] = v[j - 1];
				v[j - 1] = tmp;
			}
	}
}

static int load_added_tokens(struct tokenizer *t, const cJSON *list, char *err, size_t errsz)
{
	const cJSON *e;
	int i = 0;

	if (list == NULL || cJSON_IsNull(list))
		return 0;
	if (!cJSON_IsArray(list)) {
		set_error(err, errsz, "added_tokens: not an array");
		return -1;
	}
	t->added = xcalloc((size_t)cJSON_GetArraySize(list) + 1, sizeof *t->added);
	cJSON_ArrayForEach(e, list) {
		const char *content = json_type_str(e, "content");
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
		struct added_token *a = &t->added[t->n_added];
		if (content == NULL || !cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= INT32_MAX / 2) {
			set_error(err, errsz, "added_tokens[%d]: needs \"content\" and a non-negative \"id\"", i);
			return -1;
		}
		if (json_flag(e, "single_word")) {
			set_error(err, errsz, "added_tokens[%d] \"%s\": single_word is not supported", i, content);
			return -1;
		}
		if (utf8_valid_prefix(content, strlen(content)) != strlen(content)) {
			set_error(err, errsz, "added_tokens[%d]: content is not valid UTF-8", i);
			return -1;
		}
		a->content = xstrdup(content);
		a->len = strlen(content);
		a->id = (int32_t)id->valuedouble;
		a->special = json_flag(e, "special");
		a->lstrip = json_flag(e, "lstrip");
		a->rstrip = json_flag(e, "rstrip");
		a->normalized = json_flag(e, "normalized");
		t->n_added++;
		i++;
	}
	return 0;
}

static int max_added_id(const struct tokenizer *t)
{
	int m = -1;

	for (int i = 0; i < t->n_added; i++)
		if (t->added[i].id > m)
			m = t->added[i].id;
	return m;
}

/* 0: a regular file at path; 1: nothing there; -1: something else (a
 * FIFO, a directory, a dangling link, unreadable), err naming it.  Opened
 * with O_NONBLOCK: a FIFO is refused, never waited on. */
static int check_regular(const char *path, char *err, size_t errsz)
{
	struct stat lst, st;
	int fd;

	if (lstat(path, &lst) < 0) {
		if (errno == ENOENT)
			return 1;
		return set_error(err, errsz, "%s: %s", path, strerror(errno)), -1;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ENOENT && S_ISLNK(lst.st_mode))
			return set_error(err, errsz, "%s: a dangling symbolic link (an interrupted download?)", path), -1;
		return set_error(err, errsz, "%s: %s", path, strerror(errno)), -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return set_error(err, errsz, "%s: not a regular file", path), -1;
	}
	close(fd);
	return 0;
}

/* The files read beside a tokenizer.json, by this file (eos_token) and by
 * chat_template.c: each is absent or a regular file, so that no later read
 * of them blocks on a FIFO. */
static int check_beside(const char *tokenizer_json, char *err, size_t errsz)
{
	static const char *const names[] = { "tokenizer_config.json", "chat_template.jinja" };
	const char *slash = strrchr(tokenizer_json, '/');

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		char *p = slash ? xasprintf("%.*s/%s", (int)(slash - tokenizer_json), tokenizer_json, names[i])
				: xstrdup(names[i]);
		int rc = check_regular(p, err, errsz);

		free(p);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* eos_token of a tokenizer_config.json beside the tokenizer: a string or
 * {"content": ...}.  Absent or unknown: -1. */
static int32_t eos_from_config(const struct tokenizer *t, const char *tokenizer_json)
{
	char *dir = xstrdup(tokenizer_json), *slash = strrchr(dir, '/'), *cfgpath;
	char why[256];
	cJSON *cfg;
	int32_t id = -1;

	if (slash)
		slash[1] = '\0';
	cfgpath = xasprintf("%stokenizer_config.json", slash ? dir : "");
	free(dir);
	if (access(cfgpath, R_OK) != 0) {
		free(cfgpath);
		return -1;
	}
	cfg = json_read_file(cfgpath, why, sizeof why);
	free(cfgpath);
	if (cfg == NULL)
		return -1;
	const cJSON *eos = cJSON_GetObjectItemCaseSensitive(cfg, "eos_token");
	const char *name = cJSON_IsString(eos) ? eos->valuestring : json_type_str(eos, "content");
	if (name)
		id = token_text_id(t, name);
	cJSON_Delete(cfg);
	return id;
}

/* A GGUF file, by its magic: its tokenizer is read from its metadata. */
static int is_gguf(const char *path)
{
	char magic[4];
	FILE *f = fopen(path, "rb");
	int yes = f != NULL && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;

	if (f != NULL)
		fclose(f);
	return yes;
}

int tokenizer_load(struct tokenizer **out, const char *path, char *err, size_t errsz)
{
	struct stat st;
	char *file, why[512];
	cJSON *root;
	struct tokenizer *t;
	int32_t gguf_eos = -1;
	int gguf = 0;

	*out = NULL;
	byte_map_init();
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		file = xasprintf("%s/tokenizer.json", path);
	else
		file = xstrdup(path);
	/* regular first: opening a FIFO to read its magic would wait */
	if (check_regular(file, err, errsz) < 0 || (!(gguf = is_gguf(file)) && check_beside(file, err, errsz) < 0)) {
		free(file);
		return -1;
	}
	if (gguf) {
		if ((root = tokenizer_json_from_gguf(file, &gguf_eos, err, errsz)) == NULL) {
			free(file);
			return -1;
		}
	} else {
		root = json_read_file(file, why, sizeof why);
	}
	if (root == NULL) {
		if (access(file, F_OK) != 0)
			set_error(err, errsz, "%s: %s", file, strerror(errno));
		else
			set_error(err, errsz, "%s", why);
		free(file);
		return -1;
	}
	t = xcalloc(1, sizeof *t);
	t->path = file;
	t->eos_id = -1;
	if (!cJSON_IsObject(root) || !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "model"))) {
		set_error(why, sizeof why, "not a tokenizer.json (no \"model\" object)");
		goto fail;
	}
	if (load_added_tokens(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), why, sizeof why) < 0 ||
	    bpe_load_model(t, cJSON_GetObjectItemCaseSensitive(root, "model"), max_added_id(t), why, sizeof why) < 0 ||
	    load_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), why, sizeof why) < 0 ||
	    load_pre_tokenizer(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), why, sizeof why) < 0 ||
	    load_post_processor(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), why, sizeof why) < 0 ||
	    load_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), why, sizeof why) < 0)
		goto fail;
	for (int i = 0; i < t->n_added; i++) {
		struct added_token *a = &t->added[i];
		set_id_token(t, a->id, a->content);
		t->id_special[a->id] = (unsigned char)a->special;
		if (a->normalized && t->n_norm > 0) {
			/* matched against normalized text, so normalized too; HF
			 * then also decodes the token as its normalized text */
			size_t nl;
			char *nc = normalize_alloc(t, a->content, a->len, &nl);
			free(a->content);
			a->content = nc;
			a->len = nl;
			set_id_token(t, a->id, a->content);
		}
	}
	for (int i = 0; i < t->n_tmpl_pre + t->n_tmpl_post; i++) {
		int32_t id = i < t->n_tmpl_pre ? t->tmpl_pre[i] : t->tmpl_post[i - t->n_tmpl_pre];
		if (id >= t->n_ids) {
			set_error(why, sizeof why, "post_processor: special id %d is beyond the vocabulary (%d)", id, t->n_ids);
			goto fail;
		}
		/* a gap in the ids: encode would emit a token that decode cannot name */
		if (t->id_token[id] == NULL) {
			set_error(why, sizeof why, "post_processor: special id %d names no token of the vocabulary", id);
			goto fail;
		}
	}
	if (t->n_norm > 0)
		build_inert_bmp(t);
	added_set_build(t, &t->raw_set, 0);
	added_set_build(t, &t->norm_set, 1);
	t->eos_id = gguf ? gguf_eos : eos_from_config(t, file);
	cJSON_Delete(root);
	*out = t;
	return 0;
fail:
	set_error(err, errsz, "%s: %s", file, why);
	cJSON_Delete(root);
	tokenizer_free(t);
	return -1;
}

void tokenizer_free(struct tokenizer *t)
{
	if (t == NULL)
		return;
	bpe_free_model(t);
	if (t->id_token)
		for (int i = 0; i < t->n_ids; i++)
			free(t->id_token[i]);
	free(t->id_token);
	free(t->id_special);
	free(t->inert_bmp);
	for (int i = 0; i < t->n_pre; i++)
		pcre2_code_free(t->pre[i].re);
	for (int i = 0; i < t->n_added; i++)
		free(t->added[i].content);
	free(t->added);
	for (int f = 0; f < 256; f++) {
		free(t->raw_set.by_first[f]);
		free(t->norm_set.by_first[f]);
	}
	free(t->path);
	free(t);
}

/* ---- queries ------------------------------------------------------------- */

int tokenizer_vocab_size(const struct tokenizer *t) { return t->n_ids; }
const char *tokenizer_path(const struct tokenizer *t) { return t->path; }
int tokenizer_eos_id(const struct tokenizer *t) { return t->eos_id; }

static int token_text_id(const struct tokenizer *t, const char *s)
{
	for (int i = 0; i < t->n_added; i++)
		if (strcmp(t->id_token[t->added[i].id], s) == 0)
			return t->added[i].id;
	return vocab_lookup(t, s, strlen(s));
}

int tokenizer_token_id(const struct tokenizer *t, const char *token) { return token_text_id(t, token); }

const char *tokenizer_id_token(const struct tokenizer *t, int id)
{
	return id >= 0 && id < t->n_ids ? t->id_token[id] : NULL;
}

int tokenizer_is_special(const struct tokenizer *t, int id)
{
	return id >= 0 && id < t->n_ids && t->id_special[id];
}

/* ---- where tokenizers and datasets live ---------------------------------- */

int tokenizer_resolve(struct tokenizer **out, const char *model_id, char *err, size_t errsz)
{
	struct stat st;
	char why[512], *snap, *file;
	int rc;

	*out = NULL;
	if (stat(model_id, &st) == 0)
		return tokenizer_load(out, model_id, err, errsz);
	snap = hf_cache_find("model", model_id, why, sizeof why);
	if (snap == NULL) {
		set_error(err, errsz, "no tokenizer for \"%s\": not a local path, and not in the HF cache (%s)", model_id, why);
		return -1;
	}
	file = xasprintf("%s/tokenizer.json", snap);
	free(snap);
	if (access(file, R_OK) != 0) {
		set_error(err, errsz, "no tokenizer for \"%s\": %s: %s", model_id, file, strerror(errno));
		free(file);
		return -1;
	}
	rc = tokenizer_load(out, file, err, errsz);
	free(file);
	return rc;
}
