/* tools/poros-arm/pool.c: --gpus, many cells at once, no GPU of the list
 * in two cells at once.  Each cell runs in a forked worker, a poros-arm of
 * its own that does for it what poros-arm does for one cell without --gpus
 * (cell_run.c: child process group, timeout, log, artifact), with
 * CUDA_VISIBLE_DEVICES set to its GPUs alone: hardware.gpus of them.  This
 * process hands out the cells and GPUs, first in first out, and is the one
 * writer of our stdout (each artifact line whole, as its cell ends) and of
 * our stderr (the workers' lines, whole), so that nothing two cells print
 * ever interleaves mid-line. */
#include "arm.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/util.h"

/* Bytes read from a worker's pipe and not passed on yet. */
struct bytes {
	char *p;
	size_t len, cap;
};

static void bytes_add(struct bytes *b, const char *p, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2;
		b->p = xrealloc(b->p, b->cap);
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

/* To our stderr; when it is gone there is nothing to tell it. */
static void put_stderr(const char *p, size_t n)
{
	(void)write_all(2, p, n);
}

/* A worker and the GPUs it holds, "0,1" (pid 0: the slot is free; gpus
 * NULL: a cell the pool cannot give its GPUs, which runs on none). */
struct worker {
	char *gpus;
	pid_t pid;
	int out_fd, err_fd;
	struct bytes out, err;
	const struct pool_cell *cell;
	int reaped, status, signalled;
};

/* Passes on the complete lines of w's stderr; at its end (last) the rest
 * too, ended by a newline. */
static void relay_err(struct worker *w, int last)
{
	size_t n = w->err.len;

	if (!last)
		while (n > 0 && w->err.p[n - 1] != '\n')
			n--;
	if (n == 0)
		return;
	put_stderr(w->err.p, n);
	if (last && w->err.p[n - 1] != '\n')
		put_stderr("\n", 1);
	memmove(w->err.p, w->err.p + n, w->err.len - n);
	w->err.len -= n;
}

/* In the worker: one cell, then exit with its code. */
static noreturn void worker_main(const struct arm_options *o, struct worker *w, const struct worker *all, int nall,
                                 int npool_gpus, int out_w, int err_w, pid_t pool)
{
	struct arm_options wo = *o;
	int rc;

	for (int i = 0; i < nall; i++) {
		if (all[i].pid > 0 && &all[i] != w) {
			close(all[i].out_fd);
			close(all[i].err_fd);
		}
	}
	close(w->out_fd);
	close(w->err_fd);
	if (dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
		_exit(EXIT_RUNTIME);
	close(out_w);
	close(err_w);
	child_signals_init_worker(pool);
	/* nvidia-smi's indices are PCI bus order: CUDA must count the same way */
	if ((w->gpus ? setenv("CUDA_VISIBLE_DEVICES", w->gpus, 1) : unsetenv("CUDA_VISIBLE_DEVICES")) < 0 ||
	    setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1) < 0)
		diesys(EXIT_RUNTIME, "setenv");
	wo.device = w->gpus;
	wo.pool_gpus = npool_gpus;
	/* the pool was interrupted as it forked us: no cell starts */
	if (child_interrupted_by())
		exit(EXIT_RUNTIME);
	if (w->cell->path)
		rc = arm_run_file(&wo, w->cell->path, w->cell->index, w->cell->total);
	else
		rc = arm_run_cell(&wo, w->cell->cell, NULL, w->cell->where, w->cell->index, w->cell->total);
	/* the pool says "interrupted", once */
	exit(child_interrupted_by() ? EXIT_RUNTIME : rc);
}

/* Starts the cell on w's GPUs.  0, or -1 after a message. */
static int spawn(const struct arm_options *o, struct worker *w, const struct pool_cell *pc, struct worker *all,
                 int nall, int npool_gpus)
{
	int out[2], err[2];
	sigset_t ours, old;
	pid_t pool = getpid(), pid;

	if (pipe_cloexec(out) < 0) {
		warnsys("pipe");
		return -1;
	}
	if (pipe_cloexec(err) < 0) {
		warnsys("pipe");
		close(out[0]);
		close(out[1]);
		return -1;
	}
	w->cell = pc;
	w->out_fd = out[0];
	w->err_fd = err[0];
	w->reaped = w->status = w->signalled = 0;
	/* The worker sets up its own handlers before it takes a signal. */
	sigemptyset(&ours);
	sigaddset(&ours, SIGCHLD);
	sigaddset(&ours, SIGINT);
	sigaddset(&ours, SIGTERM);
	sigaddset(&ours, SIGHUP);
	sigprocmask(SIG_BLOCK, &ours, &old);
	fflush(NULL);
	pid = fork();
	if (pid == 0)
		worker_main(o, w, all, nall, npool_gpus, out[1], err[1], pool);
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(out[1]);
	close(err[1]);
	if (pid < 0) {
		warnsys("fork");
		close(out[0]);
		close(err[0]);
		return -1;
	}
	w->pid = pid;
	return 0;
}

/* Reads what is there on one of w's pipes; closes it at its end. */
static void drain(int *fd, struct bytes *b)
{
	char buf[65536];
	ssize_t n = read(*fd, buf, sizeof buf);

	if (n > 0) {
		bytes_add(b, buf, (size_t)n);
	} else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
		close(*fd);
		*fd = -1;
	}
}

