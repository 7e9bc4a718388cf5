/* poros-render: results (and parity) JSONL in, report.html or report.md out. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/util.h"
#include "render.h"

static const char synopsis[] =
	"usage: poros-render --html|--md [-o FILE] [--spec SPEC.json] [--runs-from DIR] [FILE|DIR|- ...]\n";

static noreturn void usage(void)
{
	fputs(synopsis, stderr);
	exit(EXIT_USAGE);
}

static void help(void)
{
	fputs(synopsis, stdout);
	fputs("Renders RunArtifacts and poros.parity/1 records (JSONL files, artifact directories,\n"
	      "stdin when none) as one self-contained HTML page or a GitHub Markdown document.\n"
	      "  --html      report.html: inline CSS and SVG charts, no script, no external URL\n"
	      "  --md        report.md: the same tables in Markdown\n"
	      "  -o FILE     write FILE atomically instead of stdout\n"
	      "  --spec SPEC.json  use only the artifacts of the spec's cells as they are now (its\n"
	      "              config_hashes), name the others as ignored and the cells with no\n"
	      "              artifact as not measured; a lone DIR input with a spec.json uses it\n"
	      "  --runs-from DIR  read each cell's curves from DIR/<run_dir>/events.jsonl (the\n"
	      "              bench's output directory) instead of beside its artifact's file\n"
	      "  --help, --version\n"
	      "Exit status: 0 ok, 1 an input could not be read or the output written, 2 usage, or a\n"
	      "malformed line was reported and skipped (the report is still written without it).\n", stdout);
	exit(EXIT_OK);
}

enum format { FORMAT_NONE, FORMAT_HTML, FORMAT_MD };

static void set_format(enum format *f, enum format want)
{
	if (*f != FORMAT_NONE && *f != want)
		die(EXIT_USAGE, "--html and --md: choose one");
	*f = want;
}

static int read_inputs(struct report *r, char *const *paths, int n)
{
	long bad = 0;
	int status = EXIT_OK;

	if (n == 0 && report_read_path("-", report_record, r, &bad) < 0)
		status = EXIT_RUNTIME;
	for (int i = 0; i < n; i++)
		if (report_read_path(paths[i], report_record, r, &bad) < 0)
			status = EXIT_RUNTIME;
	if (status == EXIT_OK && bad > 0) {
		warnmsg("%ld malformed line%s or file%s skipped", bad, bad == 1 ? "" : "s", bad == 1 ? "" : "s");
		status = EXIT_USAGE;
	}
	return status;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "html", no_argument, NULL, 'H' },
		{ "md", no_argument, NULL, 'M' },
		{ "output", required_argument, NULL, 'o' },
		{ "spec", required_argument, NULL, 'S' },
		{ "runs-from", required_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	enum format format = FORMAT_NONE;
	const char *out_path = NULL, *spec = NULL;
	char *dir_spec = NULL;
	char err[512];
	struct report r;
	struct sbuf doc;
	int c, status, spec_rc;

	set_progname(argv[0]);
	stdout_check_at_exit();
	while ((c = getopt_long(argc, argv, "ho:", longopts, NULL)) != -1) {
		switch (c) {
		case 'H': set_format(&format, FORMAT_HTML); break;
		case 'M': set_format(&format, FORMAT_MD); break;
		case 'o': out_path = optarg; break;
		case 'S': spec = optarg; break;
		case 'R': set_runs_from(optarg); break;
		case 'h': help(); break;
		case 'V': print_version();
		default: usage();
		}
	}
	if (format == FORMAT_NONE)
		usage();

	report_init(&r);
	/* one artifact directory: held against the spec.json poros-expand wrote beside its artifacts */
	if (spec == NULL)
		spec = dir_spec = report_dir_spec(argv + optind, argc - optind);
	if (dir_spec != NULL && report_use_spec(&r, dir_spec, err, sizeof err) < 0) {
		warnmsg("%s: the artifacts are not held against a spec", err);
		free(dir_spec);
		spec = dir_spec = NULL;
	}
	if (spec != NULL && dir_spec == NULL && (spec_rc = report_use_spec(&r, spec, err, sizeof err)) < 0) {
		warnmsg("--spec: %s", err);
		report_free(&r);
		free(dir_spec);
		return spec_rc == -2 ? EXIT_RUNTIME : EXIT_USAGE;
	}
	status = read_inputs(&r, argv + optind, argc - optind);
	/* An input that could not be read would make a silently partial report. */
	if (status == EXIT_RUNTIME) {
		report_free(&r);
		free(dir_spec);
		return status;
	}
	report_spec_missing(&r);
	report_organize(&r);
	sb_init(&doc);
	if (format == FORMAT_HTML)
		render_html(&doc, &r);
	else
		render_md(&doc, &r);
	if (out_path != NULL) {
		if (atomic_write(out_path, doc.s, doc.len) < 0)
			diesys(EXIT_RUNTIME, "%s", out_path);
	} else if (fwrite(doc.s, 1, doc.len, stdout) != doc.len) {
		diesys(EXIT_RUNTIME, "writing output failed");
	}
	sb_free(&doc);
	report_free(&r);
	free(dir_spec);
	return status;
}
