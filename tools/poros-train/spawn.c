/* tools/poros-train/spawn.c: --nproc N and --gpus N: the ranks of one host
 * started by poros-train itself.  Each rank is this command line without
 * the option, run with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1
 * and a free MASTER_PORT (comm_tcp.c's environment); with --gpus on the
 * cuda backend (LOCAL_RANK picks each one's GPU).  The ranks die with this
 * process (PR_SET_PDEATHSIG); a rank that fails ends the others within
 * seconds (its sockets close), and a rank still running 10 s after
 * another failed is killed. */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "shared_base.h"
#include "train.h"
#include "util/util.h"

#define SPAWN_GRACE_S 10

static pid_t *children;
static int n_children;

/* SIGINT/SIGTERM to this process go on to the ranks */
static void forward_signal(int sig)
{
	for (int r = 0; r < n_children; r++)
		if (children[r] > 0)
			kill(children[r], sig);
}

/* A TCP port of 127.0.0.1 that nothing listens on now. */
static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* argv without --nproc/--gpus (and their values), with --backend cuda
 * added for --gpus */
static char **rank_argv(const struct train_config *c, int argc, char **argv)
{
	char **out = xcalloc((size_t)argc + 3, sizeof *out);
	int n = 0;

	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "--nproc") == 0 || strcmp(a, "--gpus") == 0) {
			i++;
			continue;
		}
		if (strncmp(a, "--nproc=", 8) == 0 || strncmp(a, "--gpus=", 7) == 0)
			continue;
		out[n++] = argv[i];
	}
	if (c->nproc_gpus && strcmp(c->backend, "cuda") != 0) {
		out[n++] = "--backend";
		out[n++] = "cuda";
	}
	return out;
}

static void start_rank(int rank, int world, int port, char **args)
{
	pid_t parent = getpid(), pid = fork();
	char v[32];

	if (pid < 0)
		die(EXIT_RUNTIME, "--nproc: fork: %s", strerror(errno));
	if (pid > 0) {
		children[rank] = pid;
		return;
	}
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent) /* the parent went before the line above */
		_exit(EXIT_RUNTIME);
	snprintf(v, sizeof v, "%d", rank);
	setenv("RANK", v, 1);
	setenv("LOCAL_RANK", v, 1);
	snprintf(v, sizeof v, "%d", world);
	setenv("WORLD_SIZE", v, 1);
	setenv("MASTER_ADDR", "127.0.0.1", 1);
	snprintf(v, sizeof v, "%d", port);
	setenv("MASTER_PORT", v, 1);
	execv("/proc/self/exe", args);
	fprintf(stderr, "%s: rank %d: cannot run /proc/self/exe: %s\n", progname, rank, strerror(errno));
	_exit(EXIT_RUNTIME);
}

static int rank_of(pid_t pid)
{
	for (int r = 0; r < n_children; r++)
		if (children[r] == pid)
			return r;
	return -1;
}

/* --gpus all: as many ranks as the CUDA runtime sees devices (after
 * CUDA_VISIBLE_DEVICES); 0 with the refusal said when there is none. */
static int count_gpus(void)
{
	char why[512] = "";
	int n = backend_cuda_devices(why, sizeof why);

	if (n == 0)
		warnmsg("--gpus all: no CUDA device%s%s%s", strcmp(why, "no CUDA device") ? " (" : "",
		        strcmp(why, "no CUDA device") ? why : "", strcmp(why, "no CUDA device") ? ")" : "");
	return n;
}

int spawn_ranks(const struct train_config *c, int argc, char **argv)
{
	const char *name = c->nproc_gpus ? "--gpus" : "--nproc";
	struct train_config counted;
	int port, left, first_bad = -1, rank0 = EXIT_RUNTIME;
	time_t deadline = 0;
	pid_t rank0_pid;
	struct sigaction sa = { .sa_handler = forward_signal };
	char **args;

	if (comm_env_launched()) {
		warnmsg("%s: this process was started as a rank already (mpirun, srun or RANK/WORLD_SIZE): "
		        "the launcher starts the ranks", name);
		return EXIT_USAGE;
	}
	if (c->nproc_gpus && strcmp(c->backend, "cpu") == 0) {
		warnmsg("--gpus: one rank a GPU on the cuda backend, not --backend cpu (CPU ranks: --nproc N)");
		return EXIT_USAGE;
	}
	if (c->nproc == GPUS_ALL) {
		counted = *c;
		if ((counted.nproc = count_gpus()) == 0)
			return EXIT_USAGE;
		c = &counted;
	} else if (c->nproc_gpus && !c->plan) { /* never fewer GPUs than asked, nor ranks sharing one */
		char why[512] = "";
		int n = backend_cuda_devices(why, sizeof why);

		if (n < c->nproc) {
			warnmsg("--gpus %d: the CUDA runtime sees %d device%s%s%s%s", c->nproc, n, n == 1 ? "" : "s",
			        n ? "" : " (", n ? "" : why, n ? "" : ")");
			return EXIT_USAGE;
		}
	}
	if (c->plan) { /* the host's plan for its ranks (the cuda one for --gpus); nothing is started */
		struct train_config host = *c;

		host.local_ranks = c->nproc;
		if (c->nproc_gpus)
			host.backend = "cuda";
		return train_run(&host, stdout);
	}
	left = c->nproc;
	if ((port = free_port()) < 0) {
		warnmsg("%s: no free TCP port on 127.0.0.1: %s", name, strerror(errno));
		return EXIT_RUNTIME;
	}
	args = rank_argv(c, argc, argv);
	children = xcalloc((size_t)c->nproc, sizeof *children);
	n_children = c->nproc;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	fflush(stdout);
	fflush(stderr);
	for (int r = 0; r < c->nproc; r++)
		start_rank(r, c->nproc, port, args);
	rank0_pid = children[0];
	while (left > 0) {
		int status, r;
		pid_t pid = waitpid(-1, &status, deadline ? WNOHANG : 0);

		if (pid < 0 && errno == EINTR)
			continue;
		if (pid < 0)
			break;
		if (pid == 0) { /* a rank failed; the others have had their grace */
			if (time(NULL) >= deadline)
				for (r = 0; r < n_children; r++)
					if (children[r] > 0) {
						warnmsg("%s: rank %d still running %d s after rank %d failed: killing it", name, r,
						        SPAWN_GRACE_S, first_bad);
						kill(children[r], SIGKILL);
					}
			usleep(50 * 1000);
			continue;
		}
		if ((r = rank_of(pid)) < 0)
			continue;
		children[r] = 0;
		left--;
		if (r == 0)
			rank0 = WIFEXITED(status) ? WEXITSTATUS(status) : EXIT_RUNTIME;
		if (WIFSIGNALED(status))
			warnmsg("%s: rank %d was killed by signal %d (%s)", name, r, WTERMSIG(status), strsignal(WTERMSIG(status)));
		if ((WIFSIGNALED(status) || WEXITSTATUS(status) != 0) && first_bad < 0) {
			first_bad = r;
			deadline = time(NULL) + SPAWN_GRACE_S;
		}
	}
	/* a rank 0 killed while its host's base was being shared may have left its name */
	shared_base_remove_left((long)rank0_pid);
	free(args);
	free(children);
	children = NULL;
	n_children = 0;
	if (first_bad >= 0 && rank0 == EXIT_OK)
		return EXIT_RUNTIME;
	return rank0;
}
