/* kernels/cpu/backend_cpu.c: the CPU backend's memory, streams and events.
 *
 * "Device" memory is host memory from the C allocator; every stream runs
 * synchronously on the calling thread, so a copy is done when copy_h2d
 * returns and every wait is already satisfied.  Events record wall-clock
 * time, which keeps the engine's timing code identical for both backends:
 * on the CPU a copy never overlaps compute, and the numbers say so.
 *
 * Lazy copies (POROS_CPU_LAZY_COPIES=1, a test of the engine's stream
 * order without a GPU): the copy and checkpoint streams' work (copies,
 * memsets, event records, waits) is queued instead and run at the latest
 * point a CUDA device could run it: when something waits for one of its
 * events (the compute stream, the other queue, event_synchronize from
 * any thread) or synchronize().  A copy whose source the compute stream
 * overwrites before waiting for it then carries the new bytes, and a
 * read of its destination before the wait sees the old ones: a missing
 * wait in the engine shows as other bits on the CPU, as it would (by
 * chance) on a GPU.  Compute-stream work, on any lane, still runs at once.
 *
 * This file must not call into tools/lib (libporos_cpu.a is linked after
 * libporos.a), so it keeps its own clock. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"

/* Generous alignment so vector loads in the ops never straddle lines and
 * offsets inside a slab stay aligned the way they must on CUDA. */
#define CPU_ALIGN 256

struct backend_event {
	double t;    /* seconds on CLOCK_MONOTONIC when recorded (lazy: when its queue reached it) */
	int stream;  /* where it was last recorded */
	long gen;    /* records so far; a queued record counts only while it is the latest */
	int done;    /* the latest record has run */
};

/* --- lazy copies ------------------------------------------------------------ */

enum { ITEM_COPY, ITEM_COPY_2D, ITEM_ZERO, ITEM_RECORD, ITEM_WAIT };

struct item {
	int kind;
	void *dst;
	const void *src;
	size_t bytes, dpitch, spitch, height;
	struct backend_event *ev;
	long gen;
};

/* The queued work of STREAM_COPY and STREAM_AUX, in issue order. */
struct queue {
	struct item *items;
	size_t head, n, cap;
};

static struct queue queues[3];
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;

static double cpu_now(void);

static int lazy_copies(void)
{
	static int on = -1;

	if (on < 0) {
		const char *v = getenv("POROS_CPU_LAZY_COPIES");
		on = v && strcmp(v, "1") == 0;
	}
	return on;
}

/* Whether work on stream is queued rather than run at once. */
static int queued(int stream)
{
	return lazy_copies() && (stream == STREAM_COPY || stream == STREAM_AUX);
}

static void push(int stream, struct item it)
{
	struct queue *q = &queues[stream];

	if (q->n == q->cap) {
		size_t cap = q->cap ? 2 * q->cap : 64;
		struct item *grown = realloc(q->items, cap * sizeof *grown);

		if (!grown)
			abort(); /* the CPU backend has no error path here: as malloc failing in an op */
		q->items = grown;
		q->cap = cap;
	}
	q->items[q->n++] = it;
}

static void run_until(int stream, const struct backend_event *e);

/* The queue's next item, run (queue_lock held). */
static void run_next(struct queue *q)
{
	struct item it = q->items[q->head++];

	switch (it.kind) {
	case ITEM_COPY:
		memcpy(it.dst, it.src, it.bytes);
		break;
	case ITEM_COPY_2D:
		for (size_t r = 0; r < it.height; r++)
			memcpy((unsigned char *)it.dst + r * it.dpitch, (const unsigned char *)it.src + r * it.spitch,
			       it.bytes);
		break;
	case ITEM_ZERO:
		memset(it.dst, 0, it.bytes);
		break;
	case ITEM_RECORD:
		if (it.ev->gen == it.gen) {
			it.ev->t = cpu_now();
			it.ev->done = 1;
		}
		break;
	case ITEM_WAIT: /* the other queue up to the event's record */
		if (it.ev->gen == it.gen && !it.ev->done)
			run_until(it.ev->stream, it.ev);
		break;
	}
	if (q->head == q->n)
		q->head = q->n = 0;
}

/* Runs stream's queue until e's latest record has run (queue_lock held). */
static void run_until(int stream, const struct backend_event *e)
{
	struct queue *q = &queues[stream];

	while (!e->done && q->head < q->n)
		run_next(q);
}

static void run_all(void)
{
	for (int s = 0; s < 3; s++)
		while (queues[s].head < queues[s].n)
			run_next(&queues[s]);
}

/* --- memory and copies ------------------------------------------------------- */

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
	if (bytes && queued(stream)) {
		pthread_mutex_lock(&queue_lock);
		push(stream, (struct item){ .kind = ITEM_COPY, .dst = dst, .src = src, .bytes = bytes });
		pthread_mutex_unlock(&queue_lock);
	} else if (bytes) {
		memcpy(dst, src, bytes);
	}
}

static void cpu_copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
			int stream)
{
	if (width && height && queued(stream)) {
		pthread_mutex_lock(&queue_lock);
		push(stream, (struct item){ .kind = ITEM_COPY_2D, .dst = dst, .src = src, .bytes = width,
		                            .dpitch = dpitch, .spitch = spitch, .height = height });
		pthread_mutex_unlock(&queue_lock);
		return;
	}
	for (size_t r = 0; r < height && width; r++)
		memcpy((unsigned char *)dst + r * dpitch, (const unsigned char *)src + r * spitch, width);
}

static void cpu_memset_zero(void *dst, size_t bytes, int stream)
{
	if (bytes && queued(stream)) {
		pthread_mutex_lock(&queue_lock);
		push(stream, (struct item){ .kind = ITEM_ZERO, .dst = dst, .bytes = bytes });
		pthread_mutex_unlock(&queue_lock);
	} else if (bytes) {
		memset(dst, 0, bytes);
	}
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

	if (e) /* never recorded: a wait for it waits for nothing, as on CUDA */
		e->done = 1;
	return e;
}

static void cpu_event_destroy(struct backend_event *e)
{
	free(e);
}

static void cpu_event_record(struct backend_event *e, int stream)
{
	pthread_mutex_lock(&queue_lock);
	e->gen++;
	e->stream = stream;
	if (queued(stream)) {
		e->done = 0;
		push(stream, (struct item){ .kind = ITEM_RECORD, .ev = e, .gen = e->gen });
	} else { /* everything before the record has already run */
		e->t = cpu_now();
		e->done = 1;
	}
	pthread_mutex_unlock(&queue_lock);
}

static void cpu_stream_wait_event(int stream, struct backend_event *e)
{
	pthread_mutex_lock(&queue_lock);
	if (!e->done && queued(stream))
		push(stream, (struct item){ .kind = ITEM_WAIT, .ev = e, .gen = e->gen });
	else /* done already, or the queue runs up to the record now */
		run_until(e->stream, e);
	pthread_mutex_unlock(&queue_lock);
}

static void cpu_event_synchronize(struct backend_event *e)
{
	pthread_mutex_lock(&queue_lock);
	run_until(e->stream, e);
	pthread_mutex_unlock(&queue_lock);
}

static float cpu_event_elapsed_ms(struct backend_event *start, struct backend_event *end)
{
	return (float)((end->t - start->t) * 1000.0);
}

static void cpu_synchronize(void)
{
	pthread_mutex_lock(&queue_lock);
	run_all();
	pthread_mutex_unlock(&queue_lock);
}

/* each (sequence, head) of the CPU attention is one thread's, in one order */
static int cpu_attention_batch_invariant(int D, int S)
{
	(void)D;
	(void)S;
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

