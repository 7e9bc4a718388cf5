/* tools/poros-train/comm.c: the communicator (comm.h): one process by
 * itself, or a plugin loaded with dlopen. */
#include "comm.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/util.h"

struct comm {
	const struct comm_plugin *p; /* NULL: single */
	void *h, *dl;
	char err[256];
};

static int mpi_env(void)
{
	return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMIX_RANK") != NULL || getenv("PMI_RANK") != NULL;
}

int comm_env_launched(void)
{
	return mpi_env() || comm_tcp_env();
}

/* The rank's index among the ranks of its host, from the launcher; -1:
 * none said. */
static int local_rank(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
	                                    "LOCAL_RANK" };

	for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
		const char *v = getenv(vars[i]);
		char *end;
		long n;

		if (v == NULL || *v == '\0')
			continue;
		n = strtol(v, &end, 10);
		if (*end == '\0' && n >= 0 && n < 65536)
			return (int)n;
	}
	return -1;
}

int comm_bind_local_device(char *err, size_t errsz)
{
	const char *vis = getenv("CUDA_VISIBLE_DEVICES");
	int lr = local_rank();
	char pick[64];

	if (lr < 0)
		return 0;
	if (vis == NULL) {
		snprintf(pick, sizeof pick, "%d", lr);
	} else { /* the lr-th of the listed devices */
		const char *p = vis;
		size_t len;

		for (int i = 0; i < lr && p; i++) {
			p = strchr(p, ',');
			if (p)
				p++;
		}
		if (p == NULL || *p == '\0')
			return set_error(err, errsz, "local rank %d: CUDA_VISIBLE_DEVICES=%s lists fewer devices", lr, vis);
		len = strcspn(p, ",");
		if (len >= sizeof pick)
			return set_error(err, errsz, "CUDA_VISIBLE_DEVICES: entry too long");
		memcpy(pick, p, len);
		pick[len] = '\0';
	}
	setenv("CUDA_VISIBLE_DEVICES", pick, 1);
	return 0;
}

/* The plugin's path: $POROS_COMM_PLUGIN, else lib/poros/<file> beside the
 * executable's bin/ (the build tree and `make install` alike). */
static int plugin_path(char *path, size_t n, const char *file)
{
	const char *env = getenv("POROS_COMM_PLUGIN");
	char exe[PATH_MAX];
	ssize_t len;
	char *slash;

	if (env && *env)
		return snprintf(path, n, "%s", env) < (int)n ? 0 : -1;
	len = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (len <= 0)
		return -1;
	exe[len] = '\0';
	if ((slash = strrchr(exe, '/')) == NULL)
		return -1;
	*slash = '\0';
	if ((slash = strrchr(exe, '/')) != NULL)
		*slash = '\0';
	else
		strcpy(exe, ".");
	return snprintf(path, n, "%s/lib/poros/%s", exe, file) < (int)n ? 0 : -1;
}

static int load_plugin(struct comm *c, const char *file, char *err, size_t errsz)
{
	char path[PATH_MAX + 64];

	if (plugin_path(path, sizeof path, file) < 0)
		return set_error(err, errsz, "cannot find the %s plugin (set POROS_COMM_PLUGIN)", file);
	if ((c->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL)) == NULL)
		return set_error(err, errsz, "the data-parallel plugin %s cannot be loaded: %s (build it with MPI: "
		                 "make deps all)", path, dlerror());
	return 0;
}

static int open_plugin(struct comm *c, const char *file, char *err, size_t errsz)
{
	comm_plugin_open_fn open_fn;
	const char *path = file;

	if (load_plugin(c, file, err, errsz) < 0)
		return -1;
	*(void **)&open_fn = dlsym(c->dl, "poros_comm_plugin_open");
	if (open_fn == NULL)
		return set_error(err, errsz, "%s: no poros_comm_plugin_open", path);
	if (open_fn(&c->p, &c->h, err, errsz) < 0) {
		c->p = NULL;
		return -1;
	}
	if (c->p->abi != POROS_COMM_ABI) {
		int abi = c->p->abi;

		c->p = NULL;
		return set_error(err, errsz, "%s: plugin ABI %d, poros-train wants %d", path, abi, POROS_COMM_ABI);
	}
	return 0;
}

/* The cuda backend in a torchrun-style environment: NCCL's plugin over the
 * TCP table c holds (its unique id goes over TCP; no MPI call is made). */
