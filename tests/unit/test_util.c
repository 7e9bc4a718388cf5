/* tests/unit/test_util.c: the shared helpers of tools/lib (util, jsonl). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/util.h"
#include "test_common.h"

static void test_parse_long(void)
{
	const char *why = NULL;
	long v = 0;

	CHECK(parse_long("42", 1, 100, &v, &why) == 0 && v == 42);
	CHECK(parse_long("0", 1, 100, &v, &why) < 0 && strcmp(why, "too small") == 0);
	CHECK(parse_long("101", 1, 100, &v, &why) < 0 && strcmp(why, "too large") == 0);
	CHECK(parse_long("99999999999999999999999", 1, 100, &v, &why) < 0 && strcmp(why, "too large") == 0);
	CHECK(parse_long("-99999999999999999999999", -5, 100, &v, &why) < 0 && strcmp(why, "too small") == 0);
	CHECK(parse_long("12x", 1, 100, &v, &why) < 0 && strcmp(why, "not a number") == 0);
	CHECK(parse_long("", 1, 100, &v, &why) < 0 && strcmp(why, "not a number") == 0);
	CHECK(parse_long(" 5", 1, 100, &v, &why) < 0);
}

static void test_parse_double(void)
{
	const char *why = NULL;
	double v = 0;

	CHECK(parse_double("2e-4", 0, 1, &v, &why) == 0 && v == 2e-4);
	CHECK(parse_double("nan", 0, 1, &v, &why) < 0 && strcmp(why, "not a number") == 0);
	CHECK(parse_double("1e309", 0, 1e300, &v, &why) < 0 && strcmp(why, "too large") == 0);
	CHECK(parse_double("inf", 0, 1, &v, &why) < 0);
	CHECK(parse_double("-1", 0, 1, &v, &why) < 0 && strcmp(why, "too small") == 0);
}

static void test_paths(void)
{
	char *p;

	CHECK(path_is_confined("a/b.json"));
	CHECK(path_is_confined("cells/x..y.json"));
	CHECK(!path_is_confined("../etc/passwd"));
	CHECK(!path_is_confined("a/../../b"));
	CHECK(!path_is_confined("/etc/passwd"));
	CHECK(!path_is_confined(""));
	CHECK(!path_is_confined("a/.."));
	p = path_under("out", "cells/c.json");
	CHECK(p && strcmp(p, "out/cells/c.json") == 0);
	free(p);
	errno = 0;
	CHECK(path_under("out", "../x") == NULL && errno == EINVAL);
	CHECK(name_is_safe("qwen2_5_32b-nf4.json"));
	CHECK(!name_is_safe("a/b"));
	CHECK(!name_is_safe(".."));
	CHECK(!name_is_safe("a b"));
}

static void test_slug(void)
{
	char *s = slugify("Qwen/Qwen2.5-32B", 1);
	CHECK(strcmp(s, "qwen2_5_32b") == 0);
	free(s);
	s = slugify("meta-llama/Llama-3.1-70B", 1);
	CHECK(strcmp(s, "llama_3_1_70b") == 0);
	free(s);
	s = slugify("--A..b--", 0);
	CHECK(strcmp(s, "a_b") == 0);
	free(s);
	CHECK(edit_distance("sequence_len", "seq_len") == 5);
	CHECK(edit_distance("rnak", "rank") == 2);
}

static void test_atomic_and_append(const char *dir)
{
	char *path = xasprintf("%s/f.json", dir);
	char *link = xasprintf("%s/link.json", dir);
	char *target = xasprintf("%s/target", dir);
	size_t len = 0;
	char *text;

	CHECK(atomic_write(path, "hello\n", 6) == 0);
	text = read_whole_file(path, &len);
	CHECK(text && len == 6 && memcmp(text, "hello\n", 6) == 0);
	free(text);
	/* A planted symlink is replaced, never written through. */
	CHECK(atomic_write(target, "keep", 4) == 0);
	CHECK(symlink(target, link) == 0);
	CHECK(atomic_write(link, "new", 3) == 0);
	text = read_whole_file(target, &len);
	CHECK(text && len == 4 && memcmp(text, "keep", 4) == 0);
	free(text);
	CHECK(atomic_write("/nonexistent-dir/x", "a", 1) < 0);

	CHECK(append_line(path, "x\n", 2) == 0);
	CHECK(append_line(path, "no newline", 10) < 0 && errno == EINVAL);
	text = read_whole_file(path, &len);
	CHECK(text && len == 8 && memcmp(text, "hello\nx\n", 8) == 0);
	free(text);
	free(path);
	free(link);
	free(target);
}

