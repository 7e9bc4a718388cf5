/* poros-expand: a bench spec (YAML) -> one cell per (model x method x
 * precision), every shared value copied into each.  See man/poros-expand.1
 * and man/poros-spec.5. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "records/records.h"
#include "util/util.h"
#include "output.h"
#include "spec.h"
#include "train_config.h"

static const char synopsis[] = "usage: poros-expand SPEC.yaml [-o DIR] [--jsonl]\n"
	"       poros-expand --train-argv CONFIG.yaml\n"
	"       poros-expand --kind FILE.yaml\n";

static const char help_text[] =
	"\n"
	"Expands a bench spec into one cell per (model x method x precision), in\n"
	"spec order, each carrying every shared value.  By default writes\n"
	"DIR/spec.json and DIR/cells/<cell_id>.json and prints each cell file's\n"
	"path, one per line; nothing is written when anything is wrong.\n"
	"\n"
	"  -o, --output DIR  write under DIR (default: reporting.output_dir,\n"
	"                    itself out/<spec_id>); cells carry DIR as output_dir\n"
	"  --jsonl           print the cells as JSON Lines; write nothing\n"
	"  --train-argv      read a fine-tune config (man 5 poros-train-config) and\n"
	"                    print poros-train's arguments, one per line\n"
	"  --kind            print bench-spec or train-config: which the file is\n"
	"  --help, --version\n"
	"\n"
	"Spec defaults (man 5 poros-spec): hardware gpu_name, vram_gb, pcie_gen null;\n"
	"training batch_size 1, gradient_accumulation_steps 1, warmup_steps 1\n"
	"(0 when steps is 1), dataset synthetic, seed 42, learning_rate 2e-4,\n"
	"lr_schedule constant, weight_decay 0, max_grad_norm 1 (0: no clipping),\n"
	"timeout_s 3600, gradient_checkpointing false; lora rank 16,\n"
	"alpha 2 x rank, dropout 0.05, target_modules all seven projections;\n"
	"poros block_size 4, enable_prefetch true; reporting html, markdown,\n"
	"emit_json true.\n"
	"Required: spec_id, models, methods, precisions, training.steps,\n"
	"training.seq_len.  Exit status: 0 ok, 1 write failure, 2 bad usage or spec.\n";

static noreturn void usage(void)
{
	fputs(synopsis, stderr);
	exit(EXIT_USAGE);
}

/* Every cell as JSON, each checked once more as a whole before anything
 * is printed or written. */
static cJSON **make_cells(const struct spec *s, size_t *n)
{
	cJSON **cells;
	char err[512];

	*n = spec_cell_count(s);
	cells = xcalloc(*n, sizeof *cells);
	for (size_t i = 0; i < *n; i++) {
		struct cell c;

		spec_cell(s, i, &c);
		if (cell_validate(&c, err, sizeof err) < 0)
			die(EXIT_USAGE, "%s: cell %s: %s", s->file, c.cell_id, err);
		if ((cells[i] = cell_to_json(&c)) == NULL)
			die(EXIT_RUNTIME, "out of memory");
		cell_free(&c);
	}
	return cells;
}

static void write_or_undo(struct output_log *log, const char *path, const char *text)
{
	if (output_write(log, path, text, strlen(text)) < 0) {
		warnsys("cannot write %s", path);
		output_rollback(log);
		exit(EXIT_RUNTIME);
	}
}

/* DIR/cells/<id>.json for each cell and DIR/spec.json, then the cell
 * paths on stdout; on a failure, whatever this run wrote is removed. */
static void write_run(const struct spec *s, cJSON **cells, size_t n)
{
	struct output_log log = { 0 };
	char *cells_dir = xasprintf("%s/cells", s->shared.output_dir);
	char *spec_path = xasprintf("%s/spec.json", s->shared.output_dir);
	char **paths = xcalloc(n, sizeof *paths);
	cJSON *spec_json = spec_to_json(s);
	struct stat st;
	char *text;

	if (!spec_json)
		die(EXIT_RUNTIME, "out of memory");
	if (output_mkdirs(&log, cells_dir) < 0) {
		warnsys("cannot create %s", cells_dir);
		output_rollback(&log);
		exit(EXIT_RUNTIME);
	}
	/* Where the output directory lies is the user's choice; a link planted
	 * inside it must not carry the cells (and their renames) elsewhere. */
	if (lstat(cells_dir, &st) == 0 && S_ISLNK(st.st_mode)) {
		warnmsg("%s: is a symbolic link; refusing to write through it", cells_dir);
		output_rollback(&log);
		exit(EXIT_RUNTIME);
	}
	for (size_t i = 0; i < n; i++) {
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(cells[i], "cell_id");
		char *name = xasprintf("%s.json", id->valuestring);

		/* cell_validate made the id a safe name; path_under keeps it so. */
		if ((paths[i] = path_under(cells_dir, name)) == NULL)
			die(EXIT_RUNTIME, "cell file name escapes %s: %s", cells_dir, name);
		free(name);
		text = jsonl_format(cells[i]);
		write_or_undo(&log, paths[i], text);
		free(text);
	}
	text = jsonl_format(spec_json);
	write_or_undo(&log, spec_path, text);
	free(text);
	for (size_t i = 0; i < n; i++) {
		printf("%s\n", paths[i]);
		free(paths[i]);
	}
	free(paths);
	cJSON_Delete(spec_json);
	free(cells_dir);
	free(spec_path);
	output_log_free(&log);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "jsonl", no_argument, NULL, 'j' },
		{ "train-argv", no_argument, NULL, 't' },
		{ "kind", no_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *output_dir = NULL;
	int as_jsonl = 0, train_argv = 0, kind = 0, opt;
	struct spec spec;
	cJSON **cells;
	size_t n;

	set_progname(argv[0]);
	stdout_check_at_exit();
	while ((opt = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'o': output_dir = optarg; break;
		case 'j': as_jsonl = 1; break;
		case 't': train_argv = 1; break;
		case 'k': kind = 1; break;
		case 'h': printf("%s%s", synopsis, help_text); return EXIT_OK;
		case 'V': print_version();
		default: usage();
		}
	}
	if (optind != argc - 1 || train_argv + kind + (as_jsonl || output_dir) > 1)
		usage();
	if (kind) {
		printf("%s\n", config_kind(argv[optind]));
		return EXIT_OK;
	}
	if (train_argv) {
		train_config_print_argv(argv[optind]);
		return EXIT_OK;
	}

	spec_load(&spec, argv[optind], output_dir);
	spec_resolve_models(&spec);
	cells = make_cells(&spec, &n);
	if (as_jsonl) {
		for (size_t i = 0; i < n; i++)
			if (jsonl_write(stdout, cells[i]) < 0)
				break; /* stdout_check_at_exit reports it */
	} else {
		write_run(&spec, cells, n);
	}
	for (size_t i = 0; i < n; i++)
		cJSON_Delete(cells[i]);
	free(cells);
	spec_free(&spec);
	return EXIT_OK;
}
