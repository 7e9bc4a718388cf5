/* tools/poros-arm/child.c: one arm in a fresh child process, in its own
 * process group, watched until it and its pipes are done: stderr into a
 * capped log, stdout captured for the summary, a wall-clock timeout that
 * ends the whole group (grandchildren included). */
#include "arm.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <time.h>
#include <unistd.h>

#include "util/util.h"

#define OUT_KEEP (1 << 20)    /* stdout tail kept: the summary is the last line */
#define CHUNK 65536

/* Signals arrive as bytes on this pipe so that poll() wakes at once
 * (a flag alone could be set just after we decided to sleep). */
static int wake_pipe[2] = {-1, -1};
static volatile sig_atomic_t interrupted_by;
/* POROS_ARM_WATCH_PID: the driver whose run this is; when it is gone
 * (killed outright, even from behind a --gpus worker), so are we. */
static pid_t watch_pid;

static void on_signal(int signo)
{
	int saved = errno;
	char b = 's';

	if (signo != SIGCHLD && interrupted_by == 0)
		interrupted_by = signo;
	if (write(wake_pipe[1], &b, 1) < 0) {
		/* the pipe is full: poll will wake anyway */
	}
	errno = saved;
}

/* The wake pipe and the handlers (SIGCHLD, SIGINT, SIGTERM, SIGHUP). */
static void signals_install(void)
{
	struct sigaction sa;
	int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};

	if (pipe(wake_pipe) < 0)
		diesys(EXIT_RUNTIME, "pipe");
	for (int i = 0; i < 2; i++) {
		fcntl(wake_pipe[i], F_SETFD, FD_CLOEXEC);
		fcntl(wake_pipe[i], F_SETFL, fcntl(wake_pipe[i], F_GETFL) | O_NONBLOCK);
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_NOCLDSTOP;
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaction(sigs[i], &sa, NULL);
}

/* Subreaper and parent-death signal: neither survives a fork. */
static void process_ties(pid_t parent)
{
#ifdef __linux__
	/* Orphaned grandchildren become ours, so that we can reap them and
	 * know they are gone (and their device memory with them). */
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	/* We end with what started us: SIGTERM, so that the child is still
	 * stopped and the cell's artifact still written (status error). */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		raise(SIGTERM);
#else
	(void)parent;
#endif
}

void child_signals_init(void)
{
	signals_install();
	/* A closed stdout or stderr must not kill us while a child runs
	 * (it would be left behind): writes fail with EPIPE instead.  The
	 * child gets the default back before exec. */
	signal(SIGPIPE, SIG_IGN);
	process_ties(getppid());
	{
		const char *w = getenv("POROS_ARM_WATCH_PID"), *why = NULL;
		long pid;
		if (w && *w) {
			if (parse_long(w, 1, 1L << 30, &pid, &why) < 0)
				die(EXIT_USAGE, "POROS_ARM_WATCH_PID: %s: \"%s\" (expected a process id)", why, w);
			watch_pid = (pid_t)pid;
		}
	}
}

void child_signals_init_worker(pid_t pool)
{
	sigset_t ours;

	/* The pool's wake pipe is the pool's: a worker waits on its own. */
	close(wake_pipe[0]);
	close(wake_pipe[1]);
	signals_install();
	process_ties(pool);
	sigemptyset(&ours);
	sigaddset(&ours, SIGCHLD);
	sigaddset(&ours, SIGINT);
	sigaddset(&ours, SIGTERM);
	sigaddset(&ours, SIGHUP);
	sigprocmask(SIG_UNBLOCK, &ours, NULL);
}

/* True when the watched pid is no more (or a zombie its parent has not
 * reaped yet, which is as gone). */
static int watched_gone(void)
{
	char path[64], *stat, *close_paren;
	size_t len;
	int gone;

	if (kill(watch_pid, 0) < 0 && errno == ESRCH)
		return 1;
	snprintf(path, sizeof path, "/proc/%ld/stat", (long)watch_pid);
	if ((stat = read_whole_file(path, &len)) == NULL)
		return 0;
	/* "PID (COMM) STATE ...": COMM may hold spaces and parentheses. */
	close_paren = strrchr(stat, ')');
	gone = close_paren != NULL && close_paren[1] == ' ' && close_paren[2] == 'Z';
	free(stat);
	return gone;
}