/* name in dir, with contents "x" and a modification time age seconds ago. */
static void plant(const char *dir, const char *name, long age)
{
	char *path = xasprintf("%s/%s", dir, name);
	struct timeval tv[2];

	write_fixture(path, "x");
	gettimeofday(&tv[0], NULL);
	tv[0].tv_sec -= age;
	tv[1] = tv[0];
	CHECK(utimes(path, tv) == 0);
	free(path);
}

static int exists(const char *dir, const char *name)
{
	char *path = xasprintf("%s/%s", dir, name);
	struct stat st;
	int rc = lstat(path, &st) == 0;

	free(path);
	return rc;
}

/* The first write into a directory removes the temporaries of writers that
 * are gone (no such process, an hour old), of any name; later writes into
 * it do not read the directory again. */
static void test_stale_sweep(const char *dir)
{
	char *one = xasprintf("%s/sweep1", dir), *two = xasprintf("%s/sweep2", dir), *f;
	char dead_tmp[64], fresh_tmp[64], live_tmp[64], late_tmp[64];
	pid_t dead = fork();

	if (dead == 0)
		_exit(0);
	CHECK(dead > 0 && waitpid(dead, NULL, 0) == dead);
	CHECK(mkdir(one, 0755) == 0 && mkdir(two, 0755) == 0);
	snprintf(dead_tmp, sizeof dead_tmp, "other.json.tmp.%ld", (long)dead);
	snprintf(fresh_tmp, sizeof fresh_tmp, "fresh.json.tmp.%ld", (long)dead);
	snprintf(live_tmp, sizeof live_tmp, "live.json.tmp.%ld", (long)getppid());
	snprintf(late_tmp, sizeof late_tmp, "late.json.tmp.%ld", (long)dead);
	plant(one, dead_tmp, 7200);
	plant(one, fresh_tmp, 0);
	plant(one, live_tmp, 7200);
	plant(one, "look.json.tmp.12ab", 7200);
	f = xasprintf("%s/a.json", one);
	CHECK(atomic_write(f, "a", 1) == 0);
	free(f);
	CHECK(!exists(one, dead_tmp));
	CHECK(exists(one, fresh_tmp) && exists(one, live_tmp) && exists(one, "look.json.tmp.12ab"));
	/* the same directory again: not read again in this process */
	plant(one, late_tmp, 7200);
	f = xasprintf("%s/b.json", one);
	CHECK(atomic_write(f, "b", 1) == 0);
	free(f);
	CHECK(exists(one, late_tmp));
	/* another directory: its first write sweeps it */
	plant(two, late_tmp, 7200);
	f = xasprintf("%s/c.json", two);
	CHECK(atomic_write(f, "c", 1) == 0);
	free(f);
	CHECK(!exists(two, late_tmp));
	free(one);
	free(two);
}