static int nccl_over_tcp(struct comm *c, char *err, size_t errsz)
{
	typedef int (*over_fn)(const struct comm_plugin *, void *, const struct comm_plugin **, void **, char *, size_t);
	const struct comm_plugin *tcp = c->p;
	void *tcp_h = c->h;
	over_fn over;
	int rc;

	c->p = NULL; /* until NCCL holds the TCP table, comm_close must not see half a communicator */
	rc = load_plugin(c, "poros-comm-nccl.so", err, errsz);
	if (rc == 0) {
		*(void **)&over = dlsym(c->dl, "poros_comm_nccl_over");
		if (over == NULL)
			rc = set_error(err, errsz, "poros-comm-nccl.so: no poros_comm_nccl_over");
	}
	if (rc == 0 && over(tcp, tcp_h, &c->p, &c->h, err, errsz) < 0) {
		c->p = NULL;
		rc = -1;
	}
	if (rc < 0)
		tcp->close(tcp_h);
	return rc;
}

int comm_open(struct comm **out, enum comm_kind kind, int cuda, char *err, size_t errsz)
{
	struct comm *c = xcalloc(1, sizeof *c);

	*out = c;
	if (kind == COMM_AUTO)
		kind = mpi_env() ? (cuda ? COMM_NCCL : COMM_MPI) : comm_tcp_env() ? COMM_TCP : COMM_SINGLE;
	if (kind == COMM_SINGLE)
		return 0;
	if (kind == COMM_TCP) {
		if (comm_tcp_open(&c->p, &c->h, err, errsz) < 0) {
			c->p = NULL;
			return -1;
		}
		return cuda ? nccl_over_tcp(c, err, errsz) : 0;
	}
	if (kind == COMM_MPI && cuda)
		return set_error(err, errsz, "POROS_COMM=mpi carries CPU buffers: the cuda backend needs POROS_COMM=nccl");
	if (kind == COMM_NCCL && !cuda)
		return set_error(err, errsz, "POROS_COMM=nccl carries device buffers: the cpu backend needs POROS_COMM=mpi");
	return open_plugin(c, kind == COMM_NCCL ? "poros-comm-nccl.so" : "poros-comm-mpi.so", err, errsz);
}

void comm_close(struct comm *c)
{
	if (c == NULL)
		return;
	if (c->p)
		c->p->close(c->h);
	/* the library stays mapped: MPI's atexit handlers live in it */
	free(c);
}

const char *comm_name(const struct comm *c)
{
	return c->p ? c->p->name : "single";
}

int comm_rank(const struct comm *c)
{
	return c->p ? c->p->rank : 0;
}

int comm_world(const struct comm *c)
{
	return c->p ? c->p->world : 1;
}

const char *comm_error(const struct comm *c)
{
	return c->p ? c->p->error(c->h) : "";
}

int comm_allgather_bytes(struct comm *c, void *buf, size_t per_rank)
{
	return c->p ? c->p->allgather_host(c->h, buf, per_rank) : 0;
}

int comm_allgather_floats(struct comm *c, float *device_buf, size_t per_rank)
{
	return c->p ? c->p->allgather_device(c->h, device_buf, per_rank * sizeof(float)) : 0;
}

int comm_bcast_bytes(struct comm *c, void *buf, size_t bytes, int root)
{
	return c->p ? c->p->bcast_host(c->h, buf, bytes, root) : 0;
}

int comm_sum_fixed(struct comm *c, double x, double *out)
{
	int n = comm_world(c);
	double *all = xcalloc((size_t)n, sizeof *all), sum = 0;

	all[comm_rank(c)] = x;
	if (comm_allgather_bytes(c, all, sizeof *all) < 0) {
		free(all);
		return -1;
	}
	for (int r = 0; r < n; r++)
		sum += all[r];
	*out = sum;
	free(all);
	return 0;
}

int comm_sum_ll(struct comm *c, long long x, long long *out)
{
	int n = comm_world(c);
	long long *all = xcalloc((size_t)n, sizeof *all), sum = 0;

	all[comm_rank(c)] = x;
	if (comm_allgather_bytes(c, all, sizeof *all) < 0) {
		free(all);
		return -1;
	}
	for (int r = 0; r < n; r++)
		sum += all[r];
	*out = sum;
	free(all);
	return 0;
}

int comm_barrier(struct comm *c)
{
	return c->p ? c->p->barrier(c->h) : 0;
}

void comm_abort(struct comm *c, int code)
{
	if (c && c->p)
		c->p->abort(c->h, code);
	exit(code);
}
