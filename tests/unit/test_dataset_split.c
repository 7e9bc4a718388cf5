/* tests/unit/test_dataset_split.c: which files of a directory are a split
 * (tools/lib/text/dataset_split.c), as HF datasets' data_files.py chooses them,
 * and documents held out by the seed.  One case a row: the files, the
 * split asked for, the files kept (or the error's text). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/dataset_int.h"
#include "util/util.h"
#include "test_common.h"

struct split_case {
	const char *files;  /* space-separated, relative to the directory */
	const char *want;
	const char *kept;   /* space-separated, or NULL: an error */
	const char *chosen; /* the split reported, or the error's text */
};

static const struct split_case cases[] = {
	/* file names: the keyword at the start or after a separator, then one */
	{ "train.jsonl validation.jsonl test.jsonl", "train", "train.jsonl", "train" },
	{ "train.jsonl validation.jsonl test.jsonl", "validation", "validation.jsonl", "validation" },
	{ "train.jsonl validation.jsonl test.jsonl", "test", "test.jsonl", "test" },
	{ "my_train_file.jsonl train1.jsonl trainer.jsonl dev.jsonl", "train", "my_train_file.jsonl train1.jsonl",
	  "train" },
	{ "a.jsonl dev.jsonl valid-0.jsonl val.json", "validation", "dev.jsonl valid-0.jsonl val.json", "validation" },
	{ "eval.jsonl testing.txt evaluation-1.jsonl.gz contest.jsonl", "test",
	  "eval.jsonl testing.txt evaluation-1.jsonl.gz", "test" },
	{ "training.jsonl Train.jsonl", "train", "training.jsonl", "train" },
	/* a file may be of two splits, as in HF */
	{ "train_test.jsonl x.jsonl", "test", "train_test.jsonl", "test" },
	/* no split in any name: every file is train */
	{ "a.jsonl b/c.jsonl", "train", "a.jsonl b/c.jsonl", "train" },
	{ "a.jsonl b/c.jsonl", "validation", NULL, "no files of split \"validation\" (the splits there: train)" },
	/* directory names come before file names */
	{ "train/a.jsonl train/test.jsonl test/b.jsonl", "train", "train/a.jsonl train/test.jsonl", "train" },
	{ "data/train/x.jsonl data/my-dev/y.jsonl data/dev_1/z.jsonl", "validation",
	  "data/my-dev/y.jsonl data/dev_1/z.jsonl", "validation" },
	{ "trainer/x.jsonl test.jsonl", "test", "test.jsonl", "test" },
	/* the sharded layout names any split */
	{ "data/train-00000-of-00002.jsonl data/train-00001-of-00002.jsonl data/extra-00000-of-00001.json",
	  "extra", "data/extra-00000-of-00001.json", NULL },
	{ "data/train-00000-of-00002.jsonl data/train-00001-of-00002.jsonl", "train",
	  "data/train-00000-of-00002.jsonl data/train-00001-of-00002.jsonl", "train" },
	{ "data/train-00000-of-00001.jsonl", "test", NULL, "no files of split \"test\" (the splits there: train)" },
	/* a list: the first split there is */
	{ "train.jsonl test.jsonl", "validation|test", "test.jsonl", "test" },
	{ "train.jsonl", "validation|test", NULL,
	  "no files of split \"validation\" or \"test\" (the splits there: train)" },
};

static size_t split_words(const char *s, char ***out)
{
	char *copy = xstrdup(s), *save = NULL;
	size_t n = 0;

	*out = NULL;
	for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		*out = xrealloc(*out, (n + 1) * sizeof **out);
		(*out)[n++] = xstrdup(w);
	}
	free(copy);
	return n;
}

static void check_case(const struct split_case *c)
{
	char **files, err[512] = "", kept[1024] = "";
	size_t n = split_words(c->files, &files);
	unsigned char *keep = calloc(n, 1);
	const char *chosen = "unset";
	int rc = dataset_select_split(files, n, c->want, keep, &chosen, err, sizeof err);

	for (size_t i = 0; rc == 0 && i < n; i++)
		if (keep[i])
			snprintf(kept + strlen(kept), sizeof kept - strlen(kept), "%s%s", kept[0] ? " " : "", files[i]);
	if (c->kept ? rc != 0 || strcmp(kept, c->kept) != 0 ||
	                      (c->chosen ? chosen == NULL || strcmp(chosen, c->chosen) != 0 : chosen != NULL)
	            : rc == 0 || strcmp(err, c->chosen) != 0) {
		fprintf(stderr, "split \"%s\" of [%s]: kept [%s] (%s), err \"%s\"; want [%s] (%s)\n", c->want, c->files,
		        kept, rc == 0 && chosen ? chosen : "-", err, c->kept ? c->kept : "", c->chosen ? c->chosen : "-");
		failures++;
	}
	for (size_t i = 0; i < n; i++)
		free(files[i]);
	free(files);
	free(keep);
}

/* ceil(fraction x n) whole documents, the same ones for the same seed. */
static void test_hold_out(void)
{
	char err[256];
	int32_t held_ids[2][8];

	for (int run = 0; run < 2; run++) {
		struct dataset *ds = dataset_new(NULL, 4, 7, 0, 1), *held = NULL;

		for (int d = 1; d <= 10; d++) {
			char rec[64];
			cJSON *o;

			snprintf(rec, sizeof rec, "{\"input_ids\":[%d,%d,%d]}", d, d + 20, d + 40);
			o = cJSON_Parse(rec);
			CHECK(dataset_add_record(ds, o, "t", err, sizeof err) == 0);
			cJSON_Delete(o);
		}
		CHECK(dataset_hold_out(ds, 0.25, &held, err, sizeof err) == 0);
		/* ceil(2.5) = 3 documents of 3 ids and their EOS */
		CHECK(dataset_documents(held) == 3 && dataset_documents(ds) == 7);
		CHECK(dataset_tokens(held) == 12 && dataset_tokens(ds) == 28);
		CHECK(dataset_supervised(held) == 9 && dataset_supervised(ds) == 21);
		for (int i = 0; i < 3; i++)
			held_ids[run][i] = held->tokens[held->doc_off[i]];
		/* no document on both sides */
		for (size_t i = 0; i < held->n_docs; i++)
			for (size_t j = 0; j < ds->n_docs; j++)
				CHECK(held->tokens[held->doc_off[i]] != ds->tokens[ds->doc_off[j]]);
		dataset_close(held);
		dataset_close(ds);
	}
	CHECK(memcmp(held_ids[0], held_ids[1], 3 * sizeof(int32_t)) == 0);
	{
		struct dataset *ds = dataset_new(NULL, 4, 7, 0, 1), *held = NULL;
		cJSON *o = cJSON_Parse("{\"input_ids\":[1,2]}");

		CHECK(dataset_add_record(ds, o, "t", err, sizeof err) == 0);
		cJSON_Delete(o);
		CHECK(dataset_hold_out(ds, 0.5, &held, err, sizeof err) < 0 && held == NULL);
		CHECK(strcmp(err, "holding out 0.5 of 1 documents leaves none to train on") == 0);
		dataset_close(ds);
	}
}

int main(void)
{
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
		check_case(&cases[i]);
	test_hold_out();
	return test_verdict("test_dataset_split");
}
