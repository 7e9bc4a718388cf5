/* tools/lib/tokenizer.c: HF tokenizer.json (byte-level BPE) encode/decode.
 *
 * The pipeline is HF's, step for step: added tokens are split out of the raw
 * text (leftmost-longest), each remaining segment is normalized, split again
 * on "normalized" added tokens, pre-tokenized (regex Split, ByteLevel), and
 * each pre-token ("word") is BPE-merged by rank with a heap, as HF's
 * Word::merge_all does, so ties resolve the same way. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"
#include "hf_cache.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#include "jsonl.h"
#include "util.h"

#define MAX_STEPS 8            /* normalizers / pre-tokenizers in a Sequence */
#define MAX_TEMPLATE 16        /* special ids around $A in a TemplateProcessing */
#define CACHE_MAX_WORD 256     /* longer words are not cached: rare, and they would crowd the cache */
#define CACHE_MAX_ENTRIES (1u << 19)
#define CACHE_MAX_BYTES (64u << 20)

/* ---- hashing ------------------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

/* Eight bytes at a time: words are short, and this sits on the hot path. */
static uint64_t hash_bytes(const void *data, size_t n)
{
	const unsigned char *p = data;
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ (n * 0x100000001b3ULL);
	uint64_t w;

	while (n >= 8) {
		memcpy(&w, p, 8);
		h = mix64(h ^ w) + 0x9e3779b97f4a7c15ULL;
		p += 8;
		n -= 8;
	}
	w = 0;
	memcpy(&w, p, n);
	return mix64(h ^ w ^ ((uint64_t)n << 56));
}

/* ---- string -> int map (the vocabulary) --------------------------------- */

struct str_slot {
	uint64_t hash;
	uint32_t off, len;
	int32_t val; /* -1: empty slot */
};

struct strmap {
	struct str_slot *slots;
	size_t mask, count;
	char *arena;
	size_t arena_len, arena_cap;
};

static void strmap_init(struct strmap *m, size_t expect)
{
	size_t cap = 64;

	while (cap < expect * 2)
		cap <<= 1;
	m->slots = xmalloc(cap * sizeof *m->slots);
	for (size_t i = 0; i < cap; i++)
		m->slots[i].val = -1;
	m->mask = cap - 1;
	m->count = 0;
	m->arena = NULL;
	m->arena_len = m->arena_cap = 0;
}

static void strmap_free(struct strmap *m)
{
	free(m->slots);
	free(m->arena);
	memset(m, 0, sizeof *m);
}

static int32_t strmap_get(const struct strmap *m, const char *s, size_t n)
{
	uint64_t h = hash_bytes(s, n);

	for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
		const struct str_slot *e = &m->slots[i];
		if (e->val < 0)
			return -1;
		if (e->hash == h && e->len == n && memcmp(m->arena + e->off, s, n) == 0)
			return e->val;
	}
}

static void strmap_grow(struct strmap *m)
{
	size_t cap = (m->mask + 1) * 2;
	struct str_slot *old = m->slots;
	size_t oldcap = m->mask + 1;

	m->slots = xmalloc(cap * sizeof *m->slots);
	for (size_t i = 0; i < cap; i++)
		m->slots[i].val = -1;
	m->mask = cap - 1;
	for (size_t j = 0; j < oldcap; j++) {
		if (old[j].val < 0)
			continue;
		size_t i = old[j].hash & m->mask;
		while (m->slots[i].val >= 0)
			i = (i + 1) & m->mask;
		m->slots[i] = old[j];
	}
	free(old);
}

/* Inserts, or overwrites the value of an existing key. */
static void strmap_put(struct strmap *m, const char *s, size_t n, int32_t val)
{
	uint64_t h = hash_bytes(s, n);
	size_t i;

	if ((m->count + 1) * 2 > m->mask + 1)
		strmap_grow(m);
	for (i = h & m->mask; m->slots[i].val >= 0; i = (i + 1) & m->mask) {
		struct str_slot *e = &m->slots[i];
		if (e->hash == h && e->len == n && memcmp(m->arena + e->off, s, n) == 0) {
			e->val = val;
			return;
		}
	}
	if (m->arena_len + n + 1 > m->arena_cap) {
		m->arena_cap = (m->arena_len + n + 1) * 2;
		m->arena = xrealloc(m->arena, m->arena_cap);
	}
	memcpy(m->arena + m->arena_len, s, n);
	m->arena[m->arena_len + n] = '\0';
	m->slots[i] = (struct str_slot){ h, (uint32_t)m->arena_len, (uint32_t)n, val };
	m->arena_len += n + 1;
	m->count++;
}

/* ---- (left id, right id) -> (rank, merged id) --------------------------- */

struct pair_slot {
	uint64_t key; /* left << 32 | right; UINT64_MAX: empty */
	int32_t rank, new_id;
};

struct pairmap {
	struct pair_slot *slots;
	size_t mask, count;
};

static void pairmap_init(struct pairmap *m, size_t expect)
{
	size_t cap = 64;

	while (cap < expect * 2)
		cap <<= 1;
	m->slots = xmalloc(cap * sizeof *m->slots);
	for (size_t i = 0; i < cap; i++)
		m->slots[i].key = UINT64_MAX;
	m->mask = cap - 1;
	m->count = 0;
}