/* Collects the workers that have exited (and the orphans that came to us
 * as their subreaper, which are nobody's cell). */
static void reap(struct worker *ws, int n)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (int i = 0; i < n; i++) {
			if (ws[i].pid == pid) {
				ws[i].reaped = 1;
				ws[i].status = status;
			}
		}
	}
}

/* A worker is done: its artifact line to stdout, whole; its exit code.
 * *out_failed is set once our stdout cannot be written. */
static int finish(struct worker *w, int interrupted, int *out_failed)
{
	const struct pool_cell *pc = w->cell;
	const char *name = pc->path ? pc->path : pc->where;
	int rc;

	relay_err(w, 1);
	if (w->out.len > 0 && !*out_failed) {
		if (fwrite(w->out.p, 1, w->out.len, stdout) != w->out.len || fflush(stdout) != 0) {
			warnsys("writing output failed");
			*out_failed = 1;
		}
	}
	w->out.len = 0;
	if (WIFEXITED(w->status)) {
		rc = WEXITSTATUS(w->status);
	} else {
		if (!interrupted)
			warnmsg("%s: the worker on GPU%s %s was killed by %s", name, w->gpus && strchr(w->gpus, ',') ? "s" : "",
			        w->gpus ? w->gpus : "(none)", signal_name(WTERMSIG(w->status)));
		rc = EXIT_RUNTIME;
	}
	w->pid = 0;
	return rc;
}

int pool_cell_gpus(const cJSON *cell)
{
	const cJSON *hw = cJSON_GetObjectItemCaseSensitive(cell, "hardware");
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(hw, "gpus");

	if (!cJSON_IsNumber(n) || n->valuedouble < 2 || n->valuedouble > 256 || n->valuedouble != (int)n->valuedouble)
		return 1;
	return (int)n->valuedouble;
}

/* Gives slot want GPUs, the first free ones in the order listed, as
 * "a,b" in *gpus_out; none (NULL) to a cell wanting more than the list
 * has, which is not run.  0 when they are not free yet. */
static int take_gpus(char **gpus_out, int *owner, char *const *gpus, int ngpus, int want, int slot)
{
	int nfree = 0, got = 0;
	size_t len = 0;

	*gpus_out = NULL;
	if (want > ngpus)
		return 1;
	for (int g = 0; g < ngpus; g++)
		if (owner[g] < 0) {
			nfree++;
			len += strlen(gpus[g]) + 1;
		}
	if (nfree < want)
		return 0;
	*gpus_out = xcalloc(len + 1, 1);
	for (int g = 0; g < ngpus && got < want; g++) {
		if (owner[g] >= 0)
			continue;
		if (got++ > 0)
			strcat(*gpus_out, ",");
		strcat(*gpus_out, gpus[g]);
		owner[g] = slot;
	}
	return 1;
}