static void watch_check(void)
{
	if (watch_pid > 0 && interrupted_by == 0 && watched_gone())
		interrupted_by = SIGHUP;
}

int child_interrupted_by(void)
{
	watch_check();
	return interrupted_by;
}

const char *signal_name(int signo)
{
	static const struct { int no; const char *name; } names[] = {
		{SIGHUP, "SIGHUP"}, {SIGINT, "SIGINT"}, {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
		{SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"}, {SIGFPE, "SIGFPE"},
		{SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
		{SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
		{SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},
	};
	static char buf[32];

	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (names[i].no == signo)
			return names[i].name;
	snprintf(buf, sizeof buf, "signal %d", signo);
	return buf;
}

/* --- the log: capped, keeping its head and its tail ----------------------- */

/* The log is written through as it comes (so it can be followed) up to
 * log_max bytes.  Past a quarter of the cap the newest bytes are also
 * kept in a ring; if the stream outgrows the cap, the file is cut back
 * to its head and the ring (the tail) appended after a note. */
struct log_sink {
	int fd;
	long long max, head, total;
	char *ring;
	size_t ring_cap, ring_pos, ring_len;
	int err;
};

static void log_put(struct log_sink *s, const char *p, size_t n)
{
	long long before = s->total;

	s->total += (long long)n;
	if (before < s->max) {
		size_t direct = (size_t)(s->max - before < (long long)n ? s->max - before : (long long)n);
		if (!s->err && write_all(s->fd, p, direct) < 0)
			s->err = errno;
	}
	if (s->total <= s->head)
		return;
	if (before < s->head) {
		/* only the part past the head goes to the ring */
		p += s->head - before;
		n -= (size_t)(s->head - before);
	}
	if (s->ring == NULL) {
		s->ring_cap = (size_t)(s->max - s->head);
		s->ring = xmalloc(s->ring_cap);
	}
	if (n >= s->ring_cap) {
		p += n - s->ring_cap;
		n = s->ring_cap;
	}
	for (size_t i = 0; i < n; i++) {
		s->ring[s->ring_pos] = p[i];
		s->ring_pos = (s->ring_pos + 1) % s->ring_cap;
	}
	s->ring_len = s->ring_len + n > s->ring_cap ? s->ring_cap : s->ring_len + n;
}

/* Returns the bytes left out of the log. */
static long long log_finish(struct log_sink *s)
{
	size_t start, skip = 0;
	long long dropped;
	char *note;

	if (s->total <= s->max) {
		free(s->ring);
		return 0;
	}
	/* Start the tail at a line boundary so that no line is half-kept. */
	start = (s->ring_pos + s->ring_cap - s->ring_len) % s->ring_cap;
	while (skip < s->ring_len && s->ring[(start + skip) % s->ring_cap] != '\n')
		skip++;
	if (skip < s->ring_len)
		skip++;
	else
		skip = 0;
	dropped = s->total - s->head - (long long)(s->ring_len - skip);
	if (!s->err && (ftruncate(s->fd, s->head) < 0 || lseek(s->fd, 0, SEEK_END) < 0))
		s->err = errno;
	note = xasprintf("\n[poros-arm: %lld bytes dropped here: the log is capped at %lld bytes "
	                 "and keeps its first %lld and its last %zu]\n",
	                 dropped, s->max, s->head, s->ring_len - skip);
	if (!s->err && write_all(s->fd, note, strlen(note)) < 0)
		s->err = errno;
	free(note);
	for (size_t i = skip; i < s->ring_len && !s->err; ) {
		size_t at = (start + i) % s->ring_cap;
		size_t run = s->ring_cap - at < s->ring_len - i ? s->ring_cap - at : s->ring_len - i;
		if (write_all(s->fd, s->ring + at, run) < 0)
			s->err = errno;
		i += run;
	}
	free(s->ring);
	return dropped;
}

/* --- stderr lines: out-of-memory messages and the last few lines ---------- */

struct line_scan {
	char line[ARM_LINE_MAX + 1];
	size_t len;
	int cut;
};

/* What CUDA, cuBLAS and torch say when device memory runs out. */
static int is_oom_line(const char *s)
{
	static const char *const needles[] = {
		"CUDA out of memory", "OutOfMemoryError", "CUDA error: out of memory",
		"cudaErrorMemoryAllocation", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
	};
	for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
		if (strstr(s, needles[i]))
			return 1;
	return 0;
}

static void scan_line_end(struct line_scan *ls, struct child_result *r)
{
	char *s = ls->line;
	size_t n = ls->len;

	while (n > 0 && (s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	s[n] = '\0';
	if (n > 0) {
		char *kept = ls->cut ? xasprintf("%s...", s) : xstrdup(s);
		if (r->oom_line == NULL && is_oom_line(s))
			r->oom_line = xstrdup(kept);
		if (r->n_tail == ARM_TAIL_LINES) {
			free(r->tail[0]);
			memmove(r->tail, r->tail + 1, (ARM_TAIL_LINES - 1) * sizeof r->tail[0]);
			r->n_tail--;
		}
		r->tail[r->n_tail++] = kept;
	}
	ls->len = 0;
	ls->cut = 0;
}

static void scan(struct line_scan *ls, struct child_result *r, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\n') {
			scan_line_end(ls, r);
		} else if (p[i] == '\0') {
			continue;
		} else if (ls->len < ARM_LINE_MAX) {
			ls->line[ls->len++] = p[i];
		} else {
			ls->cut = 1;
		}
	}
}

/* --- stdout: kept whole up to 2 MiB, else its last MiB -------------------- */

static void out_put(struct child_result *r, size_t *cap, const char *p, size_t n)
{
	if (r->out_len + n + 1 > *cap) {
		*cap = (r->out_len + n + 1) * 2;
		r->out = xrealloc(r->out, *cap);
	}
	memcpy(r->out + r->out_len, p, n);
	r->out_len += n;
	if (r->out_len > 2 * OUT_KEEP) {
		memmove(r->out, r->out + r->out_len - OUT_KEEP, OUT_KEEP);
		r->out_len = OUT_KEEP;
	}
	r->out[r->out_len] = '\0';
}

/* --- start ---------------------------------------------------------------- */

/* In the child, between fork and exec: only async-signal-safe calls. */
static noreturn void exec_child(const struct child_spec *spec, int out_w, int err_w, int status_w, pid_t parent)
{
	struct sigaction sa;
	sigset_t none;
	int devnull, e;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_DFL;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGCHLD, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGPIPE, &sa, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Its own process group, so that a timeout can end everything it started. */
	setpgid(0, 0);
	/* And it dies with poros-arm: a poros-arm killed outright (SIGKILL) must
	 * not leave a trainer running that a resumed run would race. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	devnull = open("/dev/null", O_RDONLY);
	if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
		goto fail;
	execve(spec->path, spec->argv, spec->envp);
fail:
	e = errno;
	if (write(status_w, &e, sizeof e) < 0) {
		/* nothing more can be said */
	}
	_exit(127);
}

int pipe_cloexec(int p[2])
{
	if (pipe(p) < 0)
		return -1;
	fcntl(p[0], F_SETFD, FD_CLOEXEC);
	fcntl(p[1], F_SETFD, FD_CLOEXEC);
	return 0;
}

/* Forks and execs; returns the pid, or -1 with errno (exec failure included). */
static pid_t start(const struct child_spec *spec, int *out_r, int *err_r)
{
	int out[2], err[2], status[2], e = 0;
	ssize_t n;
	pid_t pid, self;

	if (pipe_cloexec(out) < 0)
		return -1;
	if (pipe_cloexec(err) < 0) {
		e = errno;
		goto close_out;
	}
	if (pipe_cloexec(status) < 0) {
		e = errno;
		goto close_err;
	}
	fflush(NULL);
	self = getpid();
	pid = fork();
	if (pid == 0)
		exec_child(spec, out[1], err[1], status[1], self);
	if (pid < 0) {
		e = errno;
		close(status[0]);
		close(status[1]);
		goto close_err;
	}
	setpgid(pid, pid); /* also here: whichever runs first, the group exists before we signal it */
	close(status[1]);
	close(out[1]);
	close(err[1]);
	/* The status pipe closes on a successful exec, or carries its errno. */
	do
		n = read(status[0], &e, sizeof e);
	while (n < 0 && errno == EINTR);
	close(status[0]);
	if (n == (ssize_t)sizeof e) {
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		close(out[0]);
		close(err[0]);
		errno = e;
		return -1;
	}
	*out_r = out[0];
	*err_r = err[0];
	return pid;
close_err:
	close(err[0]);
	close(err[1]);
close_out:
	close(out[0]);
	close(out[1]);
	errno = e;
	return -1;
}

/* --- watch ---------------------------------------------------------------- */

static void drain_wake_pipe(void)
{
	char buf[64];

	while (read(wake_pipe[0], buf, sizeof buf) > 0)
		;
}

/* Has the child exited?  WNOWAIT leaves it a zombie, so its pid (and so
 * its process group id) cannot be reused while we still signal the group. */
static int child_gone(pid_t pid)
{
	siginfo_t si;

	memset(&si, 0, sizeof si);
	if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
		return errno == ECHILD;
	return si.si_pid == pid;
}

static int ms_until(double deadline)
{
	double left = deadline - now_seconds();

	if (left <= 0)
		return 0;
	return left > 3600 ? 3600 * 1000 : (int)(left * 1000.0) + 1;
}

/* Waits (a few seconds at most) for what is left of the killed process
 * group: members stuck in the kernel may take a moment to die. */
static void reap_group(pid_t pgid)
{
	double until = now_seconds() + 5.0;

	for (;;) {
		pid_t w = waitpid(-pgid, NULL, WNOHANG);
		if (w > 0 || (w < 0 && errno == EINTR))
			continue;
		if (w < 0)
			return; /* ECHILD: none left */
		if (now_seconds() > until) {
			warnmsg("process group %d: still alive 5 s after SIGKILL", (int)pgid);
			return;
		}
		usleep(10000);
	}
}

int child_run(const struct child_spec *spec, struct child_result *r)
{
	struct log_sink log = {.fd = spec->log_fd, .max = spec->log_max, .head = spec->log_max / 4};
	struct line_scan ls = {.len = 0};
	size_t out_cap = 0;
	int out_fd = -1, err_fd = -1, status = 0;
	int exited = 0, termed = 0, killed = 0;
	double t0 = now_seconds(), deadline_term = 0, deadline_kill = 0;
	char *buf = xmalloc(CHUNK);
	struct rusage usage;
	pid_t pid, reaped;

	memset(r, 0, sizeof *r);
	memset(&usage, 0, sizeof usage);
	r->max_rss_mb = NAN;
	r->out = xcalloc(1, 1);
	pid = start(spec, &out_fd, &err_fd);
	if (pid < 0) {
		r->spawn_errno = errno;
		r->wall_s = now_seconds() - t0;
		free(buf);
		return 0;
	}
	r->spawned = 1;
	r->pgid = (int)pid;
	if (spec->timeout_s > 0)
		deadline_term = t0 + spec->timeout_s;

	while (!exited || out_fd >= 0 || err_fd >= 0) {
		struct pollfd pf[3];
		int nfds = 0, timeout = -1, iout = -1, ierr = -1;
		double now = now_seconds();

		/* The moments at which we act: the timeout, the end of the grace
		 * after SIGTERM, and (once the child is gone) the grace for its
		 * pipes, held open by a straggler, to close. */
		watch_check();
		if (!termed && (interrupted_by || (deadline_term > 0 && now >= deadline_term))) {
			if (interrupted_by)
				r->interrupted = 1;
			else
				r->timed_out = 1;
			killpg(pid, SIGTERM);
			termed = 1;
			deadline_kill = now + spec->kill_grace_s;
		}
		if (termed && !killed && now >= deadline_kill) {
			killpg(pid, SIGKILL);
			killed = 1;
		}
		if (killed && exited) {
			/* Whatever still holds the pipes is dead or past caring. */
			if (now >= deadline_kill + 1.0)
				break;
		}
		if (!termed && deadline_term > 0)
			timeout = ms_until(deadline_term);
		if (termed && !killed)
			timeout = ms_until(deadline_kill);
		if (killed)
			timeout = 100;
		/* The watched driver cannot wake us: look twice a second. */
		if (watch_pid > 0 && !termed && (timeout < 0 || timeout > 500))
			timeout = 500;

		pf[nfds].fd = wake_pipe[0];
		pf[nfds++].events = POLLIN;
		if (out_fd >= 0) {
			iout = nfds;
			pf[nfds].fd = out_fd;
			pf[nfds++].events = POLLIN;
		}
		if (err_fd >= 0) {
			ierr = nfds;
			pf[nfds].fd = err_fd;
			pf[nfds++].events = POLLIN;
		}
		if (poll(pf, (nfds_t)nfds, timeout) < 0 && errno != EINTR)
			diesys(EXIT_RUNTIME, "poll");
		drain_wake_pipe();

		if (iout >= 0 && (pf[iout].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = read(out_fd, buf, CHUNK);
			if (n > 0)
				out_put(r, &out_cap, buf, (size_t)n);
			else if (n == 0 || errno != EINTR) {
				close(out_fd);
				out_fd = -1;
			}
		}
		if (ierr >= 0 && (pf[ierr].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = read(err_fd, buf, CHUNK);
			if (n > 0) {
				log_put(&log, buf, (size_t)n);
				scan(&ls, r, buf, (size_t)n);
				if (spec->echo_stderr && write_all(2, buf, (size_t)n) < 0) {
					/* our own stderr is gone; the log still has it */
				}
			} else if (n == 0 || errno != EINTR) {
				close(err_fd);
				err_fd = -1;
			}
		}
		if (!exited && child_gone(pid)) {
			exited = 1;
			r->wall_s = now_seconds() - t0;
			/* Anything it left running in its group goes too: the next
			 * arm's memory must be its own. */
			if (!termed) {
				killpg(pid, SIGTERM);
				termed = 1;
				deadline_kill = now_seconds() + spec->kill_grace_s;
			}
		}
	}
	if (out_fd >= 0)
		close(out_fd);
	if (err_fd >= 0)
		close(err_fd);
	killpg(pid, SIGKILL); /* the group's leader is still our zombie: its id is ours to use */
	while ((reaped = wait4(pid, &status, 0, &usage)) < 0 && errno == EINTR)
		;
	/* Linux: ru_maxrss in KiB, of the child and the descendants it waited for */
	r->max_rss_mb = reaped == pid && usage.ru_maxrss > 0 ? (double)usage.ru_maxrss / 1024.0 : NAN;
	reap_group(pid);
	/* Orphans that left the group are ours too (we are their subreaper):
	 * collect those already dead, so that no zombie piles up. */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
	if (ls.len > 0)
		scan_line_end(&ls, r);
	if (WIFEXITED(status)) {
		r->exited = 1;
		r->exit_code = WEXITSTATUS(status);
	} else if (WIFSIGNALED(status)) {
		r->signaled = 1;
		r->signo = WTERMSIG(status);
	}
	r->log_bytes = log.total;
	r->log_dropped = log_finish(&log);
	r->log_errno = log.err;
	free(buf);
	return 0;
}

void child_result_free(struct child_result *r)
{
	free(r->out);
	free(r->oom_line);
	for (int i = 0; i < r->n_tail; i++)
		free(r->tail[i]);
	memset(r, 0, sizeof *r);
}
