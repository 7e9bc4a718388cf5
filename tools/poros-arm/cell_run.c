/* tools/poros-arm/cell_run.c: one cell in, one RunArtifact out.  Finds
 * the arm for the cell's method, runs it as a supervised child, reads its
 * summary, decides an honest status and writes the artifact whole. */
#include "arm.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "records/records.h"
#include "util/util.h"

extern char **environ;

/* --- finding the children ------------------------------------------------- */

static int is_executable(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* The first PATH entry holding an executable name, or NULL. */
static char *search_path(const char *name)
{
	const char *path = getenv("PATH");
	char *copy, *dir, *save = NULL, *found = NULL;

	if (path == NULL || *path == '\0')
		return NULL;
	copy = xstrdup(path);
	for (dir = strtok_r(copy, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
		char *cand = xasprintf("%s/%s", *dir ? dir : ".", name);
		if (is_executable(cand))
			found = cand;
		else
			free(cand);
	}
	free(copy);
	return found;
}

/* An executable named by an environment override, else next to poros-arm,
 * else on PATH.  On failure NULL and *why says where it looked. */
static char *locate_program(const char *env_name, const char *name, int beside_us, char *why, size_t whysz)
{
	const char *env = getenv(env_name);
	char *dir, *cand;

	if (env && *env) {
		if (is_executable(env))
			return xstrdup(env);
		snprintf(why, whysz, "%s=%s: %s", env_name, env,
		         access(env, F_OK) == 0 ? "not an executable file" : strerror(errno));
		return NULL;
	}
	if (beside_us && (dir = poros_exe_dir()) != NULL) {
		cand = xasprintf("%s/%s", dir, name);
		free(dir);
		if (is_executable(cand))
			return cand;
		free(cand);
	}
	cand = search_path(name);
	if (cand)
		return cand;
	snprintf(why, whysz, "%s not found %son PATH (set %s)", name, beside_us ? "beside poros-arm nor " : "",
	         env_name);
	return NULL;
}

/* POROS_ARMS_DIR, else the shipped arms (poros_resource: share/poros/arms
 * beside bin/ in the source tree and under an installed PREFIX alike). */
static char *arms_dir(void)
{
	const char *env = getenv("POROS_ARMS_DIR");
	char *d, *real;

	if (env && *env)
		return xstrdup(env);
	d = poros_resource("arms");
	if (d == NULL) {
		/* named in the error that follows: where they should have been */
		char *dir = poros_exe_dir();

		if (dir == NULL)
			return xstrdup("share/poros/arms");
		d = xasprintf("%s/../share/poros/arms", dir);
		free(dir);
		return d;
	}
	real = realpath(d, NULL); /* a plain path in the artifact's argv */
	if (real) {
		free(d);
		d = real;
	}
	return d;
}

/* --- the child's command line --------------------------------------------- */

struct command {
	char *path;
	char *argv[12];
	int argc;
	char **envp;
	enum artifact_status cannot_status; /* when path is NULL: skipped or error */
	char reason[512];                   /* ... and why */
};

static void command_free(struct command *c)
{
	for (int i = 0; i < c->argc; i++)
		free(c->argv[i]);
	if (c->envp) {
		for (char **e = c->envp; *e; e++)
			free(*e);
		free(c->envp);
	}
	free(c->path);
	memset(c, 0, sizeof *c);
}

static void arg(struct command *c, const char *s)
{
	c->argv[c->argc++] = xstrdup(s);
	c->argv[c->argc] = NULL;
}

/* Our environment with these NAME=VALUE pairs set (replacing any). */
static char **env_with(const char *const *set, int nset)
{
	int n = 0, k = 0;
	char **envp;

	while (environ[n])
		n++;
	envp = xcalloc((size_t)(n + nset + 1), sizeof *envp);
	for (int i = 0; i < n; i++) {
		int replaced = 0;
		for (int j = 0; j < nset && !replaced; j++) {
			size_t len = (size_t)(strchr(set[j], '=') - set[j]) + 1;
			replaced = strncmp(environ[i], set[j], len) == 0;
		}
		if (!replaced)
			envp[k++] = xstrdup(environ[i]);
	}
	for (int j = 0; j < nset; j++)
		envp[k++] = xstrdup(set[j]);
	envp[k] = NULL;
	return envp;
}

static void build_command(struct command *c, const struct cell *cell, const char *cell_file, const char *run_dir,
                          const struct arm_options *o)
{
	memset(c, 0, sizeof *c);
	/* the pool cannot give it so many: a property of where it runs, as a missing Python is */
	if (o->pool_gpus > 0 && cell->hardware.gpus > o->pool_gpus) {
		snprintf(c->reason, sizeof c->reason, "hardware.gpus is %d, but --gpus lists %d GPU%s",
		         cell->hardware.gpus, o->pool_gpus, o->pool_gpus == 1 ? "" : "s");
		c->cannot_status = STATUS_SKIPPED;
		return;
	}
	/* several GPUs for one run: poros-train's ranks, nothing else yet */
	if (cell->hardware.gpus > 1 && cell->method != METHOD_POROS && cell->method != METHOD_RESIDENT) {
		snprintf(c->reason, sizeof c->reason, "hardware.gpus > 1 is not implemented for method %s",
		         method_names[cell->method]);
		c->cannot_status = STATUS_SKIPPED;
		return;
	}
	if (cell->method == METHOD_POROS || cell->method == METHOD_RESIDENT) {
		c->path = locate_program("POROS_TRAIN", "poros-train", 1, c->reason, sizeof c->reason);
		if (c->path == NULL) {
			c->cannot_status = STATUS_ERROR;
			return;
		}
		arg(c, c->path);
		arg(c, "--cell");
		arg(c, cell_file);
		arg(c, "--mode");
		arg(c, cell->method == METHOD_POROS ? "blockwise" : "resident");
		arg(c, "--out");
		arg(c, run_dir);
		if (cell->hardware.gpus > 1) { /* one rank a GPU (the CUDA runtime's count is checked there) */
			char n[16];

			snprintf(n, sizeof n, "%d", cell->hardware.gpus);
			arg(c, "--gpus");
			arg(c, n);
		}
		c->envp = env_with(NULL, 0);
	} else {
		/* The arms must never reach the network, whatever the caller's
		 * environment; unbuffered so the log keeps pace with the run. */
		static const char *const py_env[] = {
			"HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "HF_DATASETS_OFFLINE=1",
			"PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1",
		};
		char *dir = arms_dir();
		char *script = xasprintf("%s/%s_arm.py", dir, method_names[cell->method]);

		free(dir);
		c->path = locate_program("POROS_PYTHON", "python3", 0, c->reason, sizeof c->reason);
		if (c->path == NULL) {
			/* No Python here is a property of the machine: the arm is skipped. */
			c->cannot_status = STATUS_SKIPPED;
			free(script);
			return;
		}
		if (access(script, R_OK) < 0) {
			snprintf(c->reason, sizeof c->reason, "baseline arm %s: %s (set POROS_ARMS_DIR)", script,
			         strerror(errno));
			c->cannot_status = STATUS_ERROR;
			free(c->path);
			c->path = NULL;
			free(script);
			return;
		}
		arg(c, c->path);
		arg(c, script);
		arg(c, "--cell");
		arg(c, cell_file);
		arg(c, "--out");
		arg(c, run_dir);
		free(script);
		c->envp = env_with(py_env, (int)(sizeof py_env / sizeof py_env[0]));
	}
}

/* --- the summary ---------------------------------------------------------- */

/* The child's summary is its last stdout line that is a JSON object.
 * Returns the object, or NULL with why set. */
static cJSON *find_summary(const char *out, size_t len, char *why, size_t whysz)
{
	const char *end = out + len, *line_end, *p;
	int nonblank = 0;

	while (end > out) {
		line_end = end;
		p = line_end;
		while (p > out && p[-1] != '\n')
			p--;
		end = p > out ? p - 1 : out;
		while (p < line_end && (*p == ' ' || *p == '\t' || *p == '\r'))
			p++;
		if (p == line_end)
			continue;
		nonblank++;
		if (*p == '{') {
			const char *stop = NULL;
			size_t n = (size_t)(line_end - p);
			cJSON *j = cJSON_ParseWithLengthOpts(p, n, &stop, 0);
			if (j && cJSON_IsObject(j))
				return j;
			cJSON_Delete(j);
			while (n > 0 && p[n - 1] == '\r')
				n--;
			snprintf(why, whysz, "malformed summary (not valid JSON): \"%.*s%s\"", n > 60 ? 60 : (int)n, p,
			         n > 60 ? "..." : "");
			return NULL;
		}
	}
	if (nonblank == 0)
		snprintf(why, whysz, "no summary on stdout (it printed nothing)");
	else
		snprintf(why, whysz, "no summary on stdout (%d line%s, none a JSON object)", nonblank,
		         nonblank == 1 ? "" : "s");
	return NULL;
}

/* The reason, then "; the last lines of logs/<id>.log:" and those lines,
 * each on a line of its own, indented. */
static char *with_log_tail(const char *reason, const struct child_result *r, const char *log_rel)
{
	size_t cap = strlen(reason) + 128;
	char *s;

	for (int i = 0; i < r->n_tail; i++)
		cap += strlen(r->tail[i]) + 4;
	s = xmalloc(cap);
	if (r->n_tail == 0) {
		snprintf(s, cap, "%s (%s is empty)", reason, log_rel);
		return s;
	}
	snprintf(s, cap, "%s; the last lines of %s:", reason, log_rel);
	for (int i = 0; i < r->n_tail; i++) {
		strcat(s, "\n  ");
		strcat(s, r->tail[i]);
	}
	return s;
}

static void set_failure(struct artifact *a, enum artifact_status st, char *msg)
{
	a->status = st;
	free(a->error);
	a->error = msg;
}

/* How the child ended, in words, when that matters. */
static void describe_end(const struct child_result *r, char *buf, size_t n)
{
	if (r->signaled)
		snprintf(buf, n, "killed by signal %d (%s)", r->signo, signal_name(r->signo));
	else
		snprintf(buf, n, "exit status %d", r->exit_code);
}

/* The artifact's status and error from what the child did. */
static void classify(struct artifact *a, const struct child_result *r, const struct command *cmd,
                     const char *log_rel, double timeout_s)
{
	char why[320] = "", end[96], msg[768], bad[256];
	int have_summary = 0, clean_exit = r->exited && r->exit_code == 0;
	cJSON *summary;

	if (!r->spawned) {
		set_failure(a, STATUS_ERROR, xasprintf("cannot execute %s: %s", cmd->path, strerror(r->spawn_errno)));
		return;
	}
	if (r->interrupted) {
		snprintf(msg, sizeof msg, "interrupted: poros-arm got %s and ended the arm's process group",
		         signal_name(child_interrupted_by()));
		set_failure(a, STATUS_ERROR, with_log_tail(msg, r, log_rel));
		return;
	}
	summary = find_summary(r->out, r->out_len, why, sizeof why);
	if (summary) {
		if (artifact_apply_summary(a, summary, bad, sizeof bad) == 0)
			have_summary = 1;
		else
			snprintf(why, sizeof why, "malformed summary: %s", bad);
		cJSON_Delete(summary);
	}
	if (r->timed_out) {
		snprintf(msg, sizeof msg, "timed out after %g s: its process group was sent SIGTERM, then SIGKILL",
		         timeout_s);
		set_failure(a, STATUS_ERROR, with_log_tail(msg, r, log_rel));
		return;
	}
	describe_end(r, end, sizeof end);
	if (have_summary) {
		if (a->status == STATUS_OK && !clean_exit) {
			snprintf(msg, sizeof msg, "%s after a summary with status ok", end);
			set_failure(a, STATUS_ERROR, with_log_tail(msg, r, log_rel));
		} else if (a->status == STATUS_ERROR && r->oom_line) {
			/* The child did not see it as one, but its log says so. */
			set_failure(a, STATUS_OOM, xasprintf("%s (log: %s)", a->error, r->oom_line));
		}
		return;
	}
	if (r->oom_line) {
		snprintf(msg, sizeof msg, "out of memory: %s (%s; %s)", r->oom_line, end, why);
		set_failure(a, STATUS_OOM, xstrdup(msg));
		return;
	}
	snprintf(msg, sizeof msg, "%s; %s", end, why);
	set_failure(a, STATUS_ERROR, with_log_tail(msg, r, log_rel));
}

/* --- one cell ------------------------------------------------------------- */

static int make_dir(const char *path)
{
	if (mkdir_p(path, 0755) == 0)
		return 0;
	warnsys("%s: cannot create directory", path);
	return -1;
}

/* A directory poros-arm writes into below OUTDIR (logs/, runs/, runs/<id>/,
 * cells/): created when missing, and refused when it is a symlink, so a
 * link planted in the output directory cannot send a log or a training run
 * elsewhere.  OUTDIR itself is the user's choice and may be a link. */
static int make_inner_dir(const char *outdir, const char *rel)
{
	char *path = xasprintf("%s/%s", outdir, rel);
	struct stat st;
	int rc = 0;

	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		warnsys("%s: cannot create directory", path);
		rc = -1;
	} else if (lstat(path, &st) < 0) {
		warnsys("%s", path);
		rc = -1;
	} else if (S_ISLNK(st.st_mode)) {
		warnmsg("%s: is a symbolic link; refusing to write through it (remove it or choose another -o)", path);
		rc = -1;
	} else if (!S_ISDIR(st.st_mode)) {
		warnmsg("%s: not a directory", path);
		rc = -1;
	}
	free(path);
	return rc;
}

/* "[2/5] peft qwen2_5_32b bf16 ..." and its end " ok 41.2 s" on one
 * line; with -v, or in a --gpus worker (whose lines the pool passes on
 * whole), the start and the end are lines of their own. */
static int whole_lines(const struct arm_options *o)
{
	return o->verbose || o->pool_gpus > 0;
}

static void progress_start(const struct cell *c, int index, int total, const struct arm_options *o, int newline)
{
	if (o->progress)
		fprintf(stderr, "[%s] ", o->progress);
	else if (total > 0)
		fprintf(stderr, "[%d/%d] ", index, total);
	else
		fprintf(stderr, "[%d] ", index);
	fprintf(stderr, "%s %s %s", method_names[c->method], c->model.arch, precision_names[c->precision]);
	if (o->device)
		fprintf(stderr, " on GPU%s %s", strchr(o->device, ',') ? "s" : "", o->device);
	fprintf(stderr, " ...%s", newline ? "\n" : "");
}

static void progress_end(const struct artifact *a, int index, int total, const struct arm_options *o,
                         long long log_dropped)
{
	const char *why = a->error ? a->error : "";
	int n = (int)strcspn(why, "\n");

	if (whole_lines(o))
		progress_start(&a->cell, index, total, o, 0);
	fprintf(stderr, " %s", artifact_status_names[a->status]);
	if (isfinite(a->wall_s))
		fprintf(stderr, " %.1f s", a->wall_s);
	if (a->status != STATUS_OK && n > 0)
		fprintf(stderr, ": %.*s%s", n > 160 ? 160 : n, why, n > 160 ? "..." : "");
	if (log_dropped > 0)
		fprintf(stderr, " (log capped: %lld bytes of stderr dropped)", log_dropped);
	fputc('\n', stderr);
}

/* Where everything of one cell lives. */
struct cell_paths {
	char *outdir, *artifact, *log, *log_rel, *run_dir, *run_rel, *cell_file;
};

static void paths_free(struct cell_paths *p)
{
	free(p->outdir);
	free(p->artifact);
	free(p->log);
	free(p->log_rel);
	free(p->run_dir);
	free(p->run_rel);
	free(p->cell_file);
}

/* Creates OUTDIR, logs/, runs/<id>/ and (when needed) the cell file the
 * child reads.  -1 after a message when any cannot be made. */
static int prepare(struct cell_paths *p, struct cell *c, const struct arm_options *o, const char *cell_path)
{
	int override = o->outdir && strcmp(o->outdir, c->output_dir) != 0;

	p->outdir = xstrdup(o->outdir ? o->outdir : c->output_dir);
	if (override) {
		/* the cell the artifact records is the cell as run */
		free(c->output_dir);
		c->output_dir = xstrdup(p->outdir);
	}
	/* cell_from_json has checked that cell_id is <method>_<arch>_<precision>
	 * and a safe file name */
	p->artifact = xasprintf("%s/%s.json", p->outdir, c->cell_id);
	p->log_rel = xasprintf("logs/%s.log", c->cell_id);
	p->log = xasprintf("%s/%s", p->outdir, p->log_rel);
	p->run_rel = xasprintf("runs/%s", c->cell_id);
	p->run_dir = xasprintf("%s/%s", p->outdir, p->run_rel);
	if (make_dir(p->outdir) < 0 || make_inner_dir(p->outdir, "logs") < 0 || make_inner_dir(p->outdir, "runs") < 0 ||
	    make_inner_dir(p->outdir, p->run_rel) < 0)
		return -1;
	if (cell_path && !override) {
		p->cell_file = xstrdup(cell_path);
		return 0;
	}
	{
		char *cells = xasprintf("%s/cells", p->outdir);
		cJSON *j = cell_to_json(c);
		char *text = jsonl_format(j);
		int rc = make_inner_dir(p->outdir, "cells");

		cJSON_Delete(j);
		p->cell_file = xasprintf("%s/%s.json", cells, c->cell_id);
		free(cells);
		if (rc == 0 && atomic_write(p->cell_file, text, strlen(text)) < 0) {
			warnsys("%s: cannot write", p->cell_file);
			rc = -1;
		}
		free(text);
		return rc;
	}
}

/* Returns the bytes of stderr left out of the log. */
static long long run_child(struct artifact *a, const struct cell_paths *p, const struct command *cmd,
                      const struct arm_options *o, const struct cell *c)
{
	double timeout_s = o->timeout_s >= 0 ? o->timeout_s : c->training.timeout_s;
	struct child_spec spec = {
		.path = cmd->path, .argv = cmd->argv, .envp = cmd->envp, .log_max = o->log_max,
		.timeout_s = timeout_s, .kill_grace_s = o->kill_grace_s, .echo_stderr = o->verbose,
	};
	struct child_result r;
	long long dropped;
	int fd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);

	if (fd < 0) {
		set_failure(a, STATUS_ERROR, xasprintf("%s: cannot write the log: %s", p->log, strerror(errno)));
		return 0;
	}
	spec.log_fd = fd;
	artifact_set_argv(a, cmd->argc, cmd->argv);
	child_run(&spec, &r);
	a->wall_s = round(r.wall_s * 1000.0) / 1000.0;
	classify(a, &r, cmd, p->log_rel, timeout_s);
	a->metrics.process_peak_rss_mb = r.max_rss_mb;
	if (r.timed_out || r.interrupted) {
		char *note = xasprintf("\n[poros-arm: %s after %.1f s; process group %d sent SIGTERM, then SIGKILL]\n",
		                       r.timed_out ? "timed out" : "interrupted", r.wall_s, r.pgid);
		if (write(fd, note, strlen(note)) < 0)
			r.log_errno = errno;
		free(note);
	}
	if (r.log_errno)
		warnmsg("%s: writing the log failed: %s", p->log, strerror(r.log_errno));
	close(fd);
	dropped = r.log_dropped;
	child_result_free(&r);
	return dropped;
}