static inline uint64_t pair_key(int32_t a, int32_t b)
{
	return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

static inline const struct pair_slot *pairmap_get(const struct pairmap *m, int32_t a, int32_t b)
{
	uint64_t k = pair_key(a, b);

	for (size_t i = mix64(k) & m->mask;; i = (i + 1) & m->mask) {
		const struct pair_slot *e = &m->slots[i];
		if (e->key == k)
			return e;
		if (e->key == UINT64_MAX)
			return NULL;
	}
}

/* A pair listed twice keeps its last rank: HF collects the merges into a
 * map in list order, so the later entry overwrites the earlier. */
static void pairmap_put(struct pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t new_id)
{
	uint64_t k = pair_key(a, b);
	size_t i;

	for (i = mix64(k) & m->mask; m->slots[i].key != UINT64_MAX; i = (i + 1) & m->mask)
		if (m->slots[i].key == k)
			break;
	if (m->slots[i].key == UINT64_MAX)
		m->count++;
	m->slots[i] = (struct pair_slot){ k, rank, new_id };
}

/* ---- UTF-8 and GPT-2's byte <-> character map ----------------------------- */


static int utf8_encode(uint32_t cp, char *out)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* Decodes one code point of valid UTF-8; returns its length. */
static int utf8_decode(const unsigned char *s, uint32_t *cp)
{
	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if (s[0] < 0xe0) {
		*cp = (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
		return 2;
	}
	if (s[0] < 0xf0) {
		*cp = (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
		return 3;
	}
	*cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 | (uint32_t)(s[2] & 0x3f) << 6 |
	      (s[3] & 0x3f);
	return 4;
}

/* Unicode's White_Space property (Rust's char::is_whitespace), for lstrip/rstrip. */
static int is_white_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
	       c == 0x3000;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes, in order, for U+0100 onwards. */
static uint32_t byte_cp[256];
static int16_t cp_byte[324]; /* inverse, -1 where no byte maps */
static char byte_utf8[256][3];
static unsigned char byte_utf8_len[256];

static void byte_map_build(void)
{
	uint32_t next = 256;

	for (int i = 0; i < 324; i++)
		cp_byte[i] = -1;
	for (int b = 0; b < 256; b++) {
		int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
		byte_cp[b] = printable ? (uint32_t)b : next++;
		cp_byte[byte_cp[b]] = (int16_t)b;
		byte_utf8_len[b] = (unsigned char)utf8_encode(byte_cp[b], byte_utf8[b]);
	}
}

static void byte_map_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, byte_map_build);
}

/* ---- the tokenizer ------------------------------------------------------- */

enum pre_kind { PRE_SPLIT, PRE_BYTELEVEL };

struct pre_step {
	enum pre_kind kind;
	pcre2_code *re;       /* Split's pattern; ByteLevel's GPT-2 pattern when use_regex */
	int removed;          /* Split behavior Removed: matches are dropped */
	int add_prefix_space; /* ByteLevel */
};

struct added_token {
	char *content; /* as matched: normalized first when "normalized" */
	size_t len;
	int32_t id;
	int special, lstrip, rstrip, normalized;
};

/* Added tokens indexed by first byte, longest first, for leftmost-longest. */
struct added_set {
	int *by_first[256];
	int n_first[256];
	int any;
};

struct tokenizer {
	char *path;
	struct strmap vocab;      /* the model's vocabulary */
	char **id_token;          /* id -> token text (added tokens included) */
	unsigned char *id_special;
	int n_ids;
	struct pairmap merges;
	int32_t byte_id[256];     /* id of each byte's character, -1 if not in the vocab */
	int32_t unk_id;
	int fuse_unk, ignore_merges;
	utf8proc_option_t norm[MAX_STEPS];
	int n_norm;
	unsigned char *inert_bmp; /* bit per BMP code point: no normalizer here changes it or its neighbours */
	struct pre_step pre[MAX_STEPS];
	int n_pre;
	struct added_token *added;
	int n_added;
	struct added_set raw_set, norm_set;
	int32_t tmpl_pre[MAX_TEMPLATE], tmpl_post[MAX_TEMPLATE];
	int n_tmpl_pre, n_tmpl_post;
	int decoder_bytelevel;    /* else HF's no-decoder behaviour: tokens joined by " " */
	int32_t eos_id;
};

/* Scratch for one encoding thread. */
struct cache_slot {
	uint64_t hash;
	uint32_t key_off, key_len, ids_off, ids_n; /* key_len UINT32_MAX: empty */
};

struct bpe_symbol {
	int32_t id, prev, next, len; /* len 0: merged away */
};

struct bpe_merge {
	int32_t rank, pos, new_id;
};

struct tok_workspace {
	const struct tokenizer *tok;
	pcre2_match_data *md;
	pcre2_match_context *mctx;
	pcre2_jit_stack *jit_stack;
	struct bpe_symbol *sym;
	size_t sym_cap;
	struct bpe_merge *heap;
	size_t heap_len, heap_cap;
	char *mapped; /* a word as vocab text, for ignore_merges */
	size_t mapped_cap;
	/* the word -> ids cache */
	struct cache_slot *cache;
	size_t cache_mask, cache_count;
	char *cache_keys;
	size_t cache_keys_len, cache_keys_cap;
	int32_t *cache_ids;
	size_t cache_ids_len, cache_ids_cap;
};

void token_ids_push(struct token_ids *t, int32_t id)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 256;
		t->v = xrealloc(t->v, t->cap * sizeof *t->v);
	}
	t->v[t->n++] = id;
}

static void token_ids_append(struct token_ids *t, const int32_t *ids, size_t n)
{
	if (n == 0)
		return;
	if (t->n + n > t->cap) {
		while (t->n + n > t->cap)
			t->cap = t->cap ? t->cap * 2 : 256;
		t->v = xrealloc(t->v, t->cap * sizeof *t->v);
	}
	memcpy(t->v + t->n, ids, n * sizeof *ids);
	t->n += n;
}

