/* tools/poros-train/comm.h: the ranks of a data-parallel run and what
 * they exchange.  "single" is one process (no library); "mpi" (CPU
 * buffers) and "nccl" (device buffers, bootstrapped over MPI) live in
 * plugins (plugins/comm_mpi.c) that poros-train loads with dlopen only
 * when a run asks for them, so poros-train itself never links MPI or NCCL.
 * Every call is collective: all ranks make it, in the same order.
 * Failures return -1 with comm_error(). */
#ifndef POROS_TRAIN_COMM_H
#define POROS_TRAIN_COMM_H

#include <stddef.h>

enum comm_kind {
	COMM_AUTO,   /* mpi when started by mpirun/srun (the environment says), else single */
	COMM_SINGLE,
	COMM_MPI,
	COMM_NCCL,
	COMM_TCP,    /* a torchrun-style environment, the cpu backend (comm_tcp.c) */
};

/* The plugin's table (plugins/comm_mpi.c fills it); h is its handle. */
#define POROS_COMM_ABI 1
struct comm_plugin {
	int abi;
	const char *name;
	int rank, world;
	/* in place: rank r's bytes_per_rank at buf + r * bytes_per_rank, host memory */
	int (*allgather_host)(void *h, void *buf, size_t bytes_per_rank);
	/* the same over the compute backend's device memory (MPI: host is device) */
	int (*allgather_device)(void *h, void *buf, size_t bytes_per_rank);
	int (*bcast_host)(void *h, void *buf, size_t bytes, int root);
	int (*barrier)(void *h);
	void (*abort)(void *h, int code);
	void (*close)(void *h);
	const char *(*error)(void *h);
};
/* The plugin's one exported symbol, "poros_comm_plugin_open". */
typedef int (*comm_plugin_open_fn)(const struct comm_plugin **table, void **h, char *err, size_t errsz);

struct comm;

/* Opens the communicator (kind COMM_AUTO decides from the environment);
 * cuda: the compute backend's buffers are device memory (needs nccl).
 * 0, or -1 with err: a plugin that is needed and missing is an error,
 * never a silent run on one rank. */
int comm_open(struct comm **out, enum comm_kind kind, int cuda, char *err, size_t errsz);
void comm_close(struct comm *c);
const char *comm_name(const struct comm *c);
int comm_rank(const struct comm *c);
int comm_world(const struct comm *c);
const char *comm_error(const struct comm *c);
/* In place, rank r's part at buf + r * per_rank. */
int comm_allgather_bytes(struct comm *c, void *buf, size_t per_rank);
int comm_allgather_floats(struct comm *c, float *device_buf, size_t per_rank);
int comm_bcast_bytes(struct comm *c, void *buf, size_t bytes, int root);
/* The sum over ranks of x, added in rank order on every rank (the same
 * bits everywhere); *out. */
int comm_sum_fixed(struct comm *c, double x, double *out);
int comm_sum_ll(struct comm *c, long long x, long long *out);
int comm_barrier(struct comm *c);
/* Ends every rank (MPI_Abort): a rank that cannot go on must not leave
 * the others waiting in a collective. */
void comm_abort(struct comm *c, int code);
/* What COMM_AUTO would pick: 1 when a launcher's environment is there
 * (mpirun's or srun's, or RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT). */
int comm_env_launched(void);
/* comm_tcp.c: 1 when the torchrun-style variables are all set; the
 * built-in table over TCP (0, or -1 with err). */
int comm_tcp_env(void);
int comm_tcp_open(const struct comm_plugin **table, void **h, char *err, size_t errsz);
/* Before any CUDA call: the rank's GPU by its local rank (the launcher's
 * OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID or
 * LOCAL_RANK), as the only device CUDA_VISIBLE_DEVICES shows (the
 * local-rank-th of the listed ones when it is set), so each rank's device
 * 0 is its own.  0, or -1 with err. */
int comm_bind_local_device(char *err, size_t errsz);

#endif
