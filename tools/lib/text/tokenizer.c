/* tools/lib/text/tokenizer.c: HF tokenizer.json (byte-level BPE) encode/decode.
 *
 * The pipeline is HF's, step for step: added tokens are split out of the raw
 * text (leftmost-longest), each remaining segment is normalized, split again
 * on "normalized" added tokens, pre-tokenized (regex Split, ByteLevel), and
 * each pre-token ("word") is BPE-merged (tokenizer_bpe.c).  This file is
 * that pipeline and decoding; tokenizer_load.c reads the tokenizer.json. */
#include "tokenizer_int.h"

#include <stdlib.h>
#include <string.h>

#include "util/util.h"

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

/* ---- pre-tokenization ---------------------------------------------------- */

static int pre_tokenize(struct tok_workspace *ws, int k, const char *s, size_t n, struct token_ids *out, char *err,
			size_t errsz);

/* The piece a Split step is building from its segments (a match, or a gap
 * between matches) as its behavior says, passed on to step k + 1 when no
 * further segment can join it. */
struct split_piece {
	struct tok_workspace *ws;
	int k;
	const char *s;
	struct token_ids *out;
	size_t start, end;
	int open, last_was_match;
};

static int split_flush(struct split_piece *pc, char *err, size_t errsz)
{
	if (!pc->open)
		return 0;
	pc->open = 0;
	return pre_tokenize(pc->ws, pc->k + 1, pc->s + pc->start, pc->end - pc->start, pc->out, err, errsz);
}

/* Segment [a, b), a match of the pattern or not (after "invert"), as HF's
 * NormalizedString::split folds it: a match joins the piece before it
 * (MergedWithPrevious) or after it (MergedWithNext: held until the gap that
 * follows), adjacent segments of one kind join (Contiguous). */
static int split_segment(struct split_piece *pc, size_t a, size_t b, int is_match, char *err, size_t errsz)
{
	int join = 0;

	switch (pc->ws->tok->pre[pc->k].behavior) {
	case SPLIT_REMOVED:
		if (is_match)
			return 0;
		break;
	case SPLIT_ISOLATED:
		break;
	case SPLIT_MERGED_WITH_PREVIOUS:
		join = is_match && !pc->last_was_match;
		break;
	case SPLIT_MERGED_WITH_NEXT:
		join = !is_match && pc->last_was_match;
		break;
	case SPLIT_CONTIGUOUS:
		join = is_match == pc->last_was_match;
		break;
	}
	pc->last_was_match = is_match;
	if (join && pc->open) {
		pc->end = b;
		return 0;
	}
	if (split_flush(pc, err, errsz) < 0)
		return -1;
	pc->start = a;
	pc->end = b;
	pc->open = 1;
	return 0;
}

/* Splits [s, s+n) at the matches of step k's regex into segments for
 * split_segment, passing each piece to step k + 1.  The piece is the whole
 * subject, so a lookahead sees its end as the end of text, as in HF. */
static int split_regex(struct tok_workspace *ws, int k, const char *s, size_t n, struct token_ids *out, char *err,
		       size_t errsz)
{
	const struct pre_step *p = &ws->tok->pre[k];
	struct split_piece pc = { .ws = ws, .k = k, .s = s, .out = out };
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
		if (ms > gap && split_segment(&pc, gap, ms, p->invert, err, errsz) < 0)
			return -1;
		if (split_segment(&pc, ms, me, !p->invert, err, errsz) < 0)
			return -1;
		gap = pos = me;
	}
	if (gap < n && split_segment(&pc, gap, n, p->invert, err, errsz) < 0)
		return -1;
	return split_flush(&pc, err, errsz);
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

char *normalize_alloc(const struct tokenizer *t, const char *s, size_t n, size_t *out_len)
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

/* Unicode's White_Space property (Rust's char::is_whitespace), for lstrip/rstrip. */
static int is_white_space(uint32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
	       (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
	       c == 0x3000;
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
void build_inert_bmp(struct tokenizer *t)
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
