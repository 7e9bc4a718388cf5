/* tests/unit/test_train_data.c: the trainer's token sources: synthetic
 * streams are deterministic, raw token files are cut into consecutive
 * S+1 windows that wrap, JSONL input_ids go through tools/lib/text/dataset,
 * and every bad input is an error naming the file (and the position of a
 * token the model cannot embed). */
#include <unistd.h>

#include "test_train_common.h"

static char dir[] = "/tmp/poros-test-train-data-XXXXXX";

static struct model_config tiny(void)
{
	struct model_config mc;
	char err[512];

	if (model_config_resolve(&mc, "poros/tiny-qwen2", "configs/models", err, sizeof err) < 0) {
		fprintf(stderr, "test_train_data: %s\n", err);
		exit(1);
	}
	return mc;
}

static char *write_file(const char *name, const void *data, size_t len)
{
	char *path = xasprintf("%s/%s", dir, name);
	FILE *f = fopen(path, "wb");

	if (f == NULL || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
		fprintf(stderr, "test_train_data: cannot write %s\n", path);
		exit(1);
	}
	return path;
}

static void check_synthetic(const struct model_config *mc)
{
	struct token_source a, b, c;
	int32_t ta[2 * 8], ga[2 * 8], tb[2 * 8], gb[2 * 8], tc[2 * 8], gc[2 * 8];
	char err[512];
	int differ = 0, in_range = 1;

	token_source_open(&a, "synthetic", mc, 8, 42, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err);
	token_source_open(&b, "synthetic", mc, 8, 42, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err);
	token_source_open(&c, "synthetic", mc, 8, 43, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err);
	for (int step = 0; step < 3; step++) {
		token_source_next(&a, ta, ga, NULL, 2, err, sizeof err);
		token_source_next(&b, tb, gb, NULL, 2, err, sizeof err);
		token_source_next(&c, tc, gc, NULL, 2, err, sizeof err);
		CHECKF(memcmp(ta, tb, sizeof ta) == 0 && memcmp(ga, gb, sizeof ga) == 0, "same seed, same tokens");
		differ |= memcmp(ta, tc, sizeof ta) != 0;
		for (int i = 0; i < 16; i++)
			in_range &= ta[i] >= 0 && ta[i] < mc->vocab_size && ga[i] >= 0 && ga[i] < mc->vocab_size;
		for (int row = 0; row < 2; row++)
			for (int t = 0; t + 1 < 8; t++)
				CHECKF(ga[row * 8 + t] == ta[row * 8 + t + 1], "target %d of row %d is the next input", t, row);
	}
	CHECKF(differ, "another seed, other tokens");
	CHECKF(in_range, "synthetic tokens inside the vocabulary");
	{
		/* the stream's first two sequences for seed 42, vocabulary 256:
		 * the baseline arms' armlib.synthetic_rows must give the same
		 * (tests/arm.bats holds the same numbers) */
		static const int32_t seq0[9] = { 215, 102, 105, 136, 140, 37, 135, 133, 195 };
		static const int32_t seq1[9] = { 65, 116, 9, 248, 250, 197, 102, 92, 155 };
		struct token_source g;

		CHECKF(mc->vocab_size == 256, "the tiny model's vocabulary is 256");
		token_source_open(&g, "synthetic", mc, 8, 42, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err);
		token_source_next(&g, ta, ga, NULL, 2, err, sizeof err);
		CHECKF(memcmp(ta, seq0, 8 * sizeof *ta) == 0 && memcmp(ga, seq0 + 1, 8 * sizeof *ga) == 0 &&
		       memcmp(ta + 8, seq1, 8 * sizeof *ta) == 0 && memcmp(ga + 8, seq1 + 1, 8 * sizeof *ga) == 0,
		       "the synthetic stream's golden values (seed 42)");
		token_source_free(&g);
	}
	token_source_free(&a);
	token_source_free(&b);
	token_source_free(&c);

	/* the repeating stream: period 16 of distinct tokens */
	{
		struct token_source r;
		int32_t t[64], g[64];
		int distinct = 1;

		token_source_open(&r, "synthetic:repeat", mc, 64, 42, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err);
		token_source_next(&r, t, g, NULL, 1, err, sizeof err);
		for (int i = 0; i + REPEAT_PERIOD < 64; i++)
			CHECKF(t[i] == t[i + REPEAT_PERIOD], "repeat: token %d != token %d", i, i + REPEAT_PERIOD);
		for (int i = 0; i < REPEAT_PERIOD; i++)
			for (int j = 0; j < i; j++)
				distinct &= t[i] != t[j];
		CHECKF(distinct, "repeat: one period has 16 distinct tokens");
		{
			/* seed 42, vocabulary 256: armlib.repeat_cycle must give the
			 * same (tests/timing.bats holds the same numbers) */
			static const int32_t cycle[REPEAT_PERIOD] = { 215, 102, 105, 136, 140, 37, 135, 133,
			                                              195, 65, 116, 9, 248, 250, 197, 92 };

			CHECKF(memcmp(t, cycle, sizeof cycle) == 0, "the repeating stream's golden values (seed 42)");
		}
		token_source_free(&r);
	}
}

