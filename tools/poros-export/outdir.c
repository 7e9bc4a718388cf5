/* tools/poros-export/outdir.c: --out, checked before anything is
 * written, and the scratch directory beside it that becomes --out by a
 * rename at the end. */
#include "export.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/util.h"

/* --- the scratch directory ------------------------------------------------
 * Everything is written into a fresh directory beside --out; at exit or on
 * a signal, unless committed, its files (each registered before it is
 * created) and the directory are removed.  The handler only unlinks
 * strings allocated before any signal can need them. */

static struct {
	char *dir;
	char **files;
	int cap;
	volatile sig_atomic_t nfiles, active;
} scratch;

void scratch_remove(void)
{
	if (!scratch.active)
		return;
	scratch.active = 0;
	for (int i = 0; i < scratch.nfiles; i++)
		unlink(scratch.files[i]);
	rmdir(scratch.dir);
}

static void on_signal(int sig)
{
	scratch_remove();
	signal(sig, SIG_DFL);
	raise(sig);
}

int scratch_create(struct job *j, int nfiles)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGPIPE };
	char *tmpl = xasprintf("%s/.%s.poros-export-XXXXXX", j->parent, j->name);

	scratch.files = xcalloc((size_t)nfiles, sizeof *scratch.files);
	scratch.cap = nfiles;
	if (mkdtemp(tmpl) == NULL) {
		fail(j, EXIT_RUNTIME, "%s: creating a temporary directory: %s", j->parent, strerror(errno));
		free(tmpl);
		return EXIT_RUNTIME;
	}
	chmod(tmpl, 0755);
	scratch.dir = tmpl;
	scratch.active = 1;
	atexit(scratch_remove);
	for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
		signal(sigs[i], on_signal);
	/* past a file size limit, a write error to report (and clean up after)
	 * rather than a kill */
	signal(SIGXFSZ, SIG_IGN);
	return 0;
}

/* Registers name inside the scratch directory; the path, owned by scratch. */
char *scratch_path(const char *name)
{
	char *p = xasprintf("%s/%s", scratch.dir, name);

	if (scratch.nfiles >= scratch.cap)
		die(EXIT_RUNTIME, "internal error: more output files than planned");
	scratch.files[scratch.nfiles] = p;
	scratch.nfiles = scratch.nfiles + 1;
	return p;
}

/* A small file into the scratch directory, fsync'd. */
int scratch_write(struct job *j, const char *name, const void *data, size_t len)
{
	char *path = scratch_path(name);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);

	if (fd < 0 || write_all(fd, data, len) < 0 || fsync(fd) < 0) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		return fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(e));
	}
	if (close(fd) < 0)
		return fail(j, EXIT_RUNTIME, "%s: %s", path, strerror(errno));
	return 0;
}

/* --- --out --------------------------------------------------------------- */

/* 0 absent, 1 an empty directory, 2 a directory of files only, 3 one with
 * subdirectories, -1 not a directory (or unreadable: errno). */
static int out_state(const char *out)
{
	struct stat st;
	struct dirent *e;
	DIR *d;
	int state = 1;

	if (lstat(out, &st) < 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISDIR(st.st_mode) || (d = opendir(out)) == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		char *p;

		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		p = xasprintf("%s/%s", out, e->d_name);
		if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
			state = 3;
		else if (state < 2)
			state = 2;
		free(p);
	}
	closedir(d);
	return state;
}

/* Inside or equal to dir (both resolved). */
static int path_within(const char *path, const char *dir)
{
	char *p = realpath(path, NULL), *d = realpath(dir, NULL);
	size_t n = d ? strlen(d) : 0;
	int in = p != NULL && d != NULL && strncmp(p, d, n) == 0 && (p[n] == '\0' || p[n] == '/' || strcmp(d, "/") == 0);

	free(p);
	free(d);
	return in;
}

/* The first of the base's files (config and weights) that is, once its
 * links are followed, inside out: a HF snapshot is links into a blob
 * store, so the directories' names alone do not tell.  NULL: none. */
static const char *base_file_within(const struct job *j, const char *out)
{
	if (path_within(j->mc.config_path, out))
		return j->mc.config_path;
	for (int i = 0; i < j->ck.nfiles; i++)
		if (path_within(j->ck.files[i].path, out))
			return j->ck.files[i].path;
	return NULL;
}

int check_out(struct job *j)
{
	const char *out = j->out, *linked;
	int st = out_state(out);

	if (st < 0)
		return fail(j, EXIT_USAGE, "--out %s: exists and is not a directory", out);
	if (st > 1 && (path_within(j->mc.checkpoint_dir, out) || path_within(j->o->adapter, out)))
		return fail(j, EXIT_USAGE, "--out %s holds the %s: replacing it would delete its input", out,
		            path_within(j->mc.checkpoint_dir, out) ? "base" : "adapter");
	if (st > 1 && (linked = base_file_within(j, out)) != NULL)
		return fail(j, EXIT_USAGE, "--out %s holds the base's %s (through a link): replacing it would delete its input",
		            out, linked);
	if (st > 1 && !j->o->force)
		return fail(j, EXIT_USAGE, "--out %s: exists and is not empty (--force replaces it)", out);
	if (st == 3)
		return fail(j, EXIT_USAGE, "--out %s: holds subdirectories, so it is not a checkpoint --force would replace "
		            "(remove it yourself)", out);
	return 0;
}