void token_ids_free(struct token_ids *t)
{
	free(t->v);
	t->v = NULL;
	t->n = t->cap = 0;
}

/* ---- loading ------------------------------------------------------------- */

static const char *json_type_str(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int json_flag(const cJSON *obj, const char *key)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(obj, key));
}

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
	re = pcre2_compile((PCRE2_SPTR)(literal ? pat : rewritten), PCRE2_ZERO_TERMINATED,
			   PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0), &ec, &eoff, NULL);
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

static int load_normalizer(struct tokenizer *t, const cJSON *n, char *err, size_t errsz)
{
	const char *type;

	if (n == NULL || cJSON_IsNull(n))
		return 0;
	type = json_type_str(n, "type");
	if (type == NULL) {
		set_error(err, errsz, "normalizer: no \"type\"");
		return -1;
	}
	if (strcmp(type, "Sequence") == 0) {
		const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers"), *item;
		if (!cJSON_IsArray(list)) {
			set_error(err, errsz, "normalizer: Sequence without a \"normalizers\" array");
			return -1;
		}
		cJSON_ArrayForEach(item, list)
			if (load_normalizer(t, item, err, errsz) < 0)
				return -1;
		return 0;
	}
	if (t->n_norm == MAX_STEPS) {
		set_error(err, errsz, "normalizer: more than %d steps", MAX_STEPS);
		return -1;
	}
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

static int load_pre_tokenizer(struct tokenizer *t, const cJSON *p, char *err, size_t errsz)
{
	const char *type;
	struct pre_step *s;

	if (p == NULL || cJSON_IsNull(p))
		return 0;
	type = json_type_str(p, "type");
	if (type == NULL) {
		set_error(err, errsz, "pre_tokenizer: no \"type\"");
		return -1;
	}
	if (strcmp(type, "Sequence") == 0) {
		const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers"), *item;
		if (!cJSON_IsArray(list)) {
			set_error(err, errsz, "pre_tokenizer: Sequence without a \"pretokenizers\" array");
			return -1;
		}
		cJSON_ArrayForEach(item, list)
			if (load_pre_tokenizer(t, item, err, errsz) < 0)
				return -1;
		return 0;
	}
	if (t->n_pre == MAX_STEPS) {
		set_error(err, errsz, "pre_tokenizer: more than %d steps", MAX_STEPS);
		return -1;
	}
	s = &t->pre[t->n_pre];
	memset(s, 0, sizeof *s);
	if (strcmp(type, "Split") == 0) {
		const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
		const char *behavior = json_type_str(p, "behavior");
		const char *rx = json_type_str(pat, "Regex"), *lit = json_type_str(pat, "String");
		char why[256];
		if (rx == NULL && lit == NULL) {
			set_error(err, errsz, "pre_tokenizer Split: \"pattern\" is neither {\"Regex\": ...} nor {\"String\": ...}");
			return -1;
		}
		if (behavior == NULL || (strcmp(behavior, "Isolated") != 0 && strcmp(behavior, "Removed") != 0)) {
			set_error(err, errsz, "pre_tokenizer Split: behavior \"%s\" is not supported (supported: Isolated, Removed)",
			       behavior ? behavior : "(none)");
			return -1;
		}
		if (json_flag(p, "invert")) {
			set_error(err, errsz, "pre_tokenizer Split: \"invert\": true is not supported");
			return -1;
		}
		s->kind = PRE_SPLIT;
		s->removed = strcmp(behavior, "Removed") == 0;
		s->re = compile_regex(rx ? rx : lit, rx == NULL, why, sizeof why);
		if (s->re == NULL) {
			set_error(err, errsz, "pre_tokenizer Split: %s", why);
			return -1;
		}
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

static int32_t vocab_lookup(const struct tokenizer *t, const char *s, size_t n)
{
	return strmap_get(&t->vocab, s, n);
}

static int set_id_token(struct tokenizer *t, int32_t id, const char *s)
{
	if (id < 0 || id >= t->n_ids)
		return -1;
	free(t->id_token[id]);
	t->id_token[id] = xstrdup(s);
	return 0;
}

static int load_model(struct tokenizer *t, const cJSON *m, int max_added_id, char *err, size_t errsz)
{
	const char *type = json_type_str(m, "type");
	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab"), *e;
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
	const cJSON *v;
	int max_id = max_added_id;
	int32_t rank = 0;

	if (type == NULL || strcmp(type, "BPE") != 0) {
		set_error(err, errsz, "model \"%s\" is not supported (supported: BPE)", type ? type : "(no type)");
		return -1;
	}
	v = cJSON_GetObjectItemCaseSensitive(m, "dropout");
	if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0)) {
		set_error(err, errsz, "model: BPE dropout is not supported (it makes encoding random)");
		return -1;
	}
	if (json_flag(m, "byte_fallback")) {
		set_error(err, errsz, "model: byte_fallback (SentencePiece-style BPE) is not supported");
		return -1;
	}
	const char *pfx = json_type_str(m, "continuing_subword_prefix"), *sfx = json_type_str(m, "end_of_word_suffix");
	if ((pfx && *pfx) || (sfx && *sfx)) {
		set_error(err, errsz, "model: continuing_subword_prefix / end_of_word_suffix are not supported");
		return -1;
	}
	t->ignore_merges = json_flag(m, "ignore_merges");
	t->fuse_unk = json_flag(m, "fuse_unk");
	if (!cJSON_IsObject(vocab)) {
		set_error(err, errsz, "model: no \"vocab\" object");
		return -1;
	}
	if (!cJSON_IsArray(merges)) {
		set_error(err, errsz, "model: no \"merges\" array");
		return -1;
	}
	strmap_init(&t->vocab, (size_t)cJSON_GetArraySize(vocab));
	cJSON_ArrayForEach(e, vocab) {
		if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= INT32_MAX / 2 ||
		    e->valuedouble != (double)(int32_t)e->valuedouble) {
			set_error(err, errsz, "model.vocab: \"%s\": id is not a non-negative integer", e->string);
			return -1;
		}
		strmap_put(&t->vocab, e->string, strlen(e->string), (int32_t)e->valuedouble);
		if ((int)e->valuedouble > max_id)
			max_id = (int)e->valuedouble;
	}
	t->n_ids = max_id + 1;
	t->id_token = xcalloc((size_t)t->n_ids, sizeof *t->id_token);
	t->id_special = xcalloc((size_t)t->n_ids, 1);
	cJSON_ArrayForEach(e, vocab)
		set_id_token(t, (int32_t)e->valuedouble, e->string);

	const char *unk = json_type_str(m, "unk_token");
	t->unk_id = unk ? vocab_lookup(t, unk, strlen(unk)) : -1;
	if (unk && t->unk_id < 0) {
		set_error(err, errsz, "model: unk_token \"%s\" is not in the vocabulary", unk);
		return -1;
	}

	pairmap_init(&t->merges, (size_t)cJSON_GetArraySize(merges));
	cJSON_ArrayForEach(e, merges) {
		const char *a, *b;
		size_t la, lb;
		char *joined;
		if (cJSON_IsString(e)) {
			const char *sp = strchr(e->valuestring, ' ');
			if (sp == NULL || strchr(sp + 1, ' ') != NULL) {
				set_error(err, errsz, "model.merges[%d]: \"%s\" is not two tokens separated by one space", rank,
				       e->valuestring);
				return -1;
			}
			a = e->valuestring;
			la = (size_t)(sp - a);
			b = sp + 1;
			lb = strlen(b);
		} else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
			   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
			a = cJSON_GetArrayItem(e, 0)->valuestring;
			b = cJSON_GetArrayItem(e, 1)->valuestring;
			la = strlen(a);
			lb = strlen(b);
		} else {
			set_error(err, errsz, "model.merges[%d]: neither \"a b\" nor [\"a\", \"b\"]", rank);
			return -1;
		}
		int32_t ia = vocab_lookup(t, a, la), ib = vocab_lookup(t, b, lb);
		if (ia < 0 || ib < 0) {
			set_error(err, errsz, "model.merges[%d]: \"%.*s\" is not in the vocabulary", rank,
			       (int)(ia < 0 ? la : lb), ia < 0 ? a : b);
			return -1;
		}
		joined = xmalloc(la + lb + 1);
		memcpy(joined, a, la);
		memcpy(joined + la, b, lb);
		joined[la + lb] = '\0';
		int32_t ij = vocab_lookup(t, joined, la + lb);
		if (ij < 0) {
			set_error(err, errsz, "model.merges[%d]: the merged token \"%s\" is not in the vocabulary", rank, joined);
			free(joined);
			return -1;
		}
		free(joined);
		pairmap_put(&t->merges, ia, ib, rank, ij);
		rank++;
	}
	for (int b = 0; b < 256; b++)
		t->byte_id[b] = vocab_lookup(t, byte_utf8[b], byte_utf8_len[b]);
	return 0;
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