/* One pass of timing_run_passes: one fresh child. */
struct pass_ctx {
	const struct cell_paths *p;
	const struct command *cmd;
	const struct arm_options *o;
	const struct cell *c;
	long long log_dropped;
};

static void run_pass(struct artifact *a, void *ctx)
{
	struct pass_ctx *x = ctx;

	x->log_dropped += run_child(a, x->p, x->cmd, x->o, x->c);
}

/* Writes the artifact file, then (once it is safely on disk, so that a
 * consumer of stdout never holds a result the directory lacks) its line
 * on stdout.  0, or 1 after a message. */
static int emit(const struct artifact *a, const char *path)
{
	cJSON *j = artifact_to_json(a);
	char *line = jsonl_format(j);
	int rc = 0;

	cJSON_Delete(j);
	if (atomic_write(path, line, strlen(line)) < 0) {
		warnsys("%s: cannot write the artifact", path);
		rc = EXIT_RUNTIME;
	} else {
		fputs(line, stdout);
		/* A reader that went away ends the run: stdout_check_at_exit says
		 * "writing output failed" as every tool does. */
		if (fflush(stdout) != 0)
			exit(EXIT_RUNTIME);
	}
	free(line);
	return rc;
}

int arm_run_cell(const struct arm_options *o, const cJSON *cell_json, const char *cell_path, const char *where,
                 int index, int total)
{
	struct cell c;
	struct cell_paths p;
	struct command cmd;
	struct artifact a;
	char err[512];
	double t0;
	long long log_dropped = 0;
	int rc;

	memset(&c, 0, sizeof c);
	if (cell_from_json(&c, cell_json, err, sizeof err) < 0) {
		warnmsg("%s: %s", where, err);
		return EXIT_USAGE;
	}
	memset(&p, 0, sizeof p);
	if (prepare(&p, &c, o, cell_path) < 0) {
		paths_free(&p);
		cell_free(&c);
		return EXIT_RUNTIME;
	}
	artifact_init(&a);
	if (artifact_set_cell(&a, &c, err, sizeof err) < 0)
		die(EXIT_RUNTIME, "%s: cell does not survive a copy: %s", where, err);
	artifact_env_collect_host(&a.env);
	artifact_set_str(&a.log, p.log_rel);
	artifact_set_str(&a.run_dir, p.run_rel);
	progress_start(&c, index, total, o, whole_lines(o));

	t0 = now_seconds();
	utc_now_iso(a.started_at, sizeof a.started_at);
	build_command(&cmd, &c, p.cell_file, p.run_dir, o);
	if (cmd.path == NULL) {
		set_failure(&a, cmd.cannot_status, xstrdup(cmd.reason));
		artifact_set_str(&a.log, NULL); /* nothing ran, so nothing was logged */
		a.wall_s = round((now_seconds() - t0) * 1000.0) / 1000.0;
	} else {
		struct pass_ctx x = { &p, &cmd, o, &c, 0 };

		timing_run_passes(&a, run_pass, &x);
		log_dropped = x.log_dropped;
	}
	utc_now_iso(a.finished_at, sizeof a.finished_at);
	progress_end(&a, index, total, o, log_dropped);
	rc = emit(&a, p.artifact);

	command_free(&cmd);
	artifact_free(&a);
	paths_free(&p);
	cell_free(&c);
	return rc;
}

int arm_run_file(const struct arm_options *o, const char *path, int index, int total)
{
	char err[512];
	cJSON *cell = json_read_file(path, err, sizeof err);
	int rc;

	if (cell == NULL) {
		warnmsg("%s", err);
		return EXIT_USAGE;
	}
	if (!cJSON_IsObject(cell)) {
		warnmsg("%s: not a JSON object (expected a cell)", path);
		cJSON_Delete(cell);
		return EXIT_USAGE;
	}
	rc = arm_run_cell(o, cell, path, path, index, total);
	cJSON_Delete(cell);
	return rc;
}
