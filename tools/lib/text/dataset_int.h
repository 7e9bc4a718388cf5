/* tools/lib/text/dataset_int.h: what the parts of the dataset share: the
 * dataset itself and its documents before tokenization.
 *   dataset.c        records -> documents (text, input_ids, chats and
 *                    their targets), tokenizing them, opening a spec
 *   dataset_files.c  dataset files and directories -> records
 *   dataset_pack.c   documents -> packed rows, the packing cursor */
#ifndef POROS_DATASET_INT_H
#define POROS_DATASET_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "dataset.h"

/* A document before tokenization: text to encode, a rendered chat, or
 * ids as given; all_targets: every token is a target (else the chat's
 * answers only, or a prompt/completion's completion); prompt_len: the
 * bytes of text that are a prompt (0: none); eos_target: the EOS after
 * it is a target. */
struct pending_doc {
	char *text;
	size_t len;
	struct chat_render *chat;
	int all_targets, eos_target;
	size_t prompt_len;
	struct token_ids ids;
	uint8_t *sup;        /* (ids.n) after tokenizing */
};

struct dataset {
	const struct tokenizer *tok;
	int seq_len, eos_id, shuffle;
	enum train_on train_on;
	struct chat_template *chat; /* loaded at the first messages record */
	char *chat_date;            /* strftime_now's date, "YYYY-MM-DD", or NULL */
	unsigned long long seed;
	struct pending_doc *pending;
	size_t n_pending, cap_pending;
	int prepared;
	int32_t *tokens;     /* every document's tokens, back to back */
	uint8_t *sup;        /* (n_tokens) 1: a target when it is the next token */
	uint8_t *sep_sup;    /* (n_docs) the same for the EOS after document d */
	size_t n_tokens;
	size_t *doc_off;     /* document d: tokens[doc_off[d] .. doc_off[d+1]) */
	size_t n_docs;
	int max_id;
	long long n_records;  /* records added, empty ones too */
	long long n_supervised; /* targets in one epoch (dataset_prepare) */
	char roles[256];      /* the chats' roles, as first seen: "system, user" */
	char *split;          /* a directory's split to read (dataset_set_split); NULL: "train" */
	const char *split_read; /* the split a directory gave (split_names), or NULL */
	struct file_id *files; /* the files read, for dataset_same_files */
	char **file_paths;     /* (n_files) each as opened */
	char **file_names;     /* (n_files) its name in a directory, or its kind (dataset_file) */
	size_t n_files;
	/* progress (dataset_set_progress): when the work began, the last line */
	double progress_start, progress_last;
	int progress_said;
	long long bytes_read;  /* of the files done, for the progress lines */
	/* where the packing stands: stream position and the same as
	 * (document in epoch order, offset; offset == length is its EOS) */
	size_t *order;
	long long epoch;      /* -1 before the first */
	size_t stream_pos, cur_doc, cur_off;
};

struct file_id {
	dev_t dev;
	ino_t ino;
};

/* dataset.c: a progress line about reading, when one is due: the
 * records so far, and bytes of the file being read (done of size). */
void dataset_progress_read(struct dataset *ds, const char *path, long long done, long long size);
/* dataset.c: the targets of one epoch as the packing gives them. */
long long dataset_count_supervised(const struct dataset *ds);
/* dataset_split.c: keep[i] (n entries) when files[i] (relative to the
 * directory) is of split want ("validation", or "validation|test": the
 * first the directory has); *chosen: the split's name (NULL for a
 * sharded split of another name).  0, or -1 with err naming the splits
 * there. */
int dataset_select_split(char *const *files, size_t n, const char *want, unsigned char *keep, const char **chosen,
                         char *err, size_t errsz);

#endif
