/* tools/lib/text/tokenizer_int.h: what the parts of the tokenizer share: the
 * loaded tokenizer and an encoding thread's workspace, UTF-8 helpers, and
 * the functions one part calls in another.
 *   tokenizer_load.c  tokenizer.json read and checked (all but the model),
 *                     the files beside it, tokenizer_resolve, the queries
 *   tokenizer_bpe.c   the BPE model: vocabulary and merges (its loader
 *                     too), GPT-2's byte map, the word cache, merging
 *   tokenizer.c       encoding (added tokens, normalization,
 *                     pre-tokenization) and decoding */
#ifndef POROS_TOKENIZER_INT_H
#define POROS_TOKENIZER_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>
#include <utf8proc.h>

#include "tokenizer.h"

#define MAX_STEPS 8            /* normalizers / pre-tokenizers in a Sequence */
#define MAX_TEMPLATE 16        /* special ids around $A in a TemplateProcessing */

/* ---- vocab_map: token text -> id (the vocabulary) ------------------------ */

struct str_slot {
	uint64_t hash;
	uint32_t off, len;
	int32_t val; /* -1: empty slot */
};

struct vocab_map {
	struct str_slot *slots;
	size_t mask, count;
	char *arena;
	size_t arena_len, arena_cap;
};

/* ---- (left id, right id) -> (rank, merged id) ---------------------------- */

struct pair_slot {
	uint64_t key; /* left << 32 | right; UINT64_MAX: empty */
	int32_t rank, new_id;
};

struct pairmap {
	struct pair_slot *slots;
	size_t mask, count;
};

/* ---- UTF-8 --------------------------------------------------------------- */

static inline int utf8_encode(uint32_t cp, char *out)
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
static inline int utf8_decode(const unsigned char *s, uint32_t *cp)
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

/* ---- tokenizer.json ------------------------------------------------------ */

static inline const char *json_type_str(const cJSON *obj, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static inline int json_flag(const cJSON *obj, const char *key)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(obj, key));
}

/* ---- the tokenizer ------------------------------------------------------- */

enum pre_kind { PRE_SPLIT, PRE_BYTELEVEL };

/* HF's SplitDelimiterBehavior: what becomes of a match (ByteLevel isolates) */
enum split_behavior {
	SPLIT_ISOLATED,            /* a piece of its own */
	SPLIT_REMOVED,             /* dropped */
	SPLIT_MERGED_WITH_PREVIOUS, /* appended to the piece before it */
	SPLIT_MERGED_WITH_NEXT,    /* put in front of the piece after it */
	SPLIT_CONTIGUOUS,          /* adjacent matches form one piece */
};

struct pre_step {
	enum pre_kind kind;
	pcre2_code *re;       /* Split's pattern; ByteLevel's GPT-2 pattern when use_regex */
	enum split_behavior behavior;
	int invert;           /* Split: the gaps between matches are what the behavior acts on */
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
	struct vocab_map vocab;    /* the model's vocabulary */
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

/* ---- tokenizer_bpe.c ----------------------------------------------------- */

/* GPT-2's byte <-> character map, built by byte_map_init (once). */
extern int16_t cp_byte[324]; /* character -> byte, -1 where no byte maps */
void byte_map_init(void);
void token_ids_append(struct token_ids *t, const int32_t *ids, size_t n);
int32_t vocab_lookup(const struct tokenizer *t, const char *s, size_t n);
/* Sets the text of id (t->id_token); -1 when id is outside [0, n_ids). */
int set_id_token(struct tokenizer *t, int32_t id, const char *s);
/* tokenizer.json's "model"; the ids run to at least max_added_id. */
/* tokenizer_gguf.c: a GGUF file's tokenizer.ggml.* keys as a tokenizer.json
 * object (and its EOS id, -1 when none); NULL with err ("path: ..."). */
cJSON *tokenizer_json_from_gguf(const char *path, int32_t *eos_id, char *err, size_t errsz);
int bpe_load_model(struct tokenizer *t, const cJSON *m, int max_added_id, char *err, size_t errsz);
void bpe_free_model(struct tokenizer *t);
/* One pre-token's ids appended to out. */
void bpe_word(struct tok_workspace *ws, const char *w, size_t n, struct token_ids *out);

/* ---- tokenizer.c --------------------------------------------------------- */

char *normalize_alloc(const struct tokenizer *t, const char *s, size_t n, size_t *out_len);
void build_inert_bmp(struct tokenizer *t);

#endif
