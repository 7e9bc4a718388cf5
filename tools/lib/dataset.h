/* tools/lib/dataset.h: local training data, tokenized and packed into
 * fixed-length sequences for the trainer.
 *
 * A dataset spec (training.dataset) is, in this order:
 *   - a file: .jsonl (one record a line), .json (a JSON array of records, or
 *     JSON Lines), .txt (documents separated by blank lines), any of them
 *     optionally .gz;
 *   - a directory: the files below it of one split, in sorted path order,
 *     hidden entries skipped, split as HF datasets' data_files.py does:
 *     when a file is data/NAME-NNNNN-of-NNNNN*.* the split NAME is such
 *     files; else when a directory name holds a split keyword as a word
 *     (at its start or after one of "-._ 0-9", and at its end or before
 *     one), the splits are the directories'; else the file names' (the
 *     keyword followed by a separator: train.jsonl, my_train-1.json);
 *     else every file is "train".  Keywords: train, training (train);
 *     validation, valid, dev, val (validation); test, testing, eval,
 *     evaluation (test); case as written.  A split with no file is an
 *     error naming the splits there;
 *   - a HF hub dataset id Org/Name found in the local HF cache
 *     (<hub>/datasets--Org--Name/snapshots/<newest>/), read as a directory.
 * Nothing is downloaded, and nothing synthetic stands in for missing data:
 * the error names what was looked for and where.  A spec whose records
 * give no target at all (chats without an answer the template keeps) is
 * refused by dataset_open, with the record count and the roles seen.
 *
 * A record is a JSON object with one of:
 *   "text": "..."                        the document's text
 *   "messages": [{"role", "content"}...] rendered by the model's own chat
 *                 template and tokenized as transformers'
 *                 apply_chat_template(messages, tokenize=True) does
 *                 (tools/lib/chat_template.h); a model without a template
 *                 is an error, never a stand-in format; beside it an
 *                 optional "chat_template_kwargs" object gives the
 *                 template more variables (apply_chat_template's
 *                 **kwargs), e.g. {"date_string": "26 Jul 2024"}
 *   "input_ids": [int...]                 already tokenized (no tokenizer needed)
 *
 * Targets (train_on): by default every token of a text or input_ids
 * document is a target, and of a chat only the assistant's contents and
 * the end-of-turn token after each (chat_template.h); TRAIN_ON_ALL makes
 * every token a target, TRAIN_ON_ASSISTANT refuses records that are not
 * messages.  A token that is not a target has target -100.
 *
 * A text document is encoded as HF's tokenizer(text) encodes it by default
 * (add_special_tokens: the post-processor's additions, i.e. Llama-3's
 * <|begin_of_text|> first, nothing for Qwen2); input_ids are taken as given.
 *
 * Packing: documents are concatenated, each followed by eos_id, and the
 * stream is cut into rows of seq_len inputs whose targets are the next
 * tokens (rows overlap by one token, so no token is lost).  Each epoch
 * shuffles the DOCUMENT order (Fisher-Yates driven by splitmix64 of seed
 * and epoch); its last row is padded with eos_id and target -1; the next
 * epoch starts a new row.  Empty documents are skipped.  The EOS after a
 * chat is a target only under TRAIN_ON_ALL.
 *
 * Positions: pos[t] is token t's place in its document (the EOS after a
 * document belongs to it), restarting at 0 where a document starts and
 * at the row's start (a document begun in an earlier row continues at 0);
 * the padding counts as one document.  The attention rule built on it:
 * token i of a row sees token j of the same row iff i - pos[i] <= j <= i,
 * and RoPE rotates token i by pos[i].  Tokenization runs
 * once, at open, on all cores (OpenMP); the result does not depend on the
 * thread count. */
#ifndef POROS_DATASET_H
#define POROS_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "tokenizer.h"

struct dataset;

