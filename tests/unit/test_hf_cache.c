/* tests/unit/test_hf_cache.c: the hub cache root from the environment in
 * huggingface_hub's order, Org/Name -> <kind>s--Org--Name, refs/main's
 * snapshot over the newest, the marker file, and hf_cache_find's reasons. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>

#include "model/model.h"
#include "util/util.h"
#include "test_common.h"

static char tmpdir[] = "/tmp/poros-test-hfc-XXXXXX";

/* mkdir -p tmpdir/rel; with file, writes it there too.  malloc'd dir path. */
static char *dir_at(const char *rel, const char *file)
{
	char *dir = xasprintf("%s/%s", tmpdir, rel);

	CHECKF(mkdir_p(dir, 0755) == 0, "mkdir %s", dir);
	if (file != NULL) {
		char *p = xasprintf("%s/%s", dir, file);

		write_fixture(p, "");
		free(p);
	}
	return dir;
}

/* Sets a directory's mtime to sec seconds since the epoch. */
static void age(const char *dir, long sec)
{
	struct timeval tv[2] = { { sec, 0 }, { sec, 0 } };

	CHECKF(utimes(dir, tv) == 0, "utimes %s", dir);
}

static void check_str(const char *got, const char *want, int line)
{
	if (got == NULL || want == NULL ? got != want : strcmp(got, want) != 0) {
		fprintf(stderr, "FAIL %s:%d: got \"%s\", want \"%s\"\n", __FILE__, line, got ? got : "(null)",
		        want ? want : "(null)");
		failures++;
	}
}
#define STR(got, want)                               \
	do {                                         \
		char *got_ = (got);                  \
		check_str(got_, (want), __LINE__);   \
		free(got_);                          \
	} while (0)

static void test_root(void)
{
	unsetenv("HF_HUB_CACHE");
	unsetenv("HF_HOME");
	unsetenv("XDG_CACHE_HOME");
	setenv("HOME", "/h", 1);
	STR(hf_hub_cache_dir(), "/h/.cache/huggingface/hub");
	setenv("XDG_CACHE_HOME", "/x", 1);
	STR(hf_hub_cache_dir(), "/x/huggingface/hub");
	setenv("HF_HOME", "/hh", 1);
	STR(hf_hub_cache_dir(), "/hh/hub");
	setenv("HF_HUB_CACHE", "/c", 1);
	STR(hf_hub_cache_dir(), "/c");
	/* an empty value counts as unset */
	setenv("HF_HUB_CACHE", "", 1);
	STR(hf_hub_cache_dir(), "/hh/hub");
	unsetenv("HF_HUB_CACHE");
	unsetenv("HF_HOME");
	unsetenv("XDG_CACHE_HOME");
	unsetenv("HOME");
	STR(hf_hub_cache_dir(), NULL);
}

static void test_repo_dir(void)
{
	STR(hf_cache_repo_dir("/c", "model", "Qwen/Qwen2.5-7B"), "/c/models--Qwen--Qwen2.5-7B");
	STR(hf_cache_repo_dir("/c", "dataset", "Org/Data"), "/c/datasets--Org--Data");
	STR(hf_cache_repo_dir("/c", "model", "gpt2"), NULL);
	STR(hf_cache_repo_dir("/c", "model", "/Name"), NULL);
	STR(hf_cache_repo_dir("/c", "model", "Org/"), NULL);
	STR(hf_cache_repo_dir("/c", "model", "a/b/c"), NULL);
	STR(hf_cache_repo_dir("/c", "model", "../x"), NULL);
	STR(hf_cache_repo_dir("/c", "model", "Org/na me"), NULL);
}

static void test_snapshots(void)
{
	char *repo = dir_at("hub/models--Org--M", NULL), *old, *new, *want, err[512];
	char *ref;

	/* no snapshots/: NULL with errno */
	errno = 0;
	CHECK(hf_cache_pick_snapshot(repo, NULL) == NULL && errno == ENOENT);
	/* snapshots/ but none in it: NULL with errno 0 */
	free(dir_at("hub/models--Org--M/snapshots", NULL));
	errno = EINVAL;
	CHECK(hf_cache_pick_snapshot(repo, NULL) == NULL && errno == 0);
	/* the newest by mtime; with a marker, the newest holding it; hidden names are no revisions */
	old = dir_at("hub/models--Org--M/snapshots/aaa", "config.json");
	new = dir_at("hub/models--Org--M/snapshots/bbb", NULL);
	free(dir_at("hub/models--Org--M/snapshots/.tmp", "config.json"));
	age(old, 1000);
	age(new, 2000);
	want = xasprintf("%s/snapshots/.tmp", repo);
	age(want, 3000);
	free(want);
	STR(hf_cache_pick_snapshot(repo, NULL), new);
	STR(hf_cache_pick_snapshot(repo, "config.json"), old);
	STR(hf_cache_pick_snapshot(repo, "tokenizer.json"), NULL);
	/* refs/main wins over mtime, also without the marker; a ref to a missing snapshot does not */
	free(dir_at("hub/models--Org--M/refs", NULL));
	ref = xasprintf("%s/refs/main", repo);
	write_fixture(ref, "bbb\n");
	STR(hf_cache_pick_snapshot(repo, "config.json"), new);
	write_fixture(ref, "ccc");
	STR(hf_cache_pick_snapshot(repo, "config.json"), old);
	/* a ref that is no name is passed over */
	write_fixture(ref, "../../x\n");
	STR(hf_cache_pick_snapshot(repo, NULL), new);

	/* hf_cache_find: the snapshot, or why not */
	want = xasprintf("%s/hub", tmpdir);
	setenv("HF_HUB_CACHE", want, 1);
	free(want);
	STR(hf_cache_find("model", "Org/M", err, sizeof err), new);
	CHECK(hf_cache_find("model", "gpt2", err, sizeof err) == NULL);
	STR(xstrdup(err), "\"gpt2\" is not a hub id (Org/Name)");
	CHECK(hf_cache_find("dataset", "Org/M", err, sizeof err) == NULL);
	want = xasprintf("%s/hub/datasets--Org--M/snapshots: No such file or directory", tmpdir);
	STR(xstrdup(err), want);
	free(want);
	free(dir_at("hub/datasets--Org--E/snapshots", NULL));
	CHECK(hf_cache_find("dataset", "Org/E", err, sizeof err) == NULL);
	want = xasprintf("%s/hub/datasets--Org--E/snapshots: no snapshot in it", tmpdir);
	STR(xstrdup(err), want);
	free(want);
	unsetenv("HF_HUB_CACHE");
	unsetenv("HOME");
	CHECK(hf_cache_find("model", "Org/M", err, sizeof err) == NULL);
	STR(xstrdup(err), "no HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME or HOME to find the HF cache by");
	free(ref);
	free(old);
	free(new);
	free(repo);
}

int main(void)
{
	if (scratch_make(tmpdir) < 0)
		return 1;
	test_root();
	test_repo_dir();
	test_snapshots();
	scratch_remove(tmpdir);
	return test_verdict("test_hf_cache");
}
