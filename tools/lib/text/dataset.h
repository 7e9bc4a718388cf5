/* tools/lib/text/dataset.h: local training data, tokenized and packed into
 * fixed-length sequences for the trainer.
 *
 * What a dataset spec may be (a file, a directory and its splits, a HF
 * cache id), the record shapes (input_ids, messages, text, TRL's
 * prompt/completion, ShareGPT's conversations), which tokens are targets
 * under each train_on, the packing and the positions are the user's
 * contract and are described once, in man/poros-dataset.5.  What the
 * code keeps to besides:
 *   - a token that is not a target has target -100; padding -1;
 *   - tokenization runs once, at open, on all cores (OpenMP); the result
 *     does not depend on the thread count;
 *   - nothing is downloaded and nothing synthetic stands in for missing
 *     data: the error names what was looked for and where. */
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
/* Progress on stderr while a dataset is read and tokenized: a line once
 * the work has taken after_s seconds, then at most one a second, and a
 * last one when it ends; after_s < 0 (the default): none.  For the whole
 * process. */
void dataset_set_progress(double after_s);

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
/* The files read, in the order read (n: how many; 0 for a dataset of
 * records added by hand): file i's path as opened, and *name its path
 * under the directory read, or for a file given alone its kind ("jsonl",
 * "json", "txt", and ".gz"): what stays the same when the data is moved. */
size_t dataset_file_count(const struct dataset *ds);
const char *dataset_file(const struct dataset *ds, size_t i, const char **name);
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