static void sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

/* Removes a directory of plain files (what check_out let --force replace). */
static void remove_flat_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (d != NULL) {
		while ((e = readdir(d)) != NULL)
			if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 && unlinkat(dirfd(d), e->d_name, 0) < 0)
				warnsys("%s/%s: not removed", dir, e->d_name);
		closedir(d);
	}
	if (rmdir(dir) < 0)
		warnsys("%s: the replaced checkpoint was not removed", dir);
}

/* The scratch directory becomes --out: a rename (over an empty directory
 * too); a non-empty one, with --force, is moved aside first and removed
 * after. */
int commit(struct job *j)
{
	char *old = NULL;
	int rc;

	if ((rc = check_out(j)) != 0)
		return rc;
	sync_dir(scratch.dir);
	if (out_state(j->out) == 2) {
		old = xasprintf("%s/.%s.poros-export-old-%ld", j->parent, j->name, (long)getpid());
		if (rename(j->out, old) < 0) {
			rc = fail(j, EXIT_RUNTIME, "--out %s: moving it aside: %s", j->out, strerror(errno));
			free(old);
			return rc;
		}
	}
	if (rename(scratch.dir, j->out) < 0) {
		rc = fail(j, EXIT_RUNTIME, "%s: renaming to %s: %s", scratch.dir, j->out, strerror(errno));
		if (old != NULL && rename(old, j->out) < 0)
			warnsys("%s: could not be moved back to %s", old, j->out);
		free(old);
		return rc;
	}
	scratch.active = 0;
	sync_dir(j->parent);
	if (old != NULL) {
		remove_flat_dir(old);
		free(old);
	}
	return 0;
}

/* --out without trailing slashes, split into its directory and name. */
int split_out(struct job *j)
{
	char *slash;
	size_t len;

	j->out = xstrdup(j->o->out);
	len = strlen(j->out);
	while (len > 1 && j->out[len - 1] == '/')
		j->out[--len] = '\0';
	slash = strrchr(j->out, '/');
	j->name = xstrdup(slash ? slash + 1 : j->out);
	j->parent = slash == NULL ? xstrdup(".") : slash == j->out ? xstrdup("/") : strndup(j->out, (size_t)(slash - j->out));
	if (j->parent == NULL)
		die(EXIT_RUNTIME, "out of memory");
	if (*j->name == '\0' || strcmp(j->name, ".") == 0 || strcmp(j->name, "..") == 0)
		return fail(j, EXIT_USAGE, "--out %s: give the checkpoint directory's own name", j->o->out);
	if (mkdir_p(j->parent, 0755) < 0)
		return fail(j, EXIT_RUNTIME, "--out %s: creating %s: %s", j->o->out, j->parent, strerror(errno));
	return 0;
}


/* --- --out as one file (--format gguf, gguf-lora) ------------------------- */

/* The same file as one of the inputs (once links are followed). */
static int is_input_file(const struct job *j, const char *out)
{
	char *o = realpath(out, NULL);
	int same = 0;

	for (int i = 0; o != NULL && !same && i < j->ck.nfiles; i++) {
		char *p = realpath(j->ck.files[i].path, NULL);

		same = p != NULL && strcmp(o, p) == 0;
		free(p);
	}
	free(o);
	return same || path_within(out, j->mc.checkpoint_dir) || path_within(out, j->o->adapter);
}

int check_out_file(struct job *j)
{
	struct stat st;

	if (lstat(j->out, &st) < 0)
		return errno == ENOENT ? 0 : fail(j, EXIT_USAGE, "--out %s: %s", j->out, strerror(errno));
	if (S_ISDIR(st.st_mode))
		return fail(j, EXIT_USAGE, "--out %s: a directory (a GGUF export is one file)", j->out);
	if (!S_ISREG(st.st_mode))
		return fail(j, EXIT_USAGE, "--out %s: exists and is not a regular file", j->out);
	if (is_input_file(j, j->out))
		return fail(j, EXIT_USAGE, "--out %s is inside the base or the adapter: replacing it would change an input",
		            j->out);
	if (!j->o->force)
		return fail(j, EXIT_USAGE, "--out %s: exists (--force replaces it)", j->out);
	return 0;
}

/* path, complete in the scratch directory, renamed over --out. */
int commit_file(struct job *j, const char *path)
{
	int rc;

	if ((rc = check_out_file(j)) != 0)
		return rc;
	if (rename(path, j->out) < 0)
		return fail(j, EXIT_RUNTIME, "%s: renaming to %s: %s", path, j->out, strerror(errno));
	sync_dir(j->parent);
	return 0;
}