static char *normalize_alloc(const struct tokenizer *t, const char *s, size_t n, size_t *out_len);
static void build_inert_bmp(struct tokenizer *t);

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

int tokenizer_load(struct tokenizer **out, const char *path, char *err, size_t errsz)
{
	struct stat st;
	char *file, why[512];
	cJSON *root;
	struct tokenizer *t;

	*out = NULL;
	byte_map_init();
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		file = xasprintf("%s/tokenizer.json", path);
	else
		file = xstrdup(path);
	if (check_regular(file, err, errsz) < 0 || check_beside(file, err, errsz) < 0) {
		free(file);
		return -1;
	}
	root = json_read_file(file, why, sizeof why);
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
	    load_model(t, cJSON_GetObjectItemCaseSensitive(root, "model"), max_added_id(t), why, sizeof why) < 0 ||
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
	t->eos_id = eos_from_config(t, file);
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
	strmap_free(&t->vocab);
	free(t->merges.slots);
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

/* ---- workspace ----------------------------------------------------------- */

struct tok_workspace *tok_workspace_new(const struct tokenizer *tok)
{
	struct tok_workspace *ws = xcalloc(1, sizeof *ws);

	ws->tok = tok;
	ws->md = pcre2_match_data_create(4, NULL);
	ws->mctx = pcre2_match_context_create(NULL);
	/* Long white-space runs backtrack through \s+(?!\S): give the JIT room. */
	ws->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
	if (ws->md == NULL || ws->mctx == NULL || ws->jit_stack == NULL)
		die(EXIT_RUNTIME, "out of memory");
	pcre2_jit_stack_assign(ws->mctx, NULL, ws->jit_stack);
	ws->cache_mask = 4095;
	ws->cache = xmalloc((ws->cache_mask + 1) * sizeof *ws->cache);
	for (size_t i = 0; i <= ws->cache_mask; i++)
		ws->cache[i].key_len = UINT32_MAX;
	return ws;
}

void tok_workspace_free(struct tok_workspace *ws)
{
	if (ws == NULL)
		return;
	pcre2_match_data_free(ws->md);
	pcre2_match_context_free(ws->mctx);
	pcre2_jit_stack_free(ws->jit_stack);
	free(ws->sym);
	free(ws->heap);
	free(ws->mapped);
	free(ws->cache);
	free(ws->cache_keys);
	free(ws->cache_ids);
	free(ws);
}

static void cache_clear(struct tok_workspace *ws)
{
	for (size_t i = 0; i <= ws->cache_mask; i++)
		ws->cache[i].key_len = UINT32_MAX;
	ws->cache_count = ws->cache_keys_len = ws->cache_ids_len = 0;
}

static const struct cache_slot *cache_get(const struct tok_workspace *ws, const char *w, size_t n, uint64_t h)
{
	for (size_t i = h & ws->cache_mask;; i = (i + 1) & ws->cache_mask) {
		const struct cache_slot *e = &ws->cache[i];
		if (e->key_len == UINT32_MAX)
			return NULL;
		if (e->hash == h && e->key_len == n && memcmp(ws->cache_keys + e->key_off, w, n) == 0)
			return e;
	}
}

static void cache_put(struct tok_workspace *ws, const char *w, size_t n, uint64_t h, const int32_t *ids, size_t nids)
{
	size_t i;

	/* A bounded cache: cleared when full, so memory stays flat on any corpus. */
	if (ws->cache_count >= CACHE_MAX_ENTRIES || ws->cache_keys_len + n > CACHE_MAX_BYTES)
		cache_clear(ws);
	if ((ws->cache_count + 1) * 2 > ws->cache_mask + 1) {
		size_t oldcap = ws->cache_mask + 1;
		struct cache_slot *old = ws->cache;
		ws->cache_mask = oldcap * 2 - 1;
		ws->cache = xmalloc(oldcap * 2 * sizeof *ws->cache);
		for (size_t k = 0; k <= ws->cache_mask; k++)
			ws->cache[k].key_len = UINT32_MAX;
		for (size_t k = 0; k < oldcap; k++) {
			if (old[k].key_len == UINT32_MAX)
				continue;
			for (i = old[k].hash & ws->cache_mask; ws->cache[i].key_len != UINT32_MAX; i = (i + 1) & ws->cache_mask)
				;
			ws->cache[i] = old[k];
		}
		free(old);
	}
	if (ws->cache_keys_len + n > ws->cache_keys_cap) {
		ws->cache_keys_cap = (ws->cache_keys_len + n) * 2 + 4096;
		ws->cache_keys = xrealloc(ws->cache_keys, ws->cache_keys_cap);
	}
	if (ws->cache_ids_len + nids > ws->cache_ids_cap) {
		ws->cache_ids_cap = (ws->cache_ids_len + nids) * 2 + 1024;
		ws->cache_ids = xrealloc(ws->cache_ids, ws->cache_ids_cap * sizeof *ws->cache_ids);
	}
	for (i = h & ws->cache_mask; ws->cache[i].key_len != UINT32_MAX; i = (i + 1) & ws->cache_mask)
		;
	memcpy(ws->cache_keys + ws->cache_keys_len, w, n);
	memcpy(ws->cache_ids + ws->cache_ids_len, ids, nids * sizeof *ids);
	ws->cache[i] = (struct cache_slot){ h, (uint32_t)ws->cache_keys_len, (uint32_t)n, (uint32_t)ws->cache_ids_len,
					    (uint32_t)nids };
	ws->cache_keys_len += n;
	ws->cache_ids_len += nids;
	ws->cache_count++;
}

/* ---- BPE ----------------------------------------------------------------- */

static int merge_before(const struct bpe_merge *a, const struct bpe_merge *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(struct tok_workspace *ws, struct bpe_merge m)
{
	size_t i;

	if (ws->heap_len == ws->heap_cap) {
		ws->heap_cap = ws->heap_cap ? ws->heap_cap * 2 : 64;
		ws->heap = xrealloc(ws->heap, ws->heap_cap * sizeof *ws->heap);
	}
	i = ws->heap_len++;
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (!merge_before(&m, &ws->heap[parent]))
			break;
		ws->heap[i] = ws->heap[parent];
		i = parent;
	}
	ws->heap[i] = m;
}

static struct bpe_merge heap_pop(struct tok_workspace *ws)
{
	struct bpe_merge top = ws->heap[0], last = ws->heap[--ws->heap_len];
	size_t i = 0, n = ws->heap_len;

	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && merge_before(&ws->heap[c + 1], &ws->heap[c]))
			c++;
		if (!merge_before(&ws->heap[c], &last))
			break;
		ws->heap[i] = ws->heap[c];
		i = c;
	}
	if (n > 0)
		ws->heap[i] = last;
	return top;
}

