/* tools/poros-parity/artifacts.c: a parity result written into the
 * artifacts of the cells it speaks for (their "parity" field). */
#include "compare.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "records/records.h"
#include "util/util.h"

/* One artifact file: read, its parity set, written back whole (atomic).
 * 0 done, 1 no such file, -1 with err set. */
static int update_one(const char *path, const struct parity *p, char *err, size_t errsz)
{
	struct artifact a;
	char why[512];
	cJSON *obj, *out;
	char *line;
	int rc = 0;

	if (access(path, F_OK) < 0 && errno == ENOENT)
		return 1;
	if ((obj = json_read_file(path, why, sizeof why)) == NULL)
		return snprintf(err, errsz, "%s", why), -1;
	if (artifact_from_json(&a, obj, why, sizeof why) < 0) {
		cJSON_Delete(obj);
		return snprintf(err, errsz, "%s: not an artifact: %s", path, why), -1;
	}
	cJSON_Delete(obj);
	a.parity.loss_max_abs_delta = p->loss_max_abs_delta;
	a.parity.adapter_max_abs_delta = p->adapter_max_abs_delta;
	a.parity.bitwise_exact = p->bitwise_exact;
	out = artifact_to_json(&a);
	line = jsonl_format(out);
	if (atomic_write(path, line, strlen(line)) < 0) {
		snprintf(err, errsz, "%s: cannot write: %s", path, strerror(errno));
		rc = -1;
	}
	free(line);
	cJSON_Delete(out);
	artifact_free(&a);
	return rc;
}

int parity_update_artifacts(const char *dir, const struct parity *p, int *updated, char *err, size_t errsz)
{
	static const enum method methods[] = { METHOD_POROS, METHOD_RESIDENT };
	int prec = precision_from_name(p->precision);

	*updated = 0;
	if (p->arch == NULL || prec < 0)
		return snprintf(err, errsz, "--artifacts needs --arch and --precision (nf4 or bf16)"), -1;
	for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
		char *id = cell_make_id(methods[i], p->arch, (enum precision)prec);
		char *path = xasprintf("%s/%s.json", dir, id);
		int rc = update_one(path, p, err, errsz);

		free(id);
		free(path);
		if (rc < 0)
			return -1;
		*updated += rc == 0;
	}
	return 0;
}
