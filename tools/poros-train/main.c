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
#define TRAIN_LONGOPT(id, name, has_arg) { name, has_arg ? required_argument : no_argument, NULL, LONG_ONLY(OPT_##id) },
		TRAIN_OPTIONS(TRAIN_LONGOPT)
#undef TRAIN_LONGOPT
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