static void push_pair(struct tok_workspace *ws, int32_t pos)
{
	const struct bpe_symbol *s = ws->sym;
	const struct pair_slot *m;

	if (pos < 0 || s[pos].next < 0)
		return;
	m = pairmap_get(&ws->tok->merges, s[pos].id, s[s[pos].next].id);
	if (m)
		heap_push(ws, (struct bpe_merge){ m->rank, pos, m->new_id });
}

/* One pre-token's ids appended to out. */
static void bpe_word(struct tok_workspace *ws, const char *w, size_t n, struct token_ids *out)
{
	const struct tokenizer *t = ws->tok;
	uint64_t h = 0;
	size_t start = out->n;
	int32_t nsym = 0;

	if (n == 0)
		return;
	if (n <= CACHE_MAX_WORD) {
		const struct cache_slot *c;
		h = hash_bytes(w, n);
		c = cache_get(ws, w, n, h);
		if (c) {
			token_ids_append(out, ws->cache_ids + c->ids_off, c->ids_n);
			return;
		}
	}
	if (t->ignore_merges) { /* Llama-3: a word already in the vocabulary is one token */
		size_t need = n * 2, k = 0;
		if (need > ws->mapped_cap) {
			ws->mapped_cap = need * 2;
			ws->mapped = xrealloc(ws->mapped, ws->mapped_cap);
		}
		for (size_t i = 0; i < n; i++) {
			unsigned char b = (unsigned char)w[i];
			memcpy(ws->mapped + k, byte_utf8[b], byte_utf8_len[b]);
			k += byte_utf8_len[b];
		}
		int32_t id = vocab_lookup(t, ws->mapped, k);
		if (id >= 0) {
			token_ids_push(out, id);
			goto done;
		}
	}
	if (n > ws->sym_cap) {
		ws->sym_cap = n * 2;
		ws->sym = xrealloc(ws->sym, ws->sym_cap * sizeof *ws->sym);
	}
	for (size_t i = 0; i < n; i++) {
		int32_t id = t->byte_id[(unsigned char)w[i]];
		if (id < 0) {
			if (t->unk_id < 0)
				continue; /* HF drops a character it cannot map when there is no unk */
			if (t->fuse_unk && nsym > 0 && ws->sym[nsym - 1].id == t->unk_id) {
				ws->sym[nsym - 1].len++;
				continue;
			}
			id = t->unk_id;
		}
		ws->sym[nsym] = (struct bpe_symbol){ id, nsym - 1, -1, 1 };
		if (nsym > 0)
			ws->sym[nsym - 1].next = nsym;
		nsym++;
	}
	ws->heap_len = 0;
	for (int32_t i = 0; i + 1 < nsym; i++)
		push_pair(ws, i);
	while (ws->heap_len > 0) {
		struct bpe_merge m = heap_pop(ws);
		struct bpe_symbol *s = ws->sym;
		int32_t right;
		const struct pair_slot *cur;
		if (s[m.pos].len == 0 || s[m.pos].next < 0)
			continue;
		right = s[m.pos].next;
		/* stale entry: one side has merged since it was pushed */
		cur = pairmap_get(&t->merges, s[m.pos].id, s[right].id);
		if (cur == NULL || cur->new_id != m.new_id)
			continue;
		s[m.pos].id = m.new_id;
		s[m.pos].len += s[right].len;
		s[m.pos].next = s[right].next;
		s[right].len = 0;
		if (s[right].next >= 0)
			s[s[right].next].prev = m.pos;
		push_pair(ws, s[m.pos].prev);
		push_pair(ws, m.pos);
	}
	for (int32_t i = nsym > 0 ? 0 : -1; i >= 0; i = ws->sym[i].next)
		token_ids_push(out, ws->sym[i].id);
done:
	if (n <= CACHE_MAX_WORD)
		cache_put(ws, w, n, h, out->v + start, out->n - start);
}

