/* tools/lib/model/hf_cache.h: the local Hugging Face hub cache, found and read
 * as huggingface_hub lays it out.  Only read: nothing is ever written to it
 * or downloaded into it. */
#ifndef POROS_HF_CACHE_H
#define POROS_HF_CACHE_H

#include <stddef.h>

/* The hub cache root, as huggingface_hub finds it: $HF_HUB_CACHE, else
 * $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
 * $HOME/.cache/huggingface/hub.  malloc'd, or NULL when none is set. */
char *hf_hub_cache_dir(void);

/* "<hub>/<kind>s--Org--Name" for repo_id "Org/Name" (kind "model" or
 * "dataset"; Org and Name each a safe name, see name_is_safe).  malloc'd,
 * or NULL when repo_id is not such a hub id. */
char *hf_cache_repo_dir(const char *hub, const char *kind, const char *repo_id);

/* The snapshot of a cached repo: repo_dir/snapshots/<rev> for the rev that
 * refs/main names when that directory exists (what huggingface_hub itself
 * loads), else the newest snapshot by mtime, of those holding the file
 * marker when it is not NULL.  malloc'd; NULL when there is none, with
 * errno 0, or with errno set when snapshots/ cannot be opened. */
char *hf_cache_pick_snapshot(const char *repo_dir, const char *marker);

/* The three in one: the snapshot directory of repo_id in the hub cache, or
 * NULL with err saying why ("\"x\" is not a hub id (Org/Name)", or naming
 * the directory looked at). */
char *hf_cache_find(const char *kind, const char *repo_id, char *err, size_t errsz);

#endif
