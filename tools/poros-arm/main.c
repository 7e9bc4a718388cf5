/* poros-arm: runs each cell's arm in a fresh child process and writes one
 * RunArtifact per cell (OUTDIR/<method>_<arch>_<precision>.json), printing
 * it as one JSON line.  Cells come as files, or as JSONL on stdin; one
 * after another, or with --gpus several at once, one per GPU (pool.c). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arm.h"
#include "records/records.h"
#include "util/util.h"

#define SYNOPSIS "usage: poros-arm [-v] [-o DIR] [--timeout SECONDS] [--kill-grace SECONDS] " \
	"[--log-max BYTES] [--gpus LIST] [--progress LABEL] [CELL.json ...]\n"

static int worst(int a, int b)
{
	return a > b ? a : b;
}

static void stream_error(const struct jsonl_reader *r, const char *name)
{
	/* a path where a cell belongs: poros-expand without --jsonl */
	int looks_like_path = r->buf && r->buf[0] != '{' && r->buf[0] != '[' && strchr(r->buf, '.');

	warnmsg("%s:%ld: %s%s", name, r->line, r->err,
	        looks_like_path ? " (cell file paths go on the command line: "
	                          "poros-expand SPEC | xargs poros-arm)" : "");
}

/* Each cell of the JSON Lines stream f to take (which owns it), to the end
 * or, when interruptible, to an interrupt; a bad line is reported and
 * skipped.  The worst of EXIT_USAGE (after a bad line) and take's returns. */
static int each_stream_cell(FILE *f, const char *name, int interruptible,
                            int (*take)(void *ctx, cJSON *cell, const char *name, long line), void *ctx)
{
	struct jsonl_reader r;
	cJSON *cell;
	int got, rc = EXIT_OK;

	jsonl_init(&r, f, name);
	while ((got = jsonl_next(&r, &cell)) != 0 && !(interruptible && child_interrupted_by())) {
		if (got < 0) {
			stream_error(&r, name);
			rc = EXIT_USAGE;
			if (ferror(f))
				break;
			continue;
		}
		rc = worst(rc, take(ctx, cell, name, r.line));
	}
	jsonl_free(&r);
	return rc;
}

struct run_ctx {
	const struct arm_options *o;
	int *index;
};

static int run_one(void *ctx, cJSON *cell, const char *name, long line)
{
	struct run_ctx *c = ctx;
	char *where = xasprintf("%s:%ld", name, line);
	int rc = arm_run_cell(c->o, cell, NULL, where, ++*c->index, 0);

	free(where);
	cJSON_Delete(cell);
	return rc;
}

/* Cells as JSON Lines; a bad line is reported and the rest still run. */
static int run_stream(const struct arm_options *o, FILE *f, const char *name, int *index)
{
	struct run_ctx c = { o, index };

	return each_stream_cell(f, name, 1, run_one, &c);
}

/* --gpus 0,1,3: GPU indices, each once.  Returns how many; gpus gets
 * pointers into list (which is cut at the commas). */
#define POOL_MAX_GPUS 256
static int parse_gpus(char *list, char **gpus)
{
	char *g, *end = list + strlen(list);
	int n = 0;

	/* strtok would pass over an empty item: "0,,1" and "0," must be refused */
	for (g = list; g <= end; g += strlen(g) + 1) {
		char *comma = strchr(g, ',');

		if (comma)
			*comma = '\0';
		if (*g == '\0' || strspn(g, "0123456789") != strlen(g) || strlen(g) > 6)
			die(EXIT_USAGE, "--gpus: \"%s\" is not a GPU index (expected a list such as 0,1,2,3)", g);
		for (int i = 0; i < n; i++)
			if (strcmp(gpus[i], g) == 0)
				die(EXIT_USAGE, "--gpus: GPU %s is listed twice", g);
		if (n == POOL_MAX_GPUS)
			die(EXIT_USAGE, "--gpus: more than %d GPUs", POOL_MAX_GPUS);
		gpus[n++] = g;
		if (!comma)
			break;
	}
	return n;
}

struct collect_ctx {
	struct pool_cell **cells;
	int *n, *index;
};