/* ---- pre-tokenization ---------------------------------------------------- */

static int pre_tokenize(struct tok_workspace *ws, int k, const char *s, size_t n, struct token_ids *out, char *err,
			size_t errsz);

/* Splits [s, s+n) at the matches of step k's regex (HF's Isolated: matches
 * and the gaps between them are pieces; Removed drops the matches) and
 * passes each piece to step k + 1.  The piece is the whole subject, so a
 * lookahead sees its end as the end of text, as in HF. */
static int split_regex(struct tok_workspace *ws, int k, const char *s, size_t n, struct token_ids *out, char *err,
		       size_t errsz)
{
	const struct pre_step *p = &ws->tok->pre[k];
	size_t pos = 0, gap = 0;

	while (pos < n) {
		int m = pcre2_match(p->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, ws->md, ws->mctx);
		if (m == PCRE2_ERROR_NOMATCH)
			break;
		if (m < 0) {
			PCRE2_UCHAR msg[120];
			pcre2_get_error_message(m, msg, sizeof msg);
			set_error(err, errsz, "pre-tokenizer regex failed: %s", (char *)msg);
			return -1;
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(ws->md);
		size_t ms = ov[0], me = ov[1];
		if (me == ms) { /* an empty match splits nothing: step over one character */
			uint32_t cp;
			pos = ms + (size_t)utf8_decode((const unsigned char *)s + ms, &cp);
			continue;
		}
		if (ms > gap && pre_tokenize(ws, k + 1, s + gap, ms - gap, out, err, errsz) < 0)
			return -1;
		if (!p->removed && pre_tokenize(ws, k + 1, s + ms, me - ms, out, err, errsz) < 0)
			return -1;
		gap = pos = me;
	}
	if (gap < n)
		return pre_tokenize(ws, k + 1, s + gap, n - gap, out, err, errsz);
	return 0;
}

/* Runs pre-tokenizer step k on piece [s, s+n), recursing into the next step
 * for each sub-piece and BPE-ing what comes out of the last.  No piece list
 * is built: the recursion depth is the number of steps. */
static int pre_tokenize(struct tok_workspace *ws, int k, const char *s, size_t n, struct token_ids *out, char *err,
			size_t errsz)
{
	const struct tokenizer *t = ws->tok;
	const struct pre_step *p;

	if (n == 0)
		return 0;
	if (k == t->n_pre) {
		bpe_word(ws, s, n, out);
		return 0;
	}
	p = &t->pre[k];
	if (p->kind == PRE_BYTELEVEL && p->add_prefix_space && s[0] != ' ') {
		/* HF prepends the space to every piece reaching ByteLevel */
		char *buf = xmalloc(n + 1);
		int rc;
		buf[0] = ' ';
		memcpy(buf + 1, s, n);
		rc = p->re ? split_regex(ws, k, buf, n + 1, out, err, errsz)
			   : pre_tokenize(ws, k + 1, buf, n + 1, out, err, errsz);
		free(buf);
		return rc;
	}
	if (p->re == NULL) /* ByteLevel without its regex: the byte mapping itself happens in BPE */
		return pre_tokenize(ws, k + 1, s, n, out, err, errsz);
	return split_regex(ws, k, s, n, out, err, errsz);
}

/* ---- normalization and added tokens -------------------------------------- */

static char *normalize_alloc(const struct tokenizer *t, const char *s, size_t n, size_t *out_len)
{
	char *cur = xmalloc(n + 1);
	size_t len = n;

	memcpy(cur, s, n);
	cur[n] = '\0';
	for (int i = 0; i < t->n_norm; i++) {
		utf8proc_uint8_t *res = NULL;
		utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)cur, (utf8proc_ssize_t)len, &res, t->norm[i]);
		if (r < 0) /* input was validated, so this is memory */
			die(EXIT_RUNTIME, "normalizing text: %s", utf8proc_errmsg(r));
		free(cur);
		cur = (char *)res;
		len = (size_t)r;
	}
	*out_len = len;
	return cur;
}

