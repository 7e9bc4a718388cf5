/* plugins/comm_mpi.c: poros-train's data-parallel plugins (comm.h).
 * Built twice: poros-comm-mpi.so (MPI over host buffers, for the cpu
 * backend) and, with -DPOROS_COMM_NCCL, poros-comm-nccl.so (NCCL over
 * device buffers, its unique id broadcast over MPI, or with
 * poros_comm_nccl_over over the host collectives of the torchrun-style
 * TCP transport).  Errors do not
 * return to a collective that would hang: MPI's handler is
 * MPI_ERRORS_RETURN and poros-train aborts the world (comm_abort). */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef POROS_COMM_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

#include "comm.h"

struct mpi_comm {
	struct comm_plugin table;
	char err[256];
	/* NCCL over another transport's host collectives (poros_comm_nccl_over:
	 * the torchrun-style TCP); NULL: MPI's */
	const struct comm_plugin *host;
	void *host_h;
#ifdef POROS_COMM_NCCL
	ncclComm_t nccl;
	cudaStream_t stream;
#endif
};

static int fail(struct mpi_comm *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct mpi_comm *m, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m->err, sizeof m->err, fmt, ap);
	va_end(ap);
	return -1;
}

static int mpi_check(struct mpi_comm *m, int rc, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	if (rc == MPI_SUCCESS)
		return 0;
	MPI_Error_string(rc, msg, &len);
	return fail(m, "rank %d: %s: %.*s", m->table.rank, what, len, msg);
}

static int allgather_host(void *h, void *buf, size_t bytes)
{
	struct mpi_comm *m = h;

	if (m->host)
		return m->host->allgather_host(m->host_h, buf, bytes) < 0 ? fail(m, "%s", m->host->error(m->host_h)) : 0;

	if (bytes > (size_t)2147483647)
		return fail(m, "allgather of %zu bytes a rank: more than MPI's int count", bytes);
	return mpi_check(m, MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)bytes, MPI_BYTE, MPI_COMM_WORLD),
	                 "MPI_Allgather");
}

#ifdef POROS_COMM_NCCL
static int nccl_check(struct mpi_comm *m, ncclResult_t rc, const char *what)
{
	ncclResult_t async = ncclSuccess;

	if (rc == ncclSuccess || rc == ncclInProgress)
		return 0;
	ncclCommGetAsyncError(m->nccl, &async);
	return fail(m, "rank %d: %s: %s", m->table.rank, what, ncclGetErrorString(async != ncclSuccess ? async : rc));
}

static int allgather_device(void *h, void *buf, size_t bytes)
{
	struct mpi_comm *m = h;
	char *base = buf;

	/* the compute stream is the default stream of the cuda backend's
	 * ordering: wait for it, gather on ours, then wait again */
	if (cudaDeviceSynchronize() != cudaSuccess)
		return fail(m, "rank %d: cudaDeviceSynchronize failed", m->table.rank);
	if (nccl_check(m, ncclAllGather(base + (size_t)m->table.rank * bytes, base, bytes, ncclChar, m->nccl, m->stream),
	               "ncclAllGather") < 0)
		return -1;
	if (cudaStreamSynchronize(m->stream) != cudaSuccess)
		return fail(m, "rank %d: the NCCL stream failed", m->table.rank);
	return 0;
}
#else
static int allgather_device(void *h, void *buf, size_t bytes)
{
	return allgather_host(h, buf, bytes); /* the cpu backend's device memory is host memory */
}
#endif