enum train_on {
	TRAIN_ON_DEFAULT,   /* chats: the answers; text and input_ids: all */
	TRAIN_ON_ASSISTANT, /* the answers; only messages records */
	TRAIN_ON_ALL,       /* every token */
};

/* tok may be NULL when every record is "input_ids"; split: a directory's
 * split (NULL: "train"; "validation|test": the first of them there is;
 * a file has none).  0, or -1 with err ("data/train.jsonl:12: ..."). */
int dataset_open(struct dataset **out, const char *spec_dataset, const struct tokenizer *tok, int seq_len,
		 unsigned long long seed, int eos_id, enum train_on train_on, const char *chat_date, const char *split,
		 char *err, size_t errsz);
/* Next micro-batch: tokens (B, seq_len), targets (B, seq_len) (-100 for
 * a token that is not a target, -1 for padding) and, unless pos is NULL,
 * pos (B, seq_len) as above.  Never runs dry: a finished epoch starts the
 * next. */
int dataset_next(struct dataset *ds, int32_t *tokens, int32_t *targets, int32_t *pos, int batch, char *err,
		 size_t errsz);
void dataset_close(struct dataset *ds);

/* Building one from records by hand (poros-tokenize --pack): shuffle 0
 * keeps the documents in the order added, every epoch. */
struct dataset *dataset_new(const struct tokenizer *tok, int seq_len, unsigned long long seed, int eos_id, int shuffle);
/* Before the first record; -1 after. */
int dataset_set_train_on(struct dataset *ds, enum train_on mode);
/* The split a directory added later gives (as dataset_open's); before the
 * first record, -1 after. */
int dataset_set_split(struct dataset *ds, const char *split);
/* The split a directory gave ("train", "validation", "test"), or NULL (a
 * file, or a sharded split of another name). */
const char *dataset_split_read(const struct dataset *ds);
/* 1 when both read the same files (device and inode), none else. */
int dataset_same_files(const struct dataset *a, const struct dataset *b);
/* Moves ceil(fraction x documents) whole documents, chosen by the seed,
 * out of ds (prepared here if need be) into a new dataset *held_out; the
 * rest stay in their order.  0, or -1 with err when either side would be
 * empty. */
int dataset_hold_out(struct dataset *ds, double fraction, struct dataset **held_out, char *err, size_t errsz);
/* The date a chat template's strftime_now formats, "YYYY-MM-DD"; without
 * one such a template is refused.  Before the first record; 0, or -1
 * with err. */
int dataset_set_chat_date(struct dataset *ds, const char *ymd, char *err, size_t errsz);
/* where: "file:line", for messages.  Empty documents are dropped. */
int dataset_add_text(struct dataset *ds, const char *text, size_t len, const char *where, char *err, size_t errsz);
int dataset_add_record(struct dataset *ds, const cJSON *rec, const char *where, char *err, size_t errsz);
/* A file or a directory, as dataset_open reads it. */
int dataset_add_path(struct dataset *ds, const char *path, char *err, size_t errsz);
/* Tokenizes what was added; dataset_next calls it if needed.  0 or -1. */
int dataset_prepare(struct dataset *ds, char *err, size_t errsz);

long long dataset_documents(const struct dataset *ds);
long long dataset_tokens(const struct dataset *ds);            /* separators included */
long long dataset_rows_per_epoch(const struct dataset *ds);
long long dataset_supervised(const struct dataset *ds);        /* targets of one epoch */
int dataset_max_token_id(const struct dataset *ds);             /* for the trainer's vocab check */

/* Where the packing stands, to continue the same stream in another
 * process (poros-train --resume): dataset_seek on a dataset opened the
 * same way gives the rows dataset_next would have given next. */
struct dataset_cursor {
	long long epoch;     /* -1: no row handed out yet */
	size_t stream_pos, doc, off;
};
void dataset_tell(const struct dataset *ds, struct dataset_cursor *cur);
int dataset_seek(struct dataset *ds, const struct dataset_cursor *cur, char *err, size_t errsz);
#endif