/* Finds the leftmost-longest added token in s[from..n); returns its index in
 * t->added and sets *ms, *me (with lstrip/rstrip white space), or -1. */
static int find_added(const struct tokenizer *t, const struct added_set *set, const char *s, size_t n, size_t from,
		      size_t floor, size_t *ms, size_t *me)
{
	for (size_t i = from; i < n; i++) {
		unsigned char f = (unsigned char)s[i];
		int cnt = set->n_first[f];
		for (int j = 0; j < cnt; j++) {
			const struct added_token *a = &t->added[set->by_first[f][j]];
			if (a->len > n - i || memcmp(s + i, a->content, a->len) != 0)
				continue;
			size_t st = i, en = i + a->len;
			if (a->lstrip) { /* swallow white space on the left, back to the previous split */
				while (st > floor) {
					size_t b = st - 1;
					uint32_t cp;
					while (b > floor && ((unsigned char)s[b] & 0xc0) == 0x80)
						b--;
					utf8_decode((const unsigned char *)s + b, &cp);
					if (!is_white_space(cp))
						break;
					st = b;
				}
			}
			if (a->rstrip) {
				while (en < n) {
					uint32_t cp;
					int l = utf8_decode((const unsigned char *)s + en, &cp);
					if (!is_white_space(cp))
						break;
					en += (size_t)l;
				}
			}
			*ms = st;
			*me = en;
			return set->by_first[f][j];
		}
	}
	return -1;
}

/* Hangul V and T jamo compose with what precedes them, algorithmically. */
static int is_hangul_vt(uint32_t cp)
{
	return (cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11a8 && cp <= 0x11c2);
}

/* A starter that composes with nothing before it and has no decomposition
 * is left alone by every normalization form. */
static int inert_by_properties(uint32_t cp)
{
	const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);

	return p->combining_class == 0 && (p->comb_index == UINT16_MAX || p->comb_index < 0x8000) && !is_hangul_vt(cp) &&
	       p->decomp_seqindex == UINT16_MAX && !(cp >= 0xac00 && cp <= 0xd7a3);
}

/* The normalization quick check, decided once per BMP code point at load:
 * text made only of inert code points is its own normal form, so most text
 * skips utf8proc entirely.  A starter with a decomposition (é) is inert when
 * it normalizes to itself and cannot be the second half of a composition. */
static void build_inert_bmp(struct tokenizer *t)
{
	t->inert_bmp = xcalloc(0x10000 / 8, 1);
	for (uint32_t cp = 0; cp < 0x10000; cp++) {
		int inert;
		if (cp >= 0xd800 && cp <= 0xdfff)
			continue;
		inert = inert_by_properties(cp);
		if (!inert) {
			const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
			inert = p->combining_class == 0 && (p->comb_index == UINT16_MAX || p->comb_index < 0x8000) &&
				!is_hangul_vt(cp);
			for (int i = 0; i < t->n_norm && inert; i++) {
				char in[4];
				utf8proc_uint8_t *out = NULL;
				int n = utf8_encode(cp, in);
				utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)in, n, &out, t->norm[i]);
				inert = r == n && memcmp(in, out, (size_t)n) == 0;
				free(out);
			}
		}
		if (inert)
			t->inert_bmp[cp >> 3] |= (unsigned char)(1u << (cp & 7));
	}
}

static int needs_normalization(const struct tokenizer *t, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;

	for (size_t i = 0; i < n;) {
		uint32_t cp;
		if (u[i] < 0x80) {
			i++;
			continue;
		}
		i += (size_t)utf8_decode(u + i, &cp);
		if (cp < 0x10000 ? !(t->inert_bmp[cp >> 3] & (1u << (cp & 7))) : !inert_by_properties(cp))
			return 1;
	}
	return 0;
}

static int encode_normalized(struct tok_workspace *ws, const char *s, size_t n, struct token_ids *out, char *err,
			     size_t errsz)
{
	const struct tokenizer *t = ws->tok;
	size_t done = 0, ms, me;
	int a;

	if (!t->norm_set.any)
		return pre_tokenize(ws, 0, s, n, out, err, errsz);
	while ((a = find_added(t, &t->norm_set, s, n, done, done, &ms, &me)) >= 0) {
		if (ms > done && pre_tokenize(ws, 0, s + done, ms - done, out, err, errsz) < 0)
			return -1;
		token_ids_push(out, t->added[a].id);
		done = me;
	}
	return pre_tokenize(ws, 0, s + done, n - done, out, err, errsz);
}