static int bcast_host(void *h, void *buf, size_t bytes, int root)
{
	struct mpi_comm *m = h;

	if (m->host)
		return m->host->bcast_host(m->host_h, buf, bytes, root) < 0 ? fail(m, "%s", m->host->error(m->host_h)) : 0;

	if (bytes > (size_t)2147483647)
		return fail(m, "broadcast of %zu bytes: more than MPI's int count", bytes);
	return mpi_check(m, MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
}

static int barrier(void *h)
{
	struct mpi_comm *m = h;

	if (m->host)
		return m->host->barrier(m->host_h) < 0 ? fail(m, "%s", m->host->error(m->host_h)) : 0;
	return mpi_check(h, MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

static void abort_all(void *h, int code)
{
	struct mpi_comm *m = h;

	if (m->host)
		m->host->abort(m->host_h, code);
	else
		MPI_Abort(MPI_COMM_WORLD, code);
}

static void close_comm(void *h)
{
	struct mpi_comm *m = h;

#ifdef POROS_COMM_NCCL
	ncclCommDestroy(m->nccl);
	cudaStreamDestroy(m->stream);
#endif
	if (m->host)
		m->host->close(m->host_h);
	else
		MPI_Finalize();
	free(m);
}

static const char *error(void *h)
{
	return ((struct mpi_comm *)h)->err;
}

#ifdef POROS_COMM_NCCL
/* The NCCL communicator: rank 0's unique id broadcast over the host
 * collectives (MPI's, or the transport poros_comm_nccl_over got). */
static int nccl_init(struct mpi_comm *m, char *err, size_t errsz)
{
	ncclUniqueId id;
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	ncclResult_t rc;
	int rank = m->table.rank, world = m->table.world, ok = 1;

	memset(&id, 0, sizeof id);
	if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess)
		ok = 0; /* the others still wait on the broadcast: they get zeros and fail too */
	if (bcast_host(m, &id, sizeof id, 0) < 0) {
		snprintf(err, errsz, "rank %d: the NCCL id broadcast failed: %s", rank, m->err);
		return -1;
	}
	if (!ok) {
		snprintf(err, errsz, "rank 0: ncclGetUniqueId failed");
		return -1;
	}
	if (cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking) != cudaSuccess) {
		snprintf(err, errsz, "rank %d: cudaStreamCreate failed", rank);
		return -1;
	}
	/* blocking: a dead peer is caught by the launcher (MPI) or by the host
	 * transport's EOF at the next host exchange */
	cfg.blocking = 1;
	rc = ncclCommInitRankConfig(&m->nccl, world, id, rank, &cfg);
	if (rc != ncclSuccess) {
		snprintf(err, errsz, "rank %d: ncclCommInitRank: %s", rank, ncclGetErrorString(rc));
		return -1;
	}
	return 0;
}
#endif

int poros_comm_plugin_open(const struct comm_plugin **table, void **h, char *err, size_t errsz);
int poros_comm_plugin_open(const struct comm_plugin **table, void **h, char *err, size_t errsz)
{
	struct mpi_comm *m = calloc(1, sizeof *m);
	int inited = 0, rank = 0, world = 1;

	if (m == NULL) {
		snprintf(err, errsz, "out of memory");
		return -1;
	}
	MPI_Initialized(&inited);
	if (!inited && MPI_Init(NULL, NULL) != MPI_SUCCESS) {
		snprintf(err, errsz, "MPI_Init failed");
		free(m);
		return -1;
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &world);
	m->table = (struct comm_plugin){
		.abi = POROS_COMM_ABI, .rank = rank, .world = world, .allgather_host = allgather_host,
		.allgather_device = allgather_device, .bcast_host = bcast_host, .barrier = barrier, .abort = abort_all,
		.close = close_comm, .error = error,
#ifdef POROS_COMM_NCCL
		.name = "nccl",
#else
		.name = "mpi",
#endif
	};
#ifdef POROS_COMM_NCCL
	if (nccl_init(m, err, errsz) < 0)
		return -1;
#endif
	*table = &m->table;
	*h = m;
	return 0;
}

#ifdef POROS_COMM_NCCL
/* NCCL over another transport's host collectives (comm.c passes the
 * torchrun-style TCP table): no MPI call is made. */
int poros_comm_nccl_over(const struct comm_plugin *host, void *host_h, const struct comm_plugin **table, void **h,
                         char *err, size_t errsz);
int poros_comm_nccl_over(const struct comm_plugin *host, void *host_h, const struct comm_plugin **table, void **h,
                         char *err, size_t errsz)
{
	struct mpi_comm *m = calloc(1, sizeof *m);

	if (m == NULL) {
		snprintf(err, errsz, "out of memory");
		return -1;
	}
	m->host = host;
	m->host_h = host_h;
	m->table = (struct comm_plugin){
		.abi = POROS_COMM_ABI, .name = "nccl+tcp", .rank = host->rank, .world = host->world,
		.allgather_host = allgather_host, .allgather_device = allgather_device, .bcast_host = bcast_host,
		.barrier = barrier, .abort = abort_all, .close = close_comm, .error = error,
	};
	if (nccl_init(m, err, errsz) < 0) {
		free(m); /* the host transport stays the caller's */
		return -1;
	}
	*table = &m->table;
	*h = m;
	return 0;
}
#endif