static void check_raw(const struct model_config *mc)
{
	uint16_t u16[10];
	uint32_t u32[10];
	struct token_source s;
	int32_t t[2 * 4], g[2 * 4];
	char err[512], *path;

	for (int i = 0; i < 10; i++) {
		u16[i] = (uint16_t)(100 + i);
		u32[i] = (uint32_t)(200 + i);
	}
	path = write_file("tokens.u16", u16, sizeof u16);
	CHECKF(token_source_open(&s, path, mc, 4, 42, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) == 0, "u16: %s", err);
	/* windows of S+1 = 5: [100..104], [105..109], then wrap to [100..104] */
	token_source_next(&s, t, g, NULL, 2, err, sizeof err);
	CHECKF(t[0] == 100 && t[3] == 103 && g[3] == 104 && t[4] == 105 && g[7] == 109,
	         "u16 windows: %d %d %d %d %d", t[0], t[3], g[3], t[4], g[7]);
	token_source_next(&s, t, g, NULL, 1, err, sizeof err);
	CHECKF(t[0] == 100 && g[3] == 104, "u16 wraps: %d %d", t[0], g[3]);
	token_source_free(&s);
	free(path);

	path = write_file("tokens.u32", u32, sizeof u32);
	CHECKF(token_source_open(&s, path, mc, 4, 42, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) == 0, "u32: %s", err);
	token_source_next(&s, t, g, NULL, 1, err, sizeof err);
	CHECKF(t[0] == 200 && g[3] == 204, "u32 values: %d %d", t[0], g[3]);
	token_source_free(&s);
	free(path);

	u16[7] = 300; /* the tiny model's vocabulary is 256 */
	path = write_file("big.u16", u16, sizeof u16);
	CHECKF(token_source_open(&s, path, mc, 4, 42, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) < 0, "a token >= vocab must fail");
	CHECKF(strstr(err, "token 300 at index 7") && strstr(err, "big.u16") && strstr(err, "256"), "message: %s", err);
	free(path);

	path = write_file("odd.u16", u16, 5);
	CHECKF(token_source_open(&s, path, mc, 4, 42, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) < 0 && strstr(err, "odd.u16"),
	         "an odd byte count must fail: %s", err);
	free(path);
}

static void check_files(const struct model_config *mc)
{
	const char *jsonl = "{\"input_ids\": [5, 6, 7, 8, 9, 10]}\n{\"input_ids\": [11, 12, 13]}\n";
	const char *bad = "{\"input_ids\": [5, 6]}\n{\"input_ids\": [1, 999]}\n";
	struct token_source s;
	int32_t t[4], g[4];
	char err[1024], *path;
	int seen5 = 0;

	path = write_file("ids.jsonl", jsonl, strlen(jsonl));
	CHECKF(token_source_open(&s, path, mc, 4, 42, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) == 0, "jsonl: %s", err);
	for (int i = 0; i < 6; i++) {
		token_source_next(&s, t, g, NULL, 1, err, sizeof err);
		for (int j = 0; j < 4; j++) {
			seen5 |= t[j] == 5 && g[j] == 6;
			/* -100: an EOS never predicts the next document's first token */
			CHECKF(g[j] == -1 || g[j] == -100 || (g[j] >= 5 && g[j] <= 13) || g[j] == mc->eos_token_id,
			       "target %d", g[j]);
		}
	}
	CHECKF(seen5, "jsonl: token 5 predicts 6");
	token_source_free(&s);
	free(path);

	path = write_file("bad.jsonl", bad, strlen(bad));
	CHECKF(token_source_open(&s, path, mc, 4, 42, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) < 0, "jsonl with token 999 must fail");
	CHECKF(strstr(err, "999") && strstr(err, "256"), "message: %s", err);
	free(path);

	path = xasprintf("%s/missing.jsonl", dir);
	CHECKF(token_source_open(&s, path, mc, 4, 42, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) < 0 && strstr(err, "missing.jsonl"),
	         "a missing dataset must fail naming it: %s", err);
	free(path);
	CHECKF(token_source_open(&s, "no-such-org/no-such-data", mc, 4, 42, TRAIN_ON_DEFAULT, NULL, NULL, err, sizeof err) < 0 &&
	         strstr(err, "no-such-org/no-such-data"), "an unknown dataset id must fail naming it: %s", err);
}

int main(void)
{
	struct model_config mc;
	char cmd[128];

	set_progname("test_train_data");
	/* keep the HF cache out of it */
	setenv("HF_HOME", "/nonexistent-poros-hf-home", 1);
	unsetenv("HF_HUB_CACHE");
	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	mc = tiny();
	check_synthetic(&mc);
	check_raw(&mc);
	check_files(&mc);
	model_config_free(&mc);
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "test_train_data: could not remove %s\n", dir);
	fprintf(stderr, "test_train_data: %s\n", failures ? "FAILED" : "ok");
	return failures != 0;
}
