/* tests/unit/test_train_comm.c: the communicator of one process (comm.h),
 * a missing plugin refused, and each rank's GPU from its local rank. */
#include <stdlib.h>
#include <string.h>

#include "../../tools/poros-train/comm.h"
#include "test_common.h"

static void clear_launcher(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
	                                    "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES" };

	for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
		unsetenv(vars[i]);
}

static void test_single(void)
{
	struct comm *c;
	char err[512] = "";
	double sum = 0;
	long long n = 0;
	float buf[3] = { 1, 2, 3 };

	clear_launcher();
	CHECK(!comm_env_launched());
	CHECK(comm_open(&c, COMM_AUTO, 0, err, sizeof err) == 0);
	CHECK(strcmp(comm_name(c), "single") == 0);
	CHECK(comm_rank(c) == 0 && comm_world(c) == 1);
	CHECK(comm_sum_fixed(c, 0.25, &sum) == 0 && sum == 0.25);
	CHECK(comm_sum_ll(c, 7, &n) == 0 && n == 7);
	CHECK(comm_allgather_floats(c, buf, 3) == 0 && buf[0] == 1 && buf[2] == 3);
	CHECK(comm_barrier(c) == 0);
	comm_close(c);
	setenv("PMIX_RANK", "0", 1);
	CHECK(comm_env_launched());
	unsetenv("PMIX_RANK");
}

static void test_missing_plugin(void)
{
	struct comm *c;
	char err[512] = "";

	setenv("POROS_COMM_PLUGIN", "/nonexistent/poros-comm-mpi.so", 1);
	CHECK(comm_open(&c, COMM_MPI, 0, err, sizeof err) < 0);
	CHECKF(strstr(err, "/nonexistent/poros-comm-mpi.so cannot be loaded") != NULL, "err: %s", err);
	comm_close(c);
	CHECK(comm_open(&c, COMM_NCCL, 0, err, sizeof err) < 0);
	CHECKF(strstr(err, "device buffers") != NULL, "err: %s", err);
	comm_close(c);
	CHECK(comm_open(&c, COMM_MPI, 1, err, sizeof err) < 0);
	CHECKF(strstr(err, "POROS_COMM=nccl") != NULL, "err: %s", err);
	comm_close(c);
	unsetenv("POROS_COMM_PLUGIN");
}

static void test_local_device(void)
{
	char err[512] = "";
	const char *v;

	clear_launcher();
	CHECK(comm_bind_local_device(err, sizeof err) == 0);
	CHECK(getenv("CUDA_VISIBLE_DEVICES") == NULL); /* no launcher said: nothing chosen */
	setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
	CHECK(comm_bind_local_device(err, sizeof err) == 0);
	v = getenv("CUDA_VISIBLE_DEVICES");
	CHECKF(v && strcmp(v, "1") == 0, "CUDA_VISIBLE_DEVICES=%s", v ? v : "(unset)");
	clear_launcher();
	setenv("LOCAL_RANK", "2", 1);
	setenv("CUDA_VISIBLE_DEVICES", "4,5,6", 1);
	CHECK(comm_bind_local_device(err, sizeof err) == 0);
	v = getenv("CUDA_VISIBLE_DEVICES");
	CHECKF(v && strcmp(v, "6") == 0, "CUDA_VISIBLE_DEVICES=%s", v ? v : "(unset)");
	clear_launcher();
	setenv("SLURM_LOCALID", "3", 1);
	setenv("CUDA_VISIBLE_DEVICES", "4,5", 1);
	CHECK(comm_bind_local_device(err, sizeof err) < 0);
	CHECKF(strstr(err, "local rank 3: CUDA_VISIBLE_DEVICES=4,5 lists fewer devices") != NULL, "err: %s", err);
	clear_launcher();
}

int main(void)
{
	test_single();
	test_missing_plugin();
	test_local_device();
	return test_verdict("test_train_comm");
}