static int encode_segment(struct tok_workspace *ws, const char *s, size_t n, struct token_ids *out, char *err,
			  size_t errsz)
{
	const struct tokenizer *t = ws->tok;
	int rc;
	size_t nl;
	char *norm;

	if (n == 0)
		return 0;
	if (t->n_norm == 0 || !needs_normalization(t, s, n))
		return encode_normalized(ws, s, n, out, err, errsz);
	norm = normalize_alloc(t, s, n, &nl);
	rc = encode_normalized(ws, norm, nl, out, err, errsz);
	free(norm);
	return rc;
}

int tokenizer_encode(const struct tokenizer *t, struct tok_workspace *ws, const char *text, size_t len, int flags,
		     struct token_ids *out, char *err, size_t errsz)
{
	struct tok_workspace *own = NULL;
	size_t valid = utf8_valid_prefix(text, len), done = 0, ms, me;
	int a, rc = 0;

	if (valid != len) {
		set_error(err, errsz, "invalid UTF-8 at byte %zu", valid);
		return -1;
	}
	if (ws == NULL)
		ws = own = tok_workspace_new(t);
	if (ws->tok != t)
		die(EXIT_RUNTIME, "tokenizer_encode: workspace made for another tokenizer");
	if (flags & TOK_ADD_SPECIAL)
		token_ids_append(out, t->tmpl_pre, (size_t)t->n_tmpl_pre);
	while (rc == 0 && t->raw_set.any && (a = find_added(t, &t->raw_set, text, len, done, done, &ms, &me)) >= 0) {
		rc = encode_segment(ws, text + done, ms - done, out, err, errsz);
		token_ids_push(out, t->added[a].id);
		done = me;
	}
	if (rc == 0)
		rc = encode_segment(ws, text + done, len - done, out, err, errsz);
	if (rc == 0 && (flags & TOK_ADD_SPECIAL))
		token_ids_append(out, t->tmpl_post, (size_t)t->n_tmpl_post);
	tok_workspace_free(own);
	return rc;
}

/* ---- decoding ------------------------------------------------------------ */

struct bytes {
	char *p;
	size_t n, cap;
};

static void bytes_add(struct bytes *b, const void *data, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		b->cap = (b->n + n + 1) * 2;
		b->p = xrealloc(b->p, b->cap);
	}
	memcpy(b->p + b->n, data, n);
	b->n += n;
}

/* Each maximal ill-formed subsequence becomes one U+FFFD, as Rust's
 * String::from_utf8_lossy (which HF's ByteLevel decoder calls) does. */
static char *utf8_lossy(const char *s, size_t n, size_t *out_len)
{
	struct bytes b = { 0 };
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;

	bytes_add(&b, "", 0);
	while (i < n) {
		size_t ok = utf8_valid_prefix((const char *)u + i, n - i);
		bytes_add(&b, u + i, ok);
		i += ok;
		if (i >= n)
			break;
		/* the longest prefix of a well-formed sequence starting here */
		unsigned c = u[i];
		size_t need = 0, k = 1;
		unsigned lo = 0x80, hi = 0xbf;
		if (c >= 0xc2 && c <= 0xdf)
			need = 1;
		else if (c >= 0xe0 && c <= 0xef) {
			need = 2;
			lo = c == 0xe0 ? 0xa0 : 0x80;
			hi = c == 0xed ? 0x9f : 0xbf;
		} else if (c >= 0xf0 && c <= 0xf4) {
			need = 3;
			lo = c == 0xf0 ? 0x90 : 0x80;
			hi = c == 0xf4 ? 0x8f : 0xbf;
		}
		if (need > 0 && i + 1 < n && u[i + 1] >= lo && u[i + 1] <= hi) {
			k = 2;
			while (k <= need && i + k < n && (u[i + k] & 0xc0) == 0x80)
				k++;
		}
		bytes_add(&b, "\xef\xbf\xbd", 3);
		i += k;
	}
	b.p[b.n] = '\0';
	*out_len = b.n;
	return b.p;
}

char *tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n, int flags, size_t *len, char *err,
		       size_t errsz)
{
	struct bytes raw = { 0 };
	char *text;
	int first = 1;

	byte_map_init();
	bytes_add(&raw, "", 0);
	for (size_t i = 0; i < n; i++) {
		int32_t id = ids[i];
		const char *tok = tokenizer_id_token(t, id);
		if (tok == NULL) {
			set_error(err, errsz, "id %d at position %zu is not in the vocabulary (size %d)", id, i, t->n_ids);
			free(raw.p);
			return NULL;
		}
		if ((flags & TOK_SKIP_SPECIAL) && t->id_special[id])
			continue;
		size_t tl = strlen(tok);
		if (!t->decoder_bytelevel) {
			if (!first)
				bytes_add(&raw, " ", 1);
			bytes_add(&raw, tok, tl);
			first = 0;
			continue;
		}
		/* every character back to its byte; a token with a character outside
		 * the map (an added token's text) goes out as its own UTF-8 */
		size_t mark = raw.n, j = 0;
		while (j < tl) {
			uint32_t cp;
			j += (size_t)utf8_decode((const unsigned char *)tok + j, &cp);
			if (cp >= 324 || cp_byte[cp] < 0) {
				raw.n = mark;
				bytes_add(&raw, tok, tl);
				break;
			}
			unsigned char byte = (unsigned char)cp_byte[cp];
			bytes_add(&raw, &byte, 1);
		}
		first = 0;
	}
	text = utf8_lossy(raw.p, raw.n, len);
	free(raw.p);
	return text;
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
