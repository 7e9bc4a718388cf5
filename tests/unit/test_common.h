/* tests/unit/test_common.h: what the library unit tests share: the failure
 * count, CHECK, a scratch directory, fixture files, a JSON edit by path
 * and main()'s verdict.  Each test is one
 * .c file, so everything here is static. */
#ifndef POROS_TEST_COMMON_H
#define POROS_TEST_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "util/util.h"

static int failures;

/* A failed condition, reported by its own text; the test goes on. */
#define CHECK(cond)                                                                              \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                              \
		}                                                                                \
	} while (0)

/* The same with a printf message, for when the values say more than the
 * condition: CHECKF(n == 3, "n %d", n). */
#define CHECKF(cond, ...)                                                     \
	do {                                                                  \
		if (!(cond)) {                                                \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);  \
			fprintf(stderr, __VA_ARGS__);                         \
			fputc('\n', stderr);                                  \
			failures++;                                           \
		}                                                             \
	} while (0)

/* Makes a scratch directory from a mkdtemp template (changed in place);
 * 0, or -1 with the reason on stderr. */
static inline int scratch_make(char *tmpl)
{
	if (mkdtemp(tmpl) != NULL)
		return 0;
	perror("mkdtemp");
	return -1;
}

/* Removes a scratch directory and everything in it. */
static inline void scratch_remove(const char *dir)
{
	char *cmd = xasprintf("rm -rf '%s'", dir);

	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	free(cmd);
}

/* Writes text to path (a fixture file), replacing what was there; a file
 * that cannot be written is a failed check.  0, or -1. */
static inline int write_fixture(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	size_t n = strlen(text);
	int ok;

	if (f == NULL) {
		CHECKF(0, "cannot create %s", path);
		return -1;
	}
	ok = fwrite(text, 1, n, f) == n;
	ok = (fclose(f) == 0) && ok;
	CHECKF(ok, "cannot write %s", path);
	return ok ? 0 : -1;
}

/* Puts v at path of root ("a.b": key b of object a; "a": key a of root),
 * in place of what is there, or added where nothing is; root owns v. */
static inline void json_put_path(cJSON *root, const char *path, cJSON *v)
{
	const char *dot = strchr(path, '.');
	cJSON *parent = root;
	char key[64];

	if (dot) {
		snprintf(key, sizeof key, "%.*s", (int)(dot - path), path);
		parent = cJSON_GetObjectItemCaseSensitive(root, key);
		path = dot + 1;
	}
	if (cJSON_GetObjectItemCaseSensitive(parent, path))
		cJSON_ReplaceItemInObjectCaseSensitive(parent, path, v);
	else
		cJSON_AddItemToObject(parent, path, v);
}

/* main()'s return: says whether the checks of test `name` all passed. */
static inline int test_verdict(const char *name)
{
	if (failures) {
		fprintf(stderr, "%s: %d check(s) failed\n", name, failures);
		return 1;
	}
	fprintf(stderr, "%s: ok\n", name);
	return 0;
}

#endif
