/* tools/poros-arm/arm.h: poros-arm's parts: running one child under
 * supervision (child.c) and turning one cell into one RunArtifact
 * (cell_run.c). */
#ifndef POROS_ARM_H
#define POROS_ARM_H

#include <stddef.h>
#include <sys/types.h>
#include <cjson/cJSON.h>

#define ARM_TAIL_LINES 8      /* last stderr lines kept for an error message */
#define ARM_LINE_MAX 400      /* a kept line is cut beyond this many bytes */

/* What to run and how to watch it. */
struct child_spec {
	const char *path;         /* executable, already resolved */
	char *const *argv;
	char *const *envp;
	int log_fd;               /* the child's stderr goes here (capped) */
	long long log_max;        /* bytes; beyond it the middle is dropped */
	double timeout_s;         /* wall clock; <= 0: none */
	double kill_grace_s;      /* SIGTERM, then SIGKILL this much later */
	int echo_stderr;          /* also copy the child's stderr to ours */
};

struct child_result {
	int spawned;              /* 0: it never ran; spawn_errno says why */
	int spawn_errno;
	int exited, exit_code;    /* it returned from main / called exit */
	int signaled, signo;      /* it died of a signal */
	int timed_out;
	int interrupted;          /* poros-arm itself got SIGINT/SIGTERM/SIGHUP */
	int pgid;
	double wall_s;
	double max_rss_mb;        /* its maximum resident set (wait4), NaN when not known */
	char *out;                /* its stdout (the tail, if it was huge), NUL-terminated */
	size_t out_len;
	long long log_bytes;      /* bytes of stderr received */
	long long log_dropped;    /* of those, bytes left out of the log */
	int log_errno;            /* a write to the log failed */
	char *oom_line;           /* first CUDA/torch out-of-memory line on stderr */
	char *tail[ARM_TAIL_LINES]; /* last non-blank stderr lines, oldest first */
	int n_tail;
};

/* Installs the handlers child_run relies on (SIGCHLD, and SIGINT, SIGTERM,
 * SIGHUP which end the current child and mark the run interrupted). */
void child_signals_init(void);
/* In a --gpus worker just forked with those signals blocked: its own wake
 * pipe, subreaper and parent-death signal (the pool is its parent), then
 * the signals unblocked. */
void child_signals_init_worker(pid_t pool);
/* The signal that interrupted poros-arm, or 0. */
int child_interrupted_by(void);
/* pipe(2) with both ends close-on-exec; 0, or -1 with errno. */
int pipe_cloexec(int p[2]);

/* Starts spec->argv in its own process group with stdin /dev/null, waits
 * for it, its pipes and its process group, enforcing the timeout.
 * Returns 0 (the result says how it went; never fails after a start). */
int child_run(const struct child_spec *spec, struct child_result *res);
void child_result_free(struct child_result *res);

/* "SIGSEGV" for 11, "signal 77" for an unnamed one (static buffer). */
const char *signal_name(int signo);

struct arm_options {
	const char *outdir;       /* -o: overrides each cell's output_dir */
	double timeout_s;         /* --timeout; < 0: the cell's training.timeout_s */
	double kill_grace_s;
	long long log_max;
	int verbose;
	const char *device;       /* --gpus: this worker's GPUs, "2" or "0,1" (progress says so), else NULL */
	int pool_gpus;            /* --gpus: how many GPUs the pool has (a cell wanting more is skipped), else 0 */
	const char *progress;     /* --progress: the progress line's "[...]" instead of "[i/n]", else NULL */
};

/* One cell (a JSON object) into one artifact.  where names the input for
 * messages ("cells/a.json", "<stdin>:3"); cell_path is the file the cell
 * came from, or NULL (then it is written under OUTDIR/cells/).  index and
 * total number the progress line (total 0: unknown).  Returns an exit
 * code: 0 artifact written, 1 it could not be, 2 the cell is bad. */
int arm_run_cell(const struct arm_options *o, const cJSON *cell_json, const char *cell_path,
                 const char *where, int index, int total);
/* The same for the cell in a file (2 when it is not a JSON object). */
int arm_run_file(const struct arm_options *o, const char *path, int index, int total);

/* One cell of a --gpus pool: a file (path), or a cell read from a stream
 * (cell, named where); index and total as for arm_run_cell; gpus its
 * hardware.gpus (1 when absent or not a count: the worker judges it). */
struct pool_cell {
	const char *path;
	cJSON *cell;
	char *where;
	int index, total;
	int gpus;
};

/* A cell's hardware.gpus as the pool schedules it: 1 unless it is a count
 * above 1 (a bad value is the worker's to report). */
int pool_cell_gpus(const cJSON *cell);

/* Runs the cells in their order, each in a forked worker with
 * CUDA_VISIBLE_DEVICES set to the GPUs it has alone (hardware.gpus of
 * them, the first free ones in the order listed).  A cell waits until its
 * GPUs are free, and no later cell starts before it (first in, first
 * out); a cell wanting more GPUs than the list has is not run (its
 * artifact says skipped).  The artifact lines come on our stdout whole,
 * in the order the cells end.  On SIGINT, SIGTERM or SIGHUP every worker
 * is passed the signal and waited for.  Returns the worst exit code of
 * the cells. */
int arm_run_pool(const struct arm_options *o, const struct pool_cell *cells, int ncells, char *const *gpus,
                 int ngpus);

#endif
