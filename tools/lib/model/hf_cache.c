/* tools/lib/model/hf_cache.c: where the local Hugging Face hub cache keeps a
 * repo's files (model configs and weights, tokenizers, datasets). */
#include "hf_cache.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/util.h"

char *hf_hub_cache_dir(void)
{
	const char *v;

	if ((v = getenv("HF_HUB_CACHE")) != NULL && *v)
		return xstrdup(v);
	if ((v = getenv("HF_HOME")) != NULL && *v)
		return xasprintf("%s/hub", v);
	if ((v = getenv("XDG_CACHE_HOME")) != NULL && *v)
		return xasprintf("%s/huggingface/hub", v);
	if ((v = getenv("HOME")) != NULL && *v)
		return xasprintf("%s/.cache/huggingface/hub", v);
	return NULL;
}

/* "<kind>s--Org--Name", or NULL when repo_id is not "Org/Name". */
static char *repo_folder(const char *kind, const char *repo_id)
{
	const char *slash = strchr(repo_id, '/');
	char *org, *name, *out;

	if (slash == NULL || strchr(slash + 1, '/') != NULL || slash == repo_id)
		return NULL;
	org = xstrdup(repo_id);
	org[slash - repo_id] = '\0';
	name = org + (slash - repo_id) + 1;
	out = name_is_safe(org) && name_is_safe(name) ? xasprintf("%ss--%s--%s", kind, org, name) : NULL;
	free(org);
	return out;
}

char *hf_cache_repo_dir(const char *hub, const char *kind, const char *repo_id)
{
	char *folder = repo_folder(kind, repo_id), *out;

	if (folder == NULL)
		return NULL;
	out = xasprintf("%s/%s", hub, folder);
	free(folder);
	return out;
}

/* refs/main's snapshot, when refs/main names one that is there. */
static char *ref_snapshot(const char *repo_dir)
{
	char *ref = xasprintf("%s/refs/main", repo_dir);
	char *text = read_whole_file(ref, NULL), *dir = NULL;

	free(ref);
	if (text == NULL)
		return NULL;
	text[strcspn(text, " \t\r\n")] = '\0';
	if (name_is_safe(text)) {
		dir = xasprintf("%s/snapshots/%s", repo_dir, text);
		if (!is_dir(dir)) {
			free(dir);
			dir = NULL;
		}
	}
	free(text);
	return dir;
}

char *hf_cache_pick_snapshot(const char *repo_dir, const char *marker)
{
	char *snaps, *best = ref_snapshot(repo_dir);
	struct timespec best_t = { 0, 0 };
	DIR *d;
	struct dirent *e;
	int e_open;

	if (best != NULL)
		return best;
	snaps = xasprintf("%s/snapshots", repo_dir);
	if ((d = opendir(snaps)) == NULL) {
		e_open = errno;
		free(snaps);
		errno = e_open;
		return NULL;
	}
	while ((e = readdir(d)) != NULL) {
		char *dir, *file = NULL;
		struct stat st;

		/* revisions only: no hidden or odd names */
		if (e->d_name[0] == '.' || !name_is_safe(e->d_name))
			continue;
		dir = xasprintf("%s/%s", snaps, e->d_name);
		if (marker != NULL)
			file = xasprintf("%s/%s", dir, marker);
		if ((file == NULL || (stat(file, &st) == 0 && S_ISREG(st.st_mode))) &&
		    stat(dir, &st) == 0 && S_ISDIR(st.st_mode) &&
		    (best == NULL || st.st_mtim.tv_sec > best_t.tv_sec ||
		     (st.st_mtim.tv_sec == best_t.tv_sec && st.st_mtim.tv_nsec > best_t.tv_nsec))) {
			free(best);
			best = dir;
			dir = NULL;
			best_t = st.st_mtim;
		}
		free(dir);
		free(file);
	}
	closedir(d);
	free(snaps);
	errno = 0;
	return best;
}

char *hf_cache_find(const char *kind, const char *repo_id, char *err, size_t errsz)
{
	char *folder = repo_folder(kind, repo_id), *hub, *repo_dir, *snap;
	int e;

	if (folder == NULL) {
		set_error(err, errsz, "\"%s\" is not a hub id (Org/Name)", repo_id);
		return NULL;
	}
	if ((hub = hf_hub_cache_dir()) == NULL) {
		set_error(err, errsz, "no HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME or HOME to find the HF cache by");
		free(folder);
		return NULL;
	}
	repo_dir = xasprintf("%s/%s", hub, folder);
	free(hub);
	free(folder);
	snap = hf_cache_pick_snapshot(repo_dir, NULL);
	e = errno;
	if (snap == NULL && e != 0)
		set_error(err, errsz, "%s/snapshots: %s", repo_dir, strerror(e));
	else if (snap == NULL)
		set_error(err, errsz, "%s/snapshots: no snapshot in it", repo_dir);
	free(repo_dir);
	return snap;
}
