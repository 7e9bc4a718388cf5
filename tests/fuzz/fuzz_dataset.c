/* tests/fuzz/fuzz_dataset.c: the dataset readers (tools/lib/text/dataset_files.c)
 * on arbitrary files, as poros-train --dataset reads them.
 *
 * Input layout: the first byte picks the file's name (.jsonl, .json, .txt,
 * each plain or gzipped: then the rest is compressed here, or written as
 * given when bit 3 is set, so broken gzip streams are fuzzed too) and
 * whether it lies in a directory that is read as one; the rest is the file.
 * A bad file must come back as -1 with a message; a good one must pack
 * into rows of ids the tokenizer knows, targets -1 or a valid id. */
#include "fuzz_common.h"

#include <zlib.h>

#include "text/text.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const names[] = { "train.jsonl", "train.json", "train.txt" };

static struct tokenizer *tok;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[1024], name[64], path[512], dir[512];
	int32_t tokens[2 * 16], targets[2 * 16], pos[2 * 16];

	if (tok == NULL && tokenizer_load(&tok, "tests/fixtures/tokenizer/tiny", err, sizeof err) < 0) {
		fprintf(stderr, "%s (run from the repository root)\n", err);
		abort();
	}
	if (size == 0)
		return 0;
	uint8_t how = data[0];
	int gz = how & 4, raw_gz = how & 8, in_dir = how & 16;
	data++, size--;
	snprintf(name, sizeof name, "%s%s", names[(how & 3) % 3], gz ? ".gz" : "");
	snprintf(dir, sizeof dir, "%s/ds", fuzz_scratch_dir());
	if (mkdir_p(dir, 0700) < 0)
		abort();
	/* one file in the directory at a time */
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		for (int z = 0; z < 2; z++) {
			snprintf(path, sizeof path, "%s/%s%s", dir, names[i], z ? ".gz" : "");
			unlink(path);
		}
	}
	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (gz && !raw_gz) {
		gzFile g = gzopen(path, "wb1");
		if (g == NULL || (size > 0 && gzwrite(g, data, (unsigned)size) != (int)size) || gzclose(g) != Z_OK)
			abort();
	} else {
		char rel[128];
		snprintf(rel, sizeof rel, "ds/%s", name);
		fuzz_write_file(rel, data, size);
	}

	struct dataset *ds = dataset_new(tok, 16, 1, tokenizer_eos_id(tok) >= 0 ? tokenizer_eos_id(tok) : 0, 1);
	err[0] = '\0';
	int rc = dataset_add_path(ds, in_dir ? dir : path, err, sizeof err);
	if (rc == 0)
		rc = dataset_prepare(ds, err, sizeof err);
	if (rc < 0) {
		if (err[0] == '\0')
			abort();
		dataset_close(ds);
		return 0;
	}
	int vocab = tokenizer_vocab_size(tok);
	if (dataset_max_token_id(ds) >= vocab || dataset_documents(ds) < 1)
		abort();
	for (int step = 0; step < 3; step++) {
		if (dataset_next(ds, tokens, targets, pos, 2, err, sizeof err) < 0)
			abort();
		/* a target is an id, -100 (not a target) or -1 (padding); a
		 * position never reaches back past its row's start */
		for (int j = 0; j < 2 * 16; j++)
			if (tokens[j] < 0 || tokens[j] >= vocab || targets[j] < -100 || (targets[j] < -1 && targets[j] != -100) ||
			    targets[j] >= vocab || pos[j] < 0 || pos[j] > j % 16)
				abort();
	}
	dataset_close(ds);
	return 0;
}
