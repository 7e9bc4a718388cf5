/* kernels/backend.h: what the engine needs from a device besides the ops:
 * memory, streams, events.  The CPU backend runs everything
 * synchronously; the CUDA backend uses compute streams (lanes), a copy
 * stream and a checkpoint stream ordered by events, so the next block's
 * weights are copied while the current block computes.  The engine code
 * above is the same for both. */
#ifndef POROS_BACKEND_H
#define POROS_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "ops.h"

/* STREAM_COPY carries the base weights (host to device); STREAM_AUX the
 * activation checkpoints (device to host in forward, back in backward), so
 * neither kind of copy queues behind the other.  STREAM_COMPUTE is the
 * current compute lane's stream (set_lane): the ops, and every call
 * naming STREAM_COMPUTE, go there. */
enum { STREAM_COMPUTE = 0, STREAM_COPY = 1, STREAM_AUX = 2 };

/* Compute lanes: independent work (two micro-batches of one layer) issued
 * to two compute streams runs at once on the device, each lane with its
 * own library handle and workspace, so that one lane's small kernels and
 * GEMM tails fill what the other leaves idle.  The same ops with the same
 * inputs give the same bits on either lane. */
#define BACKEND_MAX_LANES 2

struct backend_event;

struct backend {
	const char *name; /* "cpu" or "cuda" */
	const struct poros_ops *ops; /* all run on STREAM_COMPUTE */

	/* Raw device memory; the engine's allocator sits above these.
	 * device_alloc returns 0, or -1 when the device is out of memory. */
	int (*device_alloc)(void **p, size_t bytes);
	void (*device_free)(void *p);
	/* Host memory the device can copy from at full speed (pinned on CUDA).
	 * 0 or -1. */
	int (*host_alloc)(void **p, size_t bytes);
	void (*host_free)(void *p);
	/* Memory mapped elsewhere (a shared mapping of the base) made copyable
	 * at full speed: pinned on CUDA (read_only: the mapping is PROT_READ),
	 * nothing on the CPU.  0 or -1; host_unregister undoes it. */
	int (*host_register)(void *p, size_t bytes, int read_only);
	void (*host_unregister)(void *p);

	/* Asynchronous on the given stream (CPU: immediate). */
	void (*copy_h2d)(void *dst, const void *src, size_t bytes, int stream);
	/* height rows of width bytes, rows dpitch apart at dst and spitch at
	 * src (what lies between the rows at dst is left as it was) */
	void (*copy_h2d_2d)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
	                    int stream);
	void (*copy_d2d)(void *dst, const void *src, size_t bytes, int stream);
	void (*memset_zero)(void *dst, size_t bytes, int stream);
	/* Synchronous: waits for the compute stream, then copies. */
	void (*copy_d2h)(void *dst, const void *src, size_t bytes);
	/* Asynchronous device-to-host copy on the given stream into memory
	 * from host_alloc (CPU: immediate). */
	void (*copy_d2h_async)(void *dst, const void *src, size_t bytes, int stream);

	struct backend_event *(*event_create)(void);
	void (*event_destroy)(struct backend_event *e);
	void (*event_record)(struct backend_event *e, int stream);
	/* Work queued on stream after this waits for e. */
	void (*stream_wait_event)(int stream, struct backend_event *e);
	void (*event_synchronize)(struct backend_event *e);
	/* Milliseconds between two recorded (and completed) events. */
	float (*event_elapsed_ms)(struct backend_event *start, struct backend_event *end);
	void (*synchronize)(void);
	/* The compute lane the ops and STREAM_COMPUTE mean from now on (0 <=
	 * lane < BACKEND_MAX_LANES; lane 0 at the start).  Lane l > 0 needs
	 * its library workspace first: lane_workspace gives it bytes (at least
	 * library_device_bytes) of device memory the engine allocated, which it
	 * keeps until the backend closes.  0 or -1.  The CPU runs every lane
	 * in issue order, as one. */
	void (*set_lane)(int lane);
	int (*lane_workspace)(int lane, void *p, size_t bytes);
	/* The rows of one micro-batch (0: none): a product over rows whose
	 * count is a multiple of it gives each row the bits it would get in a
	 * call of that many rows, so a call over several micro-batches equals
	 * one a micro-batch (CUDA: the GEMMs' algorithms, kernels/cuda/gemm.cu;
	 * the CPU's sums are per row already and ignore it).  choose_rows (a
	 * multiple of rows, else rows): the call size whose algorithms every
	 * such product runs, a group's, so its calls run at their own rate. */
	void (*set_row_unit)(int rows, int choose_rows);

	/* Facts for the artifact's env: gpu_name, gpu_mem_mb, driver,
	 * cuda_runtime (NULL/0 on CPU). */
	const char *device_name;
	long device_mem_mb;
	const char *driver_version;
	const char *runtime_version;
	/* Device memory the backend holds outside the engine's allocator for
	 * its libraries (the cuBLAS workspace); the engine counts it in its
	 * VRAM figures and budget, as torch counts its own. */
	size_t library_device_bytes;
	/* The host copy of the positions the ops will read at dev (n of them,
	 * the same values until the next call): the CUDA attention plans
	 * packed rows by document from it without waiting for the device.
	 * NULL where the backend has no use for it (the CPU). */
	void (*pos_mirror)(const int32_t *dev, const int32_t *host, size_t n);
	/* Whether the attention ops of head dim D give each sequence the same
	 * bits in a call of any batch: the CPU's and the CUDA kernels' work a
	 * sequence and head at a time; cuDNN plans and splits its sums by the
	 * batch (docs/perf-notes.md).  Where they do, a group's attention runs
	 * as one call (tools/poros-train/layer.c). */
	int (*attention_batch_invariant)(int D, int S);
};

/* The CUDA backend's library_device_bytes (the cuBLAS workspace), known
 * without a device so that a plan (poros-train --plan) needs none. */
#define POROS_CUDA_LIBRARY_BYTES (32u << 20)

/* The CPU backend; always available. */
const struct backend *backend_cpu(void);
/* The CUDA backend on device 0, or NULL with a reason in err ("built
 * without CUDA", "no CUDA device", the backend library not loading) when
 * it cannot be used.  tools/lib/backend_load.c: the CUDA backend is a
 * shared object beside the tools (BACKEND_CUDA_SO), opened on first use,
 * so that a tool maps no CUDA library until it asks for the GPU; a binary
 * that links the backend in (the unit and GPU tests) uses that. */
const struct backend *backend_cuda(char *err, size_t errsz);
#define BACKEND_CUDA_SO "poros-backend-cuda.so"
/* In the backend library (kernels/cuda/backend_cuda.cu): what backend_cuda
 * calls once it is loaded. */
const struct backend *backend_cuda_open(char *err, size_t errsz);
/* The CUDA devices the runtime sees (CUDA_VISIBLE_DEVICES respected): 0
 * with the reason in err when there is none or no CUDA backend to ask. */
int backend_cuda_devices(char *err, size_t errsz);
/* In the backend library: cudaGetDeviceCount, 0 on any error. */
int backend_cuda_device_count(void);

#endif
