/* tools/lib/text/tokenizer.h: a Hugging Face tokenizer.json read and run in C,
 * giving the ids HF `tokenizers` gives for the byte-level BPE models Poros
 * trains (Qwen2/2.5/3, Llama-3).
 *
 * What is implemented (anything else in a tokenizer.json is rejected at load
 * with a message naming it, never silently approximated):
 *   added tokens   split out of the raw text first, leftmost-longest, as HF
 *                  does (lstrip/rstrip honoured; "normalized": true tokens are
 *                  matched after normalization; single_word is rejected)
 *   normalizer     null, NFC, NFD, NFKC, NFKD (utf8proc), or a Sequence of them
 *   pre_tokenizer  Split (Regex or String pattern, behavior Isolated or
 *                  Removed, invert false) and ByteLevel (add_prefix_space,
 *                  use_regex with GPT-2's pattern), or a Sequence of them;
 *                  regexes run in PCRE2 (UTF + UCP, JIT) with \s and \S
 *                  rewritten to Oniguruma's Unicode white space, the engine
 *                  HF uses
 *   model          BPE: vocab, merges ("a b" or ["a", "b"]) by rank,
 *                  ignore_merges, unk_token/fuse_unk; no dropout, no
 *                  subword prefix/suffix
 *   post_processor null, ByteLevel, TemplateProcessing ("single"), Sequence
 *   decoder        ByteLevel (or null: tokens joined by spaces, as HF)
 *
 * Text must be valid UTF-8 (an error says where it is not).  A loaded
 * tokenizer is read-only and may be shared by threads; each thread encodes
 * with its own struct tok_workspace (scratch buffers and a word -> ids
 * cache). */
#ifndef POROS_TOKENIZER_H
#define POROS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct tokenizer;
struct tok_workspace;

/* A growable array of token ids. */
struct token_ids {
	int32_t *v;
	size_t n, cap;
};
void token_ids_push(struct token_ids *t, int32_t id);
void token_ids_free(struct token_ids *t);

/* path: a tokenizer.json, or a directory holding one.  If a
 * tokenizer_config.json lies beside it, its "eos_token" sets
 * tokenizer_eos_id.  Or a GGUF file (by its magic): the tokenizer its
 * tokenizer.ggml.* keys describe, as llama.cpp reads them (tokenizer_gguf.c),
 * its eos_token_id the EOS.  0, or -1 with err ("path: what is wrong"). */
int tokenizer_load(struct tokenizer **out, const char *path, char *err, size_t errsz);
/* model_id: a local directory holding tokenizer.json, else the HF cache
 * (tools/lib/model/hf_cache.h) models--Org--Name/snapshots/<rev>/tokenizer.json.
 * The error lists every place looked at. */
int tokenizer_resolve(struct tokenizer **out, const char *model_id, char *err, size_t errsz);
void tokenizer_free(struct tokenizer *tok);

struct tok_workspace *tok_workspace_new(const struct tokenizer *tok);
void tok_workspace_free(struct tok_workspace *ws);

enum {
	TOK_ADD_SPECIAL = 1,  /* encode: apply the post_processor's template (Llama-3's BOS) */
	TOK_SKIP_SPECIAL = 2, /* decode: drop special tokens */
};

/* Appends the ids of text[0..len) to out.  ws may be NULL (a temporary one is
 * made: correct, but without the cache).  0, or -1 with err (invalid UTF-8 at
 * byte N; a regex failure). */
int tokenizer_encode(const struct tokenizer *tok, struct tok_workspace *ws, const char *text, size_t len, int flags,
		     struct token_ids *out, char *err, size_t errsz);
/* The text of ids, malloc'd and NUL-terminated (*len without the NUL; bytes
 * that are not valid UTF-8 become U+FFFD, as in HF).  NULL with err for an
 * id that is not in the vocabulary. */
char *tokenizer_decode(const struct tokenizer *tok, const int32_t *ids, size_t n, int flags, size_t *len, char *err,
		       size_t errsz);

int tokenizer_vocab_size(const struct tokenizer *tok);          /* largest id + 1 */
int tokenizer_token_id(const struct tokenizer *tok, const char *token); /* -1 when absent */
const char *tokenizer_id_token(const struct tokenizer *tok, int id);  /* NULL when absent */
int tokenizer_is_special(const struct tokenizer *tok, int id);
int tokenizer_eos_id(const struct tokenizer *tok);              /* -1 when unknown */
const char *tokenizer_path(const struct tokenizer *tok);        /* the tokenizer.json read */

#endif
