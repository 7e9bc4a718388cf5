/* tools/poros-train/data.h: where training tokens come from.
 *
 * A token source hands out micro-batches in order: tokens (B,S),
 * targets (B,S), a negative target meaning "not predicted" (-100: not an
 * answer, -1: padding), and positions pos (B,S): a token's place in its
 * document (man/poros-dataset.5; t for the synthetic and raw streams,
 * whose rows are one document each).  The engine asks
 * for the k micro-batches of a step at the start of the step, in order, so
 * both schedules see the same tokens.
 *
 *   "synthetic"          pseudo-random tokens from the seed, never repeating
 *   "synthetic:repeat"   a cycle of 16 distinct tokens: learnable, for tests
 *   FILE.u16, FILE.bin   raw little-endian uint16 token ids
 *   FILE.u32             raw little-endian uint32 token ids
 *   anything else        man/poros-dataset.5: .jsonl/.json/.txt (.gz), a
 *                        directory (one split of it), or a dataset in the
 *                        local HF cache; text is tokenized with the
 *                        model's tokenizer
 *
 * Synthetic and raw streams are cut into consecutive sequences of S+1
 * tokens (inputs, then the same shifted by one as targets), wrapping at the
 * end of a file; tools/lib/text/dataset packs documents its own way (rows of S
 * overlapping by one token, documents shuffled per epoch). */
#ifndef POROS_TRAIN_DATA_H
#define POROS_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "text/text.h"
#include "model/model.h"

enum source_kind { SOURCE_SYNTHETIC, SOURCE_REPEAT, SOURCE_RAW, SOURCE_DATASET };

#define REPEAT_PERIOD 16

struct tokenizer;

struct token_source {
	enum source_kind kind;
	char *name;
	int vocab, seq_len;
	uint64_t key;            /* synthetic kinds: derived from the seed */
	uint64_t next_seq;       /* synthetic and raw: sequences handed out */
	uint32_t *tokens;        /* raw: the whole stream; repeat: one period */
	size_t n;
	int32_t *seq;            /* (S+1) scratch */
	struct dataset *ds;      /* SOURCE_DATASET */
	struct tokenizer *tok;   /* SOURCE_DATASET, when the model has one */
};

/* 0, or -1 with err naming the path and, for a token the model cannot
 * embed, its position (or, for tools/lib/text/dataset sources, its value). */
int token_source_open(struct token_source *s, const char *spec, const struct model_config *mc, int seq_len,
                      uint64_t seed, enum train_on train_on, const char *chat_date, const char *split, char *err,
                      size_t errsz);
/* Whether spec is a directory (or a HF cache dataset), whose files a
 * split chooses. */
int token_source_has_splits(const char *spec);
/* --eval-fraction: whole documents of a dataset source moved into held,
 * chosen by the seed (tools/lib/text/dataset.h's dataset_hold_out).  0, or -1
 * with err (not a dataset, or a side left empty). */
int token_source_hold_out(struct token_source *s, struct token_source *held, double fraction, char *err,
                          size_t errsz);
/* The rows of seq_len one pass over the source takes (a raw file's may
 * be a fraction: its stream wraps at the file's end); 0: an endless
 * synthetic stream. */
double token_source_epoch_rows(const struct token_source *s);
/* "4 documents, 28 tokens, 24 supervised; 4 rows of 8 per epoch". */
void token_source_describe(const struct token_source *s, char *buf, size_t n);
/* 1 when both read the same files (by device and inode). */
int token_source_same_data(const struct token_source *a, const struct token_source *b);
/* The next `batch` sequences (pos may be NULL).  0, or -1 with err. */
int token_source_next(struct token_source *s, int32_t *tokens, int32_t *targets, int32_t *pos, int batch, char *err,
                      size_t errsz);
void token_source_free(struct token_source *s);

/* What a source reads, by content, so that a resume can tell a file
 * edited in place from the one the checkpoint read: "f64x4:" and the
 * digest of model_hash.h over, for each file in the order read, its
 * name (a raw file: "u16" or "u32"; a dataset: dataset_file's name, the
 * path under its directory or the file's kind), its size and its bytes.
 * 1 with out set, 0 with out "" for a synthetic stream (no file: the
 * seed is its content), -1 with err naming the file.  *bytes: bytes read. */
#define DATA_HASH_LEN (6 + 64)
int token_source_hash(char out[DATA_HASH_LEN + 1], size_t *bytes, const struct token_source *s, char *err,
                      size_t errsz);
/* The same over the tokenizer s tokenizes with: its file, then
 * tokenizer_config.json and chat_template.jinja beside it (or that one
 * is absent), which set its EOS and the chat template.  0 with out ""
 * when s has none (token ids, or input_ids records and no tokenizer). */
int token_source_tokenizer_hash(char out[DATA_HASH_LEN + 1], size_t *bytes, const struct token_source *s, char *err,
                                size_t errsz);

/* Where a token source stands (--save-every's checkpoints), with the size
 * of what it reads so a changed file is caught: token_source_seek on a
 * source opened with the same spec, model, seq_len and seed continues the
 * exact stream. */
struct token_cursor {
	uint64_t next_seq;           /* synthetic and raw */
	struct dataset_cursor ds;    /* tools/lib/text/dataset */
	long long size;              /* raw: tokens in the file; dataset: tokens with separators; else 0 */
};
void token_source_tell(const struct token_source *s, struct token_cursor *cur);
/* 0, or -1 with err (the data is not the size it was). */
int token_source_seek(struct token_source *s, const struct token_cursor *cur, char *err, size_t errsz);
/* The rows of one pass over the source (an evaluation set): a dataset's
 * rows per epoch, a raw file's whole sequences (at least 1); -1 for the
 * synthetic streams, which have no end. */
long token_source_rows(const struct token_source *s);

#endif
