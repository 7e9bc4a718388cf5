/* tools/lib/text/tokenizer_bpe.c: the tokenizer's BPE model: tokenizer.json's
 * "model" (vocabulary and merges) read into hash maps, GPT-2's byte map,
 * and each pre-token ("word") BPE-merged by rank with a heap, as HF's
 * Word::merge_all does, so ties resolve the same way; a per-workspace
 * cache keeps the ids of words seen before. */
#include "tokenizer_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define CACHE_MAX_WORD 256     /* longer words are not cached: rare, and they would crowd the cache */
#define CACHE_MAX_ENTRIES (1u << 19)
#define CACHE_MAX_BYTES (64u << 20)

/* ---- hashing ------------------------------------------------------------- */

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

/* Slots for expect keys in an open-addressing table (a power of two, so a
 * hash is masked; at most half full, so probes stay short). */
static size_t table_cap(size_t expect)
{
	size_t cap = 64;

	while (cap < expect * 2)
		cap <<= 1;
	return cap;
}

/* ---- vocab_map: token text -> id (the vocabulary) ------------------------ */

static void vocab_map_init(struct vocab_map *m, size_t expect)
{
	size_t cap = table_cap(expect);

	m->slots = xmalloc(cap * sizeof *m->slots);
	for (size_t i = 0; i < cap; i++)
		m->slots[i].val = -1;
	m->mask = cap - 1;
	m->count = 0;
	m->arena = NULL;
	m->arena_len = m->arena_cap = 0;
}

static void vocab_map_free(struct vocab_map *m)
{
	free(m->slots);
	free(m->arena);
	memset(m, 0, sizeof *m);
}

static int32_t vocab_map_get(const struct vocab_map *m, const char *s, size_t n)
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

static void vocab_map_grow(struct vocab_map *m)
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
static void vocab_map_put(struct vocab_map *m, const char *s, size_t n, int32_t val)
{
	uint64_t h = hash_bytes(s, n);
	size_t i;

	if ((m->count + 1) * 2 > m->mask + 1)
		vocab_map_grow(m);
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

/* ---- (left id, right id) -> (rank, merged id) ---------------------------- */

static void pairmap_init(struct pairmap *m, size_t expect)
{
	size_t cap = table_cap(expect);

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

/* ---- GPT-2's byte <-> character map -------------------------------------- */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes, in order, for U+0100 onwards. */
static uint32_t byte_cp[256];
int16_t cp_byte[324]; /* inverse, -1 where no byte maps */
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

void byte_map_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, byte_map_build);
}

/* ---- token ids ----------------------------------------------------------- */

void token_ids_push(struct token_ids *t, int32_t id)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 256;
		t->v = xrealloc(t->v, t->cap * sizeof *t->v);
	}
	t->v[t->n++] = id;
}

void token_ids_append(struct token_ids *t, const int32_t *ids, size_t n)
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

/* ---- loading the model --------------------------------------------------- */

int32_t vocab_lookup(const struct tokenizer *t, const char *s, size_t n)
{
	return vocab_map_get(&t->vocab, s, n);
}

int set_id_token(struct tokenizer *t, int32_t id, const char *s)
{
	if (id < 0 || id >= t->n_ids)
		return -1;
	free(t->id_token[id]);
	t->id_token[id] = xstrdup(s);
	return 0;
}

int bpe_load_model(struct tokenizer *t, const cJSON *m, int max_added_id, char *err, size_t errsz)
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
	vocab_map_init(&t->vocab, (size_t)cJSON_GetArraySize(vocab));
	cJSON_ArrayForEach(e, vocab) {
		if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= INT32_MAX / 2 ||
		    e->valuedouble != (double)(int32_t)e->valuedouble) {
			set_error(err, errsz, "model.vocab: \"%s\": id is not a non-negative integer", e->string);
			return -1;
		}
		vocab_map_put(&t->vocab, e->string, strlen(e->string), (int32_t)e->valuedouble);
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

void bpe_free_model(struct tokenizer *t)
{
	vocab_map_free(&t->vocab);
	free(t->merges.slots);
}

/* ---- the word -> ids cache ----------------------------------------------- */

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
void bpe_word(struct tok_workspace *ws, const char *w, size_t n, struct token_ids *out)
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