static void release_gpus(int *owner, int ngpus, int slot)
{
	for (int g = 0; g < ngpus; g++)
		if (owner[g] == slot)
			owner[g] = -1;
}

int arm_run_pool(const struct arm_options *o, const struct pool_cell *cells, int ncells, char *const *gpus, int ngpus)
{
	/* every running cell but one that runs on none holds a GPU */
	int nslots = ngpus + 1;
	struct worker *ws = xcalloc((size_t)nslots, sizeof *ws);
	struct pollfd *pf = xcalloc((size_t)(2 * nslots), sizeof *pf);
	int *owner = xcalloc((size_t)ngpus, sizeof *owner);
	int next = 0, running = 0, rc = EXIT_OK, forwarded = 0, out_failed = 0;

	for (int g = 0; g < ngpus; g++)
		owner[g] = -1;
	for (int i = 0; i < nslots; i++)
		ws[i].out_fd = ws[i].err_fd = -1;
	for (;;) {
		int stop = child_interrupted_by() != 0 || out_failed, nfds = 0;

		/* Every worker ends its cell the way poros-arm ends one: its
		 * child's process group goes, its artifact is still written. */
		if (stop && !forwarded) {
			int signo = child_interrupted_by() ? child_interrupted_by() : SIGTERM;

			for (int i = 0; i < nslots; i++)
				if (ws[i].pid > 0 && !ws[i].reaped)
					kill(ws[i].pid, signo);
			forwarded = 1;
		}
		/* First in, first out: a cell waiting for its GPUs holds back the
		 * ones after it, so a large cell is never starved by small ones. */
		while (!stop && next < ncells) {
			int slot = 0;

			while (slot < nslots && ws[slot].pid != 0)
				slot++;
			if (slot == nslots || !take_gpus(&ws[slot].gpus, owner, gpus, ngpus, cells[next].gpus, slot))
				break;
			if (spawn(o, &ws[slot], &cells[next++], ws, nslots, ngpus) < 0) {
				release_gpus(owner, ngpus, slot);
				free(ws[slot].gpus);
				ws[slot].gpus = NULL;
				rc = EXIT_RUNTIME;
			} else {
				running++;
			}
		}
		if (running == 0 && (stop || next == ncells))
			break;
		for (int i = 0; i < nslots; i++) {
			if (ws[i].out_fd >= 0)
				pf[nfds++] = (struct pollfd){.fd = ws[i].out_fd, .events = POLLIN};
			if (ws[i].err_fd >= 0)
				pf[nfds++] = (struct pollfd){.fd = ws[i].err_fd, .events = POLLIN};
		}
		/* A signal's byte on the wake pipe is the workers' business; we
		 * look at the flag twice a second (and at POROS_ARM_WATCH_PID). */
		if (poll(pf, (nfds_t)nfds, nfds > 0 ? 500 : 50) < 0 && errno != EINTR)
			diesys(EXIT_RUNTIME, "poll");
		for (int k = 0; k < nfds; k++) {
			if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			for (int i = 0; i < nslots; i++) {
				if (pf[k].fd == ws[i].out_fd) {
					drain(&ws[i].out_fd, &ws[i].out);
				} else if (pf[k].fd == ws[i].err_fd) {
					drain(&ws[i].err_fd, &ws[i].err);
					relay_err(&ws[i], 0);
				}
			}
		}
		reap(ws, nslots);
		for (int i = 0; i < nslots; i++) {
			if (ws[i].pid > 0 && ws[i].reaped && ws[i].out_fd < 0 && ws[i].err_fd < 0) {
				int cell_rc = finish(&ws[i], child_interrupted_by() != 0, &out_failed);

				release_gpus(owner, ngpus, i);
				free(ws[i].gpus);
				ws[i].gpus = NULL;
				rc = cell_rc > rc ? cell_rc : rc;
				running--;
			}
		}
	}
	for (int i = 0; i < nslots; i++) {
		free(ws[i].out.p);
		free(ws[i].err.p);
	}
	free(ws);
	free(pf);
	free(owner);
	return out_failed ? EXIT_RUNTIME : rc;
}
