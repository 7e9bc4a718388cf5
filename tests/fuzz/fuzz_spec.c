/* tests/fuzz/fuzz_spec.c: poros-expand's spec parser, YAML text to cells.
 * The input is a spec file; a bad one must end in a clean exit(2) (trapped,
 * see fuzz_common.h), a good one must expand into cells that pass
 * cell_validate and round-trip through JSON. */
#include "fuzz_common.h"

#include "records/records.h"
#include "spec.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct spec s;
	const char *path = fuzz_write_file("spec.yaml", data, size);
	/* The out directory is never created: spec_load only checks the name. */
	char *outdir = xasprintf("%s/out", fuzz_scratch_dir());
	set_progname("poros-expand");
	if (setjmp(fuzz_exit_jump) != 0) {
		/* die() inside spec_load: free what it held, as the tool's exit would. */
		fuzz_track_release();
		if (fuzz_exit_code != EXIT_USAGE && fuzz_exit_code != EXIT_RUNTIME)
			abort();
		free(outdir);
		return 0;
	}
	fuzz_track_begin();
	fuzz_exit_armed = 1;
	memset(&s, 0, sizeof s);
	spec_load(&s, path, size > 0 && (data[0] & 1) ? outdir : NULL);
	size_t n = spec_cell_count(&s);
	for (size_t i = 0; i < n; i++) {
		struct cell c, back;
		char err[512];
		spec_cell(&s, i, &c);
		if (cell_validate(&c, err, sizeof err) != 0) {
			fprintf(stderr, "spec accepted but cell %zu invalid: %s\n", i, err);
			abort();
		}
		cJSON *j = cell_to_json(&c);
		memset(&back, 0, sizeof back);
		if (j == NULL || cell_from_json(&back, j, err, sizeof err) != 0) {
			fprintf(stderr, "cell %zu does not round-trip: %s\n", i, j ? err : "out of memory");
			abort();
		}
		cell_free(&back);
		cJSON_Delete(j);
		cell_free(&c);
	}
	cJSON *norm = spec_to_json(&s);
	cJSON_Delete(norm);
	fuzz_exit_armed = 0;
	spec_free(&s);
	/* A block still tracked here is a real leak: LeakSanitizer reports it. */
	fuzz_track_end();
	free(outdir);
	return 0;
}
