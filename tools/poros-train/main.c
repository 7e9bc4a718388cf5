/* poros-train: fine-tunes a LoRA adapter with the frozen base streamed to
 * the device a block of layers at a time (or resident, for comparison).
 * Reads a cell (or flags), writes events.jsonl and the adapter into the
 * run directory, and prints one summary line on stdout. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "jsonl.h"
#include "train.h"
#include "util.h"

static noreturn void usage(int code)
{
	fputs(TRAIN_SYNOPSIS, code == EXIT_OK ? stdout : stderr);
	exit(code);
}

int main(int argc, char **argv)
{
	/* long options only: values above any character getopt returns */
#define LONG_ONLY(id) (256 + (id))
	enum { OPT_HELP = OPT_COUNT, OPT_VERSION };
	static const struct option longopts[] = {
		{ "cell", required_argument, NULL, LONG_ONLY(OPT_CELL) },
		{ "model", required_argument, NULL, LONG_ONLY(OPT_MODEL) },
		{ "mode", required_argument, NULL, LONG_ONLY(OPT_MODE) },
		{ "precision", required_argument, NULL, LONG_ONLY(OPT_PRECISION) },
		{ "steps", required_argument, NULL, LONG_ONLY(OPT_STEPS) },
		{ "seq-len", required_argument, NULL, LONG_ONLY(OPT_SEQ_LEN) },
		{ "batch-size", required_argument, NULL, LONG_ONLY(OPT_BATCH_SIZE) },
		{ "accum", required_argument, NULL, LONG_ONLY(OPT_ACCUM) },
		{ "rank", required_argument, NULL, LONG_ONLY(OPT_RANK) },
		{ "alpha", required_argument, NULL, LONG_ONLY(OPT_ALPHA) },
		{ "dropout", required_argument, NULL, LONG_ONLY(OPT_DROPOUT) },
		{ "targets", required_argument, NULL, LONG_ONLY(OPT_TARGETS) },
		{ "block-size", required_argument, NULL, LONG_ONLY(OPT_BLOCK_SIZE) },
		{ "no-prefetch", no_argument, NULL, LONG_ONLY(OPT_NO_PREFETCH) },
		{ "lr", required_argument, NULL, LONG_ONLY(OPT_LR) },
		{ "lr-schedule", required_argument, NULL, LONG_ONLY(OPT_LR_SCHEDULE) },
		{ "warmup", required_argument, NULL, LONG_ONLY(OPT_WARMUP) },
		{ "lr-warmup", required_argument, NULL, LONG_ONLY(OPT_LR_WARMUP) },
		{ "weight-decay", required_argument, NULL, LONG_ONLY(OPT_WEIGHT_DECAY) },
		{ "max-grad-norm", required_argument, NULL, LONG_ONLY(OPT_MAX_GRAD_NORM) },
		{ "seed", required_argument, NULL, LONG_ONLY(OPT_SEED) },
		{ "dataset", required_argument, NULL, LONG_ONLY(OPT_DATASET) },
		{ "tokenizer", required_argument, NULL, LONG_ONLY(OPT_TOKENIZER) },
		{ "train-on", required_argument, NULL, LONG_ONLY(OPT_TRAIN_ON) },
		{ "backend", required_argument, NULL, LONG_ONLY(OPT_BACKEND) },
		{ "vram-budget", required_argument, NULL, LONG_ONLY(OPT_VRAM_BUDGET) },
		{ "configs", required_argument, NULL, LONG_ONLY(OPT_CONFIGS) },
		{ "out", required_argument, NULL, LONG_ONLY(OPT_OUT) },
		{ "init-adapter", required_argument, NULL, LONG_ONLY(OPT_INIT_ADAPTER) },
		{ "save-every", required_argument, NULL, LONG_ONLY(OPT_SAVE_EVERY) },
		{ "quiet", no_argument, NULL, LONG_ONLY(OPT_QUIET) },
		{ "gradient-checkpointing", required_argument, NULL, LONG_ONLY(OPT_GRAD_CKPT) },
		{ "resume", required_argument, NULL, LONG_ONLY(OPT_RESUME) },
		{ "eval-dataset", required_argument, NULL, LONG_ONLY(OPT_EVAL_DATASET) },
		{ "eval-every", required_argument, NULL, LONG_ONLY(OPT_EVAL_EVERY) },
		{ "plan", no_argument, NULL, LONG_ONLY(OPT_PLAN) },
		{ "help", no_argument, NULL, LONG_ONLY(OPT_HELP) },
		{ "version", no_argument, NULL, LONG_ONLY(OPT_VERSION) },
		{ NULL, 0, NULL, 0 },
	};
	char *value[OPT_COUNT] = { NULL };
	struct train_config cfg;
	int ch, rc;

	set_progname(argv[0]);
	stdout_check_at_exit();
	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (ch == LONG_ONLY(OPT_HELP))
			usage(EXIT_OK);
		if (ch == LONG_ONLY(OPT_VERSION))
			print_version();
		if (ch < LONG_ONLY(0) || ch >= LONG_ONLY(OPT_COUNT))
			usage(EXIT_USAGE);
		value[ch - LONG_ONLY(0)] = optarg ? optarg : "1";
	}
	if (optind != argc) {
		warnmsg("unexpected argument \"%s\" (a cell is given with --cell)", argv[optind]);
		usage(EXIT_USAGE);
	}
	train_config_from_options(&cfg, value);
	rc = train_run(&cfg, stdout);
	train_config_free(&cfg);
	return rc;
}
