/* poros-cell: what the poros driver asks of records and of an output
 * directory: named fields of JSON records (get), where each cell stands
 * (state) and which poros and resident cells pair for parity (pairs). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"
#include "query.h"

static const char synopsis[] =
	"usage: poros-cell get [--json | --raw] [--null TEXT] FIELD[,FIELD...] [FILE|- ...]\n"
	"       poros-cell state DIR\n"
	"       poros-cell pairs DIR\n";

static noreturn void usage(void)
{
	fputs(synopsis, stderr);
	exit(EXIT_USAGE);
}

static void help(void)
{
	fputs(synopsis, stdout);
	fputs("get: per JSON object of the inputs (FILE.json: one object; any other FILE, or - and\n"
	      "stdin when none: JSON Lines), the values of the dotted paths (model.arch), tab-separated\n"
	      "on one line: strings with \\\\ \\t \\n \\r escaped, numbers in the shortest digits that\n"
	      "read back, null or missing as TEXT (default: nothing).  A cell's paths must be fields\n"
	      "of poros.cell/1.\n"
	      "  --json       one JSON array per record instead (null for null or missing)\n"
	      "  --raw        one FIELD: its string as it is, unescaped\n"
	      "  --null TEXT  what null or a missing field prints\n"
	      "state DIR: per cell of DIR/spec.json, in its order, \"CELL_ID<TAB>STATE\": none (no\n"
	      "artifact), ok, failed (another status), stale (it measured another configuration, or\n"
	      "does not read as an artifact).\n"
	      "pairs DIR: per poros cell of DIR/spec.json with a resident cell of the same model and\n"
	      "precision: ARCH PRECISION POROS_ID RESIDENT_ID STATE POROS_RUN RESIDENT_RUN, tab-separated;\n"
	      "STATE ready (both ok and current, their cells differ only in method, both runs kept\n"
	      "an adapter: the runs, relative to DIR, follow), differ, unmeasured or no-adapter.\n"
	      "  --help, --version\n"
	      "Exit status: 0 ok, 1 an input could not be read, 2 usage, a bad spec.json or cell file,\n"
	      "or a malformed record (reported with file:line and skipped).\n",
	      stdout);
	exit(EXIT_OK);
}

static int cmd_get(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "raw", no_argument, NULL, 'r' },
		{ "null", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct get_options o = { GET_TSV, "" };
	int json = 0, raw = 0, null_given = 0, c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'j': json = 1; break;
		case 'r': raw = 1; break;
		case 'n': o.null_text = optarg; null_given = 1; break;
		case 'h': help(); break;
		default: usage();
		}
	}
	if (json && raw)
		die(EXIT_USAGE, "get: --json and --raw: choose one");
	if (json && null_given)
		die(EXIT_USAGE, "get: --null: not with --json (null is null there)");
	if (optind >= argc)
		usage();
	o.format = json ? GET_JSON : raw ? GET_RAW : GET_TSV;
	return get_fields(argv[optind], argv + optind + 1, argc - optind - 1, &o);
}

/* state DIR, pairs DIR */
static int cmd_dir(int argc, char **argv, int (*fn)(const char *dir))
{
	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0))
		help();
	if (argc == 3 && strcmp(argv[1], "--") == 0)
		return fn(argv[2]);
	if (argc != 2 || argv[1][0] == '-')
		usage();
	return fn(argv[1]);
}

int main(int argc, char **argv)
{
	set_progname(argv[0]);
	stdout_check_at_exit();
	if (argc < 2)
		usage();
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
		help();
	if (strcmp(argv[1], "--version") == 0)
		print_version();
	if (strcmp(argv[1], "get") == 0)
		return cmd_get(argc - 1, argv + 1);
	if (strcmp(argv[1], "state") == 0)
		return cmd_dir(argc - 1, argv + 1, cell_states);
	if (strcmp(argv[1], "pairs") == 0)
		return cmd_dir(argc - 1, argv + 1, cell_pairs);
	die(EXIT_USAGE, "unknown verb \"%s\" (expected get, state or pairs)", argv[1]);
}
