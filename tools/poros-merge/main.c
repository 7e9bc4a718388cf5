/* poros-merge: results.jsonl files and artifact directories into one row
 * per cell; --compare for two runs side by side; --append-to for adding
 * result lines safely. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "jsonl.h"
#include "merge.h"
#include "util.h"

static const char synopsis[] =
	"usage: poros-merge [FILE|DIR|- ...]\n"
	"       poros-merge --compare [--md] A B\n"
	"       poros-merge --append-to FILE\n";

static noreturn void usage(void)
{
	fputs(synopsis, stderr);
	exit(EXIT_USAGE);
}

static void help(void)
{
	fputs(synopsis, stdout);
	fputs("Merges RunArtifacts (results.jsonl files, artifact directories: every *.json in them;\n"
	      "stdin when none) into one line per cell: the latest finished_at wins.\n"
	      "  --compare A B     per cell of either run: s/step, tokens/s, VRAM peak of A and B,\n"
	      "                    delta B-A and ratio B/A (JSONL; --md for a Markdown table)\n"
	      "  --append-to FILE  append each JSON line of stdin to FILE (one write + fsync per line)\n"
	      "  --help, --version\n"
	      "Exit status: 0 ok, 1 an input or output could not be read or written, 2 usage, or a\n"
	      "malformed line or file was reported and skipped (every good row is still written).\n",
	      stdout);
	exit(EXIT_OK);
}

static int run_merge(char *const *paths, int n)
{
	static char *const from_stdin[] = { "-" };
	struct result_set s;
	int status;

	results_init(&s);
	if (n == 0) {
		paths = from_stdin;
		n = 1;
	}
	status = merge_inputs(&s, paths, n);
	if (merge_write(stdout, &s) < 0)
		diesys(EXIT_RUNTIME, "writing output failed");
	results_free(&s);
	return status;
}

static int run_compare(const char *a_path, const char *b_path, enum compare_format format)
{
	struct result_set a, b;
	char *const pa[] = { (char *)a_path }, *const pb[] = { (char *)b_path };
	int sa, sb, status;

	results_init(&a);
	results_init(&b);
	sa = merge_inputs(&a, pa, 1);
	sb = merge_inputs(&b, pb, 1);
	/* Unreadable input beats malformed lines: it is the worse news. */
	status = (sa == EXIT_RUNTIME || sb == EXIT_RUNTIME) ? EXIT_RUNTIME : sa ? sa : sb;
	if (status != EXIT_RUNTIME && compare_write(stdout, &a, &b, a_path, b_path, format) < 0)
		diesys(EXIT_RUNTIME, "writing output failed");
	results_free(&a);
	results_free(&b);
	return status;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "compare", no_argument, NULL, 'c' },
		{ "md", no_argument, NULL, 'm' },
		{ "append-to", required_argument, NULL, 'a' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *append_to = NULL;
	int compare = 0, md = 0, c;

	set_progname(argv[0]);
	stdout_check_at_exit();
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': compare = 1; break;
		case 'm': md = 1; break;
		case 'a': append_to = optarg; break;
		case 'h': help(); break;
		case 'V': print_version();
		default: usage();
		}
	}
	argc -= optind;
	argv += optind;
	if ((compare && append_to) || (md && !compare))
		usage();
	if (append_to) {
		if (argc != 0)
			usage();
		return append_lines(append_to, stdin, "<stdin>");
	}
	if (compare) {
		if (argc != 2)
			usage();
		return run_compare(argv[0], argv[1], md ? COMPARE_MD : COMPARE_JSONL);
	}
	return run_merge(argv, argc);
}
