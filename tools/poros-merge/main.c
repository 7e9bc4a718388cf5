/* poros-merge: results.jsonl files and artifact directories into one row
 * per cell; --compare for two runs side by side; --append-to for adding
 * result lines safely. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "util/util.h"
#include "merge.h"

static const char synopsis[] =
	"usage: poros-merge [--spec SPEC.json] [FILE|DIR|- ...]\n"
	"       poros-merge --compare [--md|--table] A B\n"
	"       poros-merge --append-to FILE [--if-missing [ARTIFACT.json|- ...]]\n";

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
	      "  --spec SPEC.json  only the artifacts of SPEC.json's cells as they are now (their\n"
	      "                    config_hash), in its cell order, each model named as the spec\n"
	      "                    names it now; exit 2 when there are none\n"
	      "  --compare A B     per cell of either run: s/step, tokens/s, VRAM peak of A and B,\n"
	      "                    delta B-A, ratio B/A and whether it is inside the s/step spread\n"
	      "                    (JSONL; --md a Markdown table, --table a plain one); a directory\n"
	      "                    with a spec.json gives its current cells in spec order; warns on\n"
	      "                    stderr per cell whose configuration differs and when the\n"
	      "                    environments differ (GPU, driver, CUDA, versions, commit)\n"
	      "  --append-to FILE  append each JSON line of stdin to FILE (one write + fsync per line)\n"
	      "  --if-missing      with --append-to: only the artifacts (files, or lines on stdin) that FILE\n"
	      "                    lacks, by cell_id and finished_at\n"
	      "  --help, --version\n"
	      "Exit status: 0 ok, 1 an input or output could not be read or written, 2 usage, or a\n"
	      "malformed line or file was reported and skipped (every good row is still written).\n",
	      stdout);
	exit(EXIT_OK);
}

static int run_merge(char *const *paths, int n, const char *spec_path)
{
	static char *const from_stdin[] = { "-" };
	struct current_spec cs;
	struct result_set s;
	char err[512];
	int status;

	if (spec_path && current_spec_load(&cs, spec_path, err, sizeof err) < 0)
		die(EXIT_USAGE, "--spec: %s", err);
	results_init(&s);
	if (n == 0) {
		paths = from_stdin;
		n = 1;
	}
	status = merge_inputs(&s, paths, n, spec_path ? &cs : NULL);
	if (merge_write(stdout, &s) < 0)
		diesys(EXIT_RUNTIME, "writing output failed");
	/* A report of nothing would look like a report. */
	if (spec_path && s.n == 0 && status != EXIT_RUNTIME) {
		warnmsg("%s: no artifact of its cells as they are now", spec_path);
		status = EXIT_USAGE;
	}
	results_free(&s);
	if (spec_path)
		current_spec_free(&cs);
	return status;
}

/* One side of --compare: a directory with a spec.json is its current
 * cells (in spec order); anything else every artifact it holds. */
static int read_side(struct result_set *s, const char *path, const char *side)
{
	char *const paths[] = { (char *)path };
	char *spec = xasprintf("%s/spec.json", path), err[512];
	struct current_spec cs;
	struct stat st;
	int rc, have_spec = 0;

	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode) && stat(spec, &st) == 0) {
		have_spec = current_spec_load(&cs, spec, err, sizeof err) == 0;
		if (!have_spec)
			warnmsg("warning: %s: %s; comparing every artifact of %s", side, err, path);
	}
	rc = merge_inputs(s, paths, 1, have_spec ? &cs : NULL);
	if (have_spec)
		current_spec_free(&cs);
	free(spec);
	return rc;
}

static int run_compare(const char *a_path, const char *b_path, enum compare_format format)
{
	struct result_set a, b;
	int sa, sb, status;

	results_init(&a);
	results_init(&b);
	sa = read_side(&a, a_path, "A");
	sb = read_side(&b, b_path, "B");
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
		{ "table", no_argument, NULL, 't' },
		{ "spec", required_argument, NULL, 's' },
		{ "append-to", required_argument, NULL, 'a' },
		{ "if-missing", no_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *append_to = NULL, *spec = NULL;
	int compare = 0, md = 0, table = 0, if_missing = 0, c;

	set_progname(argv[0]);
	stdout_check_at_exit();
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': compare = 1; break;
		case 'm': md = 1; break;
		case 't': table = 1; break;
		case 's': spec = optarg; break;
		case 'a': append_to = optarg; break;
		case 'i': if_missing = 1; break;
		case 'h': help(); break;
		case 'V': print_version();
		default: usage();
		}
	}
	argc -= optind;
	argv += optind;
	if ((compare && append_to) || (if_missing && !append_to) || ((md || table) && !compare) || (md && table) || (spec && (compare || append_to)))
		usage();
	if (if_missing)
		return append_missing(append_to, argv, argc);
	if (append_to) {
		if (argc != 0)
			usage();
		return append_lines(append_to, stdin, "<stdin>");
	}
	if (compare) {
		if (argc != 2)
			usage();
		return run_compare(argv[0], argv[1], md ? COMPARE_MD : table ? COMPARE_TABLE : COMPARE_JSONL);
	}
	return run_merge(argv, argc, spec);
}