static void test_jsonl(const char *dir)
{
	char *path = xasprintf("%s/in.jsonl", dir);
	FILE *f = fopen(path, "w");
	struct jsonl_reader r;
	cJSON *o = NULL;
	char big[70000];

	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	fprintf(f, "{\"a\":1}\n\n{\"s\":\"%s\"}\n[1]\n{bad\n{\"a\":2} x\n{\"tail\":1}", big);
	fclose(f);
	f = fopen(path, "r");
	jsonl_init(&r, f, path);
	CHECK(jsonl_next(&r, &o) == 1 && r.line == 1 && cJSON_GetObjectItem(o, "a")->valueint == 1);
	cJSON_Delete(o);
	CHECK(jsonl_next(&r, &o) == 1 && r.line == 3 && strlen(cJSON_GetObjectItem(o, "s")->valuestring) == sizeof big - 1);
	cJSON_Delete(o);
	CHECK(jsonl_next(&r, &o) == -1 && r.line == 4 && strstr(r.err, "not a JSON object"));
	CHECK(jsonl_next(&r, &o) == -1 && r.line == 5 && strstr(r.err, "not valid JSON"));
	CHECK(jsonl_next(&r, &o) == -1 && r.line == 6 && strstr(r.err, "more than one"));
	CHECK(jsonl_next(&r, &o) == -1 && r.line == 7 && strstr(r.err, "newline"));
	CHECK(jsonl_next(&r, &o) == 0);
	jsonl_free(&r);
	fclose(f);
	free(path);
}

/* A directory a tool owns is never a link; a dead writer's temporary goes,
 * whatever its age, and a live one's stays; a line over the bound is
 * refused and the file kept. */
static void test_owned_dirs_and_bounds(const char *dir)
{
	char *real = xasprintf("%s/owned", dir), *link = xasprintf("%s/owned-link", dir);
	char *sub = xasprintf("%s/owned/a/b", dir), *dead_tmp, *live_tmp, *other, *lines = xasprintf("%s/bound.jsonl", dir);
	size_t big = APPEND_LINE_MAX + 1;
	char *line = xmalloc(big);
	struct stat st;
	pid_t dead = fork();

	if (dead == 0)
		_exit(0);
	waitpid(dead, NULL, 0);
	CHECK(mkdir_owned(sub, 0755) == 0 && stat(sub, &st) == 0 && S_ISDIR(st.st_mode));
	CHECK(symlink("owned", link) == 0);
	errno = 0;
	CHECK(mkdir_owned(link, 0755) < 0 && errno == ELOOP);
	dead_tmp = xasprintf("%s/adapter_model.safetensors.tmp.%ld", real, (long)dead);
	live_tmp = xasprintf("%s/adapter_config.json.tmp.%ld", real, (long)getpid());
	other = xasprintf("%s/adapter_model.safetensors", real);
	CHECK(atomic_write(dead_tmp, "torn", 4) == 0 && atomic_write(live_tmp, "live", 4) == 0 &&
	      atomic_write(other, "kept", 4) == 0);
	CHECK(remove_dead_tmp(real) == 1);
	CHECK(access(dead_tmp, F_OK) < 0 && access(live_tmp, F_OK) == 0 && access(other, F_OK) == 0);
	memset(line, 'x', big);
	line[big - 1] = '\n';
	CHECK(append_line(lines, "{}\n", 3) == 0);
	errno = 0;
	CHECK(append_line(lines, line, big) < 0 && errno == EMSGSIZE);
	CHECK(stat(lines, &st) == 0 && st.st_size == 3);
	CHECK(append_line(lines, line + 1, big - 1) == 0); /* exactly the bound */
	free(line);
	free(lines);
	free(dead_tmp);
	free(live_tmp);
	free(other);
	free(real);
	free(link);
	free(sub);
}

int main(void)
{
	char dir[] = "/tmp/poros-test-util-XXXXXX";

	set_progname("test_util");
	if (scratch_make(dir) < 0)
		return 1;
	test_parse_long();
	test_parse_double();
	test_paths();
	test_slug();
	test_atomic_and_append(dir);
	test_stale_sweep(dir);
	test_jsonl(dir);
	test_owned_dirs_and_bounds(dir);
	scratch_remove(dir);
	return test_verdict("test_util");
}
