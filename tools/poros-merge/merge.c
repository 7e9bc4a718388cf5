/* tools/poros-merge/merge.c: many result files and artifact directories
 * into one row per cell. */
#include "merge.h"

#include "jsonl.h"
#include "util.h"

int merge_inputs(struct result_set *s, char *const *paths, int n)
{
	long bad = 0;
	int status = EXIT_OK;

	for (int i = 0; i < n; i++)
		if (report_read_path(paths[i], results_record, s, &bad) < 0)
			status = EXIT_RUNTIME;
	if (status == EXIT_OK && bad > 0) {
		warnmsg("%ld malformed line%s or file%s skipped", bad, bad == 1 ? "" : "s", bad == 1 ? "" : "s");
		status = EXIT_USAGE;
	}
	return status;
}

int merge_write(FILE *out, const struct result_set *s)
{
	for (int i = 0; i < s->n; i++)
		if (jsonl_write(out, s->e[i].json) < 0)
			return -1;
	return 0;
}