static int collect_one(void *ctx, cJSON *cell, const char *name, long line)
{
	struct collect_ctx *c = ctx;

	*c->cells = xrealloc(*c->cells, (size_t)(*c->n + 1) * sizeof **c->cells);
	(*c->cells)[(*c->n)++] = (struct pool_cell){
		.cell = cell, .where = xasprintf("%s:%ld", name, line), .index = ++*c->index, .total = 0,
		.gpus = pool_cell_gpus(cell),
	};
	return EXIT_OK;
}

/* The cells of a stream, for the pool; bad lines reported as run_stream does. */
static int collect_stream(struct pool_cell **cells, int *n, FILE *f, const char *name, int *index)
{
	struct collect_ctx c = { cells, n, index };

	return each_stream_cell(f, name, 0, collect_one, &c);
}

/* The GPUs the cell in a file asks for; 1 when it cannot be read (its
 * worker says why). */
static int file_gpus(const char *path)
{
	char err[512];
	cJSON *cell = json_read_file(path, err, sizeof err);
	int n = pool_cell_gpus(cell);

	cJSON_Delete(cell);
	return n;
}

/* --gpus: every cell first (files by name, streams read whole), then the pool. */
static int run_pool(const struct arm_options *o, char **args, int nargs, int total, char *const *gpus, int ngpus)
{
	struct pool_cell *cells = NULL;
	int n = 0, index = 0, rc = EXIT_OK;

	if (nargs == 0)
		rc = collect_stream(&cells, &n, stdin, "<stdin>", &index);
	for (int i = 0; i < nargs; i++) {
		if (strcmp(args[i], "-") == 0) {
			rc = worst(rc, collect_stream(&cells, &n, stdin, "<stdin>", &index));
			continue;
		}
		cells = xrealloc(cells, (size_t)(n + 1) * sizeof *cells);
		cells[n++] = (struct pool_cell){.path = args[i], .index = ++index, .total = total, .gpus = file_gpus(args[i])};
	}
	rc = worst(rc, arm_run_pool(o, cells, n, gpus, ngpus));
	for (int i = 0; i < n; i++) {
		cJSON_Delete(cells[i].cell);
		free(cells[i].where);
	}
	free(cells);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"output-dir", required_argument, NULL, 'o'}, {"timeout", required_argument, NULL, 't'},
		{"kill-grace", required_argument, NULL, 'g'}, {"log-max", required_argument, NULL, 'l'},
		{"verbose", no_argument, NULL, 'v'}, {"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'}, {"gpus", required_argument, NULL, 'G'},
		{"progress", required_argument, NULL, 'P'},
		{NULL, 0, NULL, 0},
	};
	struct arm_options o = {.timeout_s = -1, .kill_grace_s = 10, .log_max = 16LL << 20};
	int ch, rc = EXIT_OK, index = 0, total;
	char *gpu_list = NULL, *gpus[POOL_MAX_GPUS];
	int ngpus = 0;

	set_progname(argv[0]);
	stdout_check_at_exit();
	while ((ch = getopt_long(argc, argv, "o:vhV", longopts, NULL)) != -1) {
		switch (ch) {
		case 'o': o.outdir = optarg; break;
		case 't': o.timeout_s = opt_double("--timeout", optarg, 0, 1e7); break;
		case 'g': o.kill_grace_s = opt_double("--kill-grace", optarg, 0, 3600); break;
		case 'l': o.log_max = opt_bytes("--log-max", optarg); break;
		case 'v': o.verbose = 1; break;
		case 'G': gpu_list = optarg; break;
		case 'P': o.progress = optarg; break;
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
	if (gpu_list)
		ngpus = parse_gpus(gpu_list, gpus);
	child_signals_init();

	/* Numbered "[i/n]" when every input is a file; a stream's length is unknown. */
	total = argc - optind;
	for (int i = optind; i < argc; i++)
		if (strcmp(argv[i], "-") == 0)
			total = 0;
	if (ngpus > 0)
		rc = run_pool(&o, argv + optind, argc - optind, total, gpus, ngpus);
	else if (optind == argc)
		rc = run_stream(&o, stdin, "<stdin>", &index);
	for (int i = optind; i < argc && ngpus == 0 && !child_interrupted_by(); i++) {
		if (strcmp(argv[i], "-") == 0)
			rc = worst(rc, run_stream(&o, stdin, "<stdin>", &index));
		else
			rc = worst(rc, arm_run_file(&o, argv[i], ++index, total));
	}
	if (child_interrupted_by())
		die(EXIT_RUNTIME, "interrupted by %s", signal_name(child_interrupted_by()));
	return rc;
}
