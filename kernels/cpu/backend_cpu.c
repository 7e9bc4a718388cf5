/* kernels/cpu/backend_cpu.c: the CPU backend's memory, streams and events.
 *
 * "Device" memory is host memory from the C allocator; both streams run
 * synchronously on the calling thread, so a copy is done when copy_h2d
 * returns and every wait is already satisfied.  Events record wall-clock
 * time, which keeps the engine's timing code identical for both backends:
 * on the CPU a copy never overlaps compute, and the numbers say so.
 *
 * This file must not call into tools/lib (libporos_cpu.a is linked after
 * libporos.a), so it keeps its own clock. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"

/* Generous alignment so vector loads in the ops never straddle lines and
 * offsets inside a slab stay aligned the way they must on CUDA. */
#define CPU_ALIGN 256

struct backend_event {
	double t; /* seconds on CLOCK_MONOTONIC when recorded */
};

static int cpu_alloc(void **p, size_t bytes)
{
	/* aligned_alloc needs a multiple of the alignment, and a zero-byte
	 * request still gets a distinct pointer */
	size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;

	if (rounded < bytes)
		return -1;
	*p = aligned_alloc(CPU_ALIGN, rounded ? rounded : CPU_ALIGN);
	return *p ? 0 : -1;
}

static void cpu_free(void *p)
{
	free(p);
}

static void cpu_copy(void *dst, const void *src, size_t bytes, int stream)
{
	(void)stream;
	if (bytes)
		memcpy(dst, src, bytes);
}

static void cpu_copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
			int stream)
{
	(void)stream;
	for (size_t r = 0; r < height && width; r++)
		memcpy((unsigned char *)dst + r * dpitch, (const unsigned char *)src + r * spitch, width);
}

static void cpu_memset_zero(void *dst, size_t bytes, int stream)
{
	(void)stream;
	if (bytes)
		memset(dst, 0, bytes);
}

static void cpu_copy_d2h(void *dst, const void *src, size_t bytes)
{
	if (bytes)
		memcpy(dst, src, bytes);
}

static double cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static struct backend_event *cpu_event_create(void)
{
	struct backend_event *e = calloc(1, sizeof *e);

	return e;
}

static void cpu_event_destroy(struct backend_event *e)
{
	free(e);
}

static void cpu_event_record(struct backend_event *e, int stream)
{
	(void)stream;
	e->t = cpu_now();
}

static void cpu_stream_wait_event(int stream, struct backend_event *e)
{
	/* everything before the record has already run */
	(void)stream;
	(void)e;
}

static void cpu_event_synchronize(struct backend_event *e)
{
	(void)e;
}

static float cpu_event_elapsed_ms(struct backend_event *start, struct backend_event *end)
{
	return (float)((end->t - start->t) * 1000.0);
}

static void cpu_synchronize(void)
{
}

/* each (sequence, head) of the CPU attention is one thread's, in one order */
static int cpu_attention_batch_invariant(int D)
{
	(void)D;
	return 1;
}

/* one thread runs every lane's work in the order it is issued */
static void cpu_set_row_unit(int rows, int choose_rows)
{
	(void)rows, (void)choose_rows; /* every CPU sum is per row, in one order */
}

static void cpu_set_lane(int lane)
{
	(void)lane;
}

static int cpu_lane_workspace(int lane, void *p, size_t bytes)
{
	(void)lane, (void)p, (void)bytes;
	return 0;
}

/* the CPU copies from any mapping as it is */
static int cpu_host_register(void *p, size_t bytes, int read_only)
{
	(void)p, (void)bytes, (void)read_only;
	return 0;
}

static void cpu_host_unregister(void *p)
{
	(void)p;
}

static const struct backend cpu_backend = {
	.name = "cpu",
	.ops = &poros_cpu_ops,
	.device_alloc = cpu_alloc,
	.device_free = cpu_free,
	.host_alloc = cpu_alloc,
	.host_free = cpu_free,
	.host_register = cpu_host_register,
	.host_unregister = cpu_host_unregister,
	.copy_h2d = cpu_copy,
	.copy_h2d_2d = cpu_copy_2d,
	.copy_d2d = cpu_copy,
	.memset_zero = cpu_memset_zero,
	.copy_d2h = cpu_copy_d2h,
	.copy_d2h_async = cpu_copy,
	.event_create = cpu_event_create,
	.event_destroy = cpu_event_destroy,
	.event_record = cpu_event_record,
	.stream_wait_event = cpu_stream_wait_event,
	.event_synchronize = cpu_event_synchronize,
	.event_elapsed_ms = cpu_event_elapsed_ms,
	.synchronize = cpu_synchronize,
	.set_lane = cpu_set_lane,
	.set_row_unit = cpu_set_row_unit,
	.attention_batch_invariant = cpu_attention_batch_invariant,
	.lane_workspace = cpu_lane_workspace,
	.device_name = NULL,
	.device_mem_mb = 0,
	.driver_version = NULL,
	.runtime_version = NULL,
};

const struct backend *backend_cpu(void)
{
	return &cpu_backend;
}

