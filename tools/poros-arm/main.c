/* poros-arm: runs each cell's arm in a fresh child process and writes one
 * RunArtifact per cell (OUTDIR/<method>_<arch>_<precision>.json), printing
 * it as one JSON line.  Cells come as files, or as JSONL on stdin. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arm.h"
#include "cell.h"
#include "jsonl.h"
#include "util.h"

#define SYNOPSIS "usage: poros-arm [-v] [-o DIR] [--timeout SECONDS] [--kill-grace SECONDS] " \
	"[--log-max BYTES] [CELL.json ...]\n"

static int worst(int a, int b)
{
	return a > b ? a : b;
}

static int run_file(const struct arm_options *o, const char *path, int index, int total)
{
	char err[512];
	cJSON *cell = json_read_file(path, err, sizeof err);
	int rc;

	if (cell == NULL) {
		warnmsg("%s", err);
		return EXIT_USAGE;
	}
	if (!cJSON_IsObject(cell)) {
		warnmsg("%s: not a JSON object (expected a cell)", path);
		cJSON_Delete(cell);
		return EXIT_USAGE;
	}
	rc = arm_run_cell(o, cell, path, path, index, total);
	cJSON_Delete(cell);
	return rc;
}

/* Cells as JSON Lines; a bad line is reported and the rest still run. */
static int run_stream(const struct arm_options *o, FILE *f, const char *name, int *index)
{
	struct jsonl_reader r;
	cJSON *cell;
	int got, rc = EXIT_OK;

	jsonl_init(&r, f, name);
	while ((got = jsonl_next(&r, &cell)) != 0 && !child_interrupted_by()) {
		char *where;
		if (got < 0) {
			/* a path where a cell belongs: poros-expand without --jsonl */
			int looks_like_path = r.buf && r.buf[0] != '{' && r.buf[0] != '[' && strchr(r.buf, '.');
			warnmsg("%s:%ld: %s%s", name, r.line, r.err,
			        looks_like_path ? " (cell file paths go on the command line: "
			                          "poros-expand SPEC | xargs poros-arm)" : "");
			rc = EXIT_USAGE;
			if (ferror(f))
				break;
			continue;
		}
		where = xasprintf("%s:%ld", name, r.line);
		rc = worst(rc, arm_run_cell(o, cell, NULL, where, ++*index, 0));
		free(where);
		cJSON_Delete(cell);
	}
	jsonl_free(&r);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"output-dir", required_argument, NULL, 'o'}, {"timeout", required_argument, NULL, 't'},
		{"kill-grace", required_argument, NULL, 'g'}, {"log-max", required_argument, NULL, 'l'},
		{"verbose", no_argument, NULL, 'v'}, {"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'}, {NULL, 0, NULL, 0},
	};
	struct arm_options o = {.timeout_s = -1, .kill_grace_s = 10, .log_max = 16LL << 20};
	int ch, rc = EXIT_OK, index = 0, total;

	set_progname(argv[0]);
	stdout_check_at_exit();
	while ((ch = getopt_long(argc, argv, "o:vhV", longopts, NULL)) != -1) {
		switch (ch) {
		case 'o': o.outdir = optarg; break;
		case 't': o.timeout_s = opt_double("--timeout", optarg, 0, 1e7); break;
		case 'g': o.kill_grace_s = opt_double("--kill-grace", optarg, 0, 3600); break;
		case 'l': o.log_max = opt_bytes("--log-max", optarg); break;
		case 'v': o.verbose = 1; break;
		case 'h': fputs(SYNOPSIS, stdout); return EXIT_OK;
		case 'V': print_version(); return EXIT_OK;
		default: fputs(SYNOPSIS, stderr); return EXIT_USAGE;
		}
	}
	if (o.outdir && cell_output_dir_problem(o.outdir))
		die(EXIT_USAGE, "-o: %s: %s (the cell's output_dir rules apply)", o.outdir,
		    cell_output_dir_problem(o.outdir));
	if (o.log_max < 4096)
		die(EXIT_USAGE, "--log-max: too small: %lld (at least 4096 bytes)", o.log_max);
	child_signals_init();

	/* Numbered "[i/n]" when every input is a file; a stream's length is unknown. */
	total = argc - optind;
	for (int i = optind; i < argc; i++)
		if (strcmp(argv[i], "-") == 0)
			total = 0;
	if (optind == argc)
		rc = run_stream(&o, stdin, "<stdin>", &index);
	for (int i = optind; i < argc && !child_interrupted_by(); i++) {
		if (strcmp(argv[i], "-") == 0)
			rc = worst(rc, run_stream(&o, stdin, "<stdin>", &index));
		else
			rc = worst(rc, run_file(&o, argv[i], ++index, total));
	}
	if (child_interrupted_by())
		die(EXIT_RUNTIME, "interrupted by %s", signal_name(child_interrupted_by()));
	return rc;
}
