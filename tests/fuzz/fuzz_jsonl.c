/* tests/fuzz/fuzz_jsonl.c: the JSON Lines reader and the record readers on
 * top of it (RunArtifact, cell), as poros-merge, poros-render and poros-arm
 * use them.  Any line must come back as an object or a positioned error;
 * an artifact or cell that reads back must survive a write/read round trip. */
#include "fuzz_common.h"

#include "records/records.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one_record(const cJSON *obj)
{
	char err[512];
	struct artifact a;
	artifact_init(&a);
	if (artifact_from_json(&a, obj, err, sizeof err) == 0) {
		cJSON *again = artifact_to_json(&a);
		struct artifact b;
		artifact_init(&b);
		if (again == NULL || artifact_from_json(&b, again, err, sizeof err) != 0) {
			fprintf(stderr, "artifact does not round-trip: %s\n", again ? err : "out of memory");
			abort();
		}
		artifact_free(&b);
		cJSON_Delete(again);
	}
	artifact_free(&a);

	struct cell c;
	memset(&c, 0, sizeof c);
	if (cell_from_json(&c, obj, err, sizeof err) == 0) {
		cJSON *again = cell_to_json(&c);
		struct cell d;
		memset(&d, 0, sizeof d);
		if (again == NULL || cell_from_json(&d, again, err, sizeof err) != 0) {
			fprintf(stderr, "cell does not round-trip: %s\n", again ? err : "out of memory");
			abort();
		}
		cell_free(&d);
		cJSON_Delete(again);
	}
	cell_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* fmemopen of a zero-length buffer fails on glibc: read an empty stream from /dev/null. */
	FILE *f = size > 0 ? fmemopen((void *)data, size, "r") : fopen("/dev/null", "r");
	if (f == NULL)
		abort();
	struct jsonl_reader r;
	jsonl_init(&r, f, "<fuzz>");
	long last = 0;
	for (;;) {
		cJSON *obj = NULL;
		int rc = jsonl_next(&r, &obj);
		if (rc == 0)
			break;
		if (r.line < last) {
			fprintf(stderr, "line numbers went back: %ld after %ld\n", r.line, last);
			abort();
		}
		last = r.line;
		if (rc < 0) {
			if (r.err[0] == '\0') {
				fprintf(stderr, "error without a message at line %ld\n", r.line);
				abort();
			}
			/* The tools skip a bad line and go on; so do we. */
			continue;
		}
		if (!cJSON_IsObject(obj))
			abort();
		char *line = jsonl_format(obj);
		if (line == NULL || line[0] == '\0' || line[strlen(line) - 1] != '\n' || strchr(line, '\n') != line + strlen(line) - 1) {
			fprintf(stderr, "jsonl_format did not give one line\n");
			abort();
		}
		free(line);
		one_record(obj);
		cJSON_Delete(obj);
	}
	jsonl_free(&r);
	fclose(f);

	/* The same bytes as a whole-file JSON value (cell files, config files). */
	char err[512];
	const char *path = fuzz_write_file("value.json", data, size);
	cJSON *v = json_read_file(path, err, sizeof err);
	if (v != NULL && cJSON_IsObject(v))
		one_record(v);
	cJSON_Delete(v);
	return 0;
}
