// defines: backend_cuda_open, poros_cuda_compute_stream, poros_cuda_copy_stream,
// poros_cuda_cublas, poros_cuda_cublaslt, poros_cuda_workspace
//
// The CUDA backend of kernels/backend.h on device 0: raw memory, pinned host
// memory, copies on two streams, events, device facts, and the device state
// (streams, cuBLAS handles) the ops run on.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.cuh"

extern "C" void attention_cuda_pos_mirror(const int32_t *dev, const int32_t *host, size_t n);

// cuBLAS's recommended workspace on Hopper.  Fixed for the life of the
// process: a GEMM's algorithm may depend on the workspace it is offered, so
// a changing workspace could change bits.  It sits outside the engine's
// allocator (allocated once, before any training memory), which counts it
// through library_device_bytes.
#define CUBLAS_WORKSPACE_BYTES POROS_CUDA_LIBRARY_BYTES

// Lane l's compute stream and cuBLAS handle (lanes[0]: the workspace
// above; the others get theirs from the engine, cuda_lane_workspace).
struct lane {
	cudaStream_t stream;
	cublasHandle_t blas;
	void *workspace; // CUBLAS_WORKSPACE_BYTES, cuBLAS's and cuBLASLt's
};

static struct cuda_state {
	int ready;
	struct lane lanes[BACKEND_MAX_LANES];
	int lane; // the current one
	cudaStream_t copy, aux;
	cublasLtHandle_t lt;
	void *blas_workspace;
	char device_name[256];
	char driver[64];
	char runtime[32];
	long mem_mb;
} state;

struct backend_event {
	cudaEvent_t ev;
};

// A lane's cuBLAS handle on its stream and workspace.  Every lane's
// handle has the same settings and a workspace of the same size, so
// cuBLAS picks the same kernel for a shape on any lane: the same bits.
static void blas_open(struct lane *l, void *workspace, size_t bytes)
{
	cublasCheck(cublasCreate(&l->blas));
	cublasCheck(cublasSetStream(l->blas, l->stream));
	cublasCheck(cublasSetWorkspace(l->blas, workspace, bytes));
	l->workspace = workspace;
	// fp32 GEMMs stay fp32 (no TF32), and no routine may use atomics whose
	// order varies: both are the defaults, set here so nothing can drift.
	cublasCheck(cublasSetMathMode(l->blas, CUBLAS_DEFAULT_MATH));
	cublasCheck(cublasSetAtomicsMode(l->blas, CUBLAS_ATOMICS_NOT_ALLOWED));
	cublasCheck(cublasSetPointerMode(l->blas, CUBLAS_POINTER_MODE_HOST));
}

// The kernel driver's version ("580.65.06") as nvidia-smi reports it; the
// driver API's CUDA version stands in when /proc does not say.
static void read_driver_version(char *out, size_t outsz)
{
	FILE *f = fopen("/proc/driver/nvidia/version", "r");
	if (f) {
		char line[512];
		while (fgets(line, sizeof line, f)) {
			const char *km = strstr(line, "Kernel Module");
			if (!km)
				continue;
			// The version is the first word that looks like one ("580.159.03");
			// some kernels insert words ("for x86_64") before it.
			for (const char *w = km + strlen("Kernel Module"); *w; ) {
				while (*w == ' ' || *w == '\t')
					w++;
				size_t n = strcspn(w, " \t\n");
				if (n > 0 && n < outsz && w[0] >= '0' && w[0] <= '9' && memchr(w, '.', n)) {
					memcpy(out, w, n);
					out[n] = '\0';
					fclose(f);
					return;
				}
				if (n == 0)
					break;
				w += n;
			}
		}
		fclose(f);
	}
	int v = 0;
	if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0)
		snprintf(out, outsz, "cuda-driver-api %d.%d", v / 1000, (v % 1000) / 10);
	else
		snprintf(out, outsz, "unknown");
}

// Releases what cuda_init made, so a memory checker sees no leaks at exit.
static void cuda_shutdown(void)
{
	if (!state.ready)
		return;
	cudaDeviceSynchronize();
	cublasLtDestroy(state.lt);
	for (int l = 0; l < BACKEND_MAX_LANES; l++)
		if (state.lanes[l].blas) {
			cublasDestroy(state.lanes[l].blas);
			cudaStreamDestroy(state.lanes[l].stream);
		}
	cudaFree(state.blas_workspace);
	cudaStreamDestroy(state.aux);
	cudaStreamDestroy(state.copy);
	state.ready = 0;
}

// True when an NVIDIA kernel driver is loaded here (Linux, or WSL's GPU
// bridge).  Without one, cudart's complaint is about an absent driver (it
// reads "CUDA driver version is insufficient"), and the plain fact is
// that there is no device.
static int nvidia_driver_loaded(void)
{
	return access("/proc/driver/nvidia/version", F_OK) == 0 || access("/dev/dxg", F_OK) == 0;
}

// Creates the device state once.  Returns 0, or -1 with a reason in err:
// "no CUDA device" when the machine has none (no driver, or a driver that
// sees no GPU), else cudart's reason.
static int cuda_init(char *err, size_t errsz)
{
	if (state.ready)
		return 0;
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess || count == 0) {
		if (e == cudaSuccess || e == cudaErrorNoDevice || !nvidia_driver_loaded())
			snprintf(err, errsz, "no CUDA device");
		else
			snprintf(err, errsz, "CUDA device unusable (%s)", cudaGetErrorString(e));
		cudaGetLastError(); // leave no sticky error for a later caller
		return -1;
	}
	cudaCheck(cudaSetDevice(0));
	cudaDeviceProp prop;
	cudaCheck(cudaGetDeviceProperties(&prop, 0));
	snprintf(state.device_name, sizeof state.device_name, "%s", prop.name);
	state.mem_mb = (long)(prop.totalGlobalMem >> 20);
	int rt = 0;
	cudaCheck(cudaRuntimeGetVersion(&rt));
	snprintf(state.runtime, sizeof state.runtime, "%d.%d", rt / 1000, (rt % 1000) / 10);
	read_driver_version(state.driver, sizeof state.driver);

	// Non-blocking: neither stream should wait on work some library queues
	// on the legacy default stream.
	cudaCheck(cudaStreamCreateWithFlags(&state.lanes[0].stream, cudaStreamNonBlocking));
	cudaCheck(cudaStreamCreateWithFlags(&state.copy, cudaStreamNonBlocking));
	cudaCheck(cudaStreamCreateWithFlags(&state.aux, cudaStreamNonBlocking));

	e = cudaMalloc(&state.blas_workspace, CUBLAS_WORKSPACE_BYTES);
	if (e != cudaSuccess) {
		cudaGetLastError();
		snprintf(err, errsz, "cannot allocate the %u MiB cuBLAS workspace: %s",
		         CUBLAS_WORKSPACE_BYTES >> 20, cudaGetErrorString(e));
		return -1;
	}
	blas_open(&state.lanes[0], state.blas_workspace, CUBLAS_WORKSPACE_BYTES);
	cublasCheck(cublasLtCreate(&state.lt));
	state.ready = 1;
	atexit(cuda_shutdown);
	return 0;
}

// The ops reach the state through these; an op called before backend_cuda_open()
// still finds a device, or stops the tool with the reason.
static void ensure_ready(void)
{
	if (state.ready)
		return;
	char err[256];
	if (cuda_init(err, sizeof err) != 0) {
		fprintf(stderr, "%s: CUDA backend: %s\n", poros_cuda_progname(), err);
		exit(1);
	}
}

extern "C" cudaStream_t poros_cuda_compute_stream(void)
{
	ensure_ready();
	return state.lanes[state.lane].stream;
}

extern "C" cudaStream_t poros_cuda_copy_stream(void)
{
	ensure_ready();
	return state.copy;
}

extern "C" cublasHandle_t poros_cuda_cublas(void)
{
	ensure_ready();
	return state.lanes[state.lane].blas;
}

extern "C" cublasLtHandle_t poros_cuda_cublaslt(void)
{
	ensure_ready();
	return state.lt;
}

extern "C" void *poros_cuda_workspace(size_t *bytes)
{
	ensure_ready();
	*bytes = CUBLAS_WORKSPACE_BYTES;
	return state.lanes[state.lane].workspace;
}

static cudaStream_t stream_of(int stream)
{
	if (stream == STREAM_COPY)
		return state.copy;
	return stream == STREAM_AUX ? state.aux : state.lanes[state.lane].stream;
}

// --- memory -----------------------------------------------------------------

static int cuda_device_alloc(void **p, size_t bytes)
{
	cudaError_t e = cudaMalloc(p, bytes);
	if (e == cudaErrorMemoryAllocation) {
		cudaGetLastError(); // out of memory is an answer, not a sticky error
		*p = NULL;
		return -1;
	}
	cudaCheck(e);
	return 0;
}

static void cuda_device_free(void *p)
{
	if (p)
		cudaCheck(cudaFree(p));
}

// Large pinned buffers (the base's weights) are mapped, faulted in by every
// core with transparent huge pages, then registered: cudaHostAlloc faults
// 4 KiB pages in one thread, far slower, and copies from both run alike
// (docs/perf-notes.md, "Figures behind the code").  Small ones stay with
// cudaHostAlloc.
#define MAPPED_MIN_BYTES (64ull << 20)
#define MAPPED_MAX 64

static struct mapped {
	void *p;
	size_t bytes;
} mapped[MAPPED_MAX];
static pthread_mutex_t mapped_lock = PTHREAD_MUTEX_INITIALIZER;

struct touch_part {
	unsigned char *p;
	size_t bytes;
};

static void *touch_pages(void *arg)
{
	const struct touch_part *t = (const struct touch_part *)arg;

	memset(t->p, 0, t->bytes);
	return NULL;
}

// Faults the pages of [p, p + bytes) in, zeroed, on up to 16 threads.
static void touch_parallel(unsigned char *p, size_t bytes)
{
	enum { MAX_THREADS = 16 };
	pthread_t th[MAX_THREADS];
	struct touch_part part[MAX_THREADS];
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int n = cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (int)cpus, started = 0;
	size_t each = (bytes / (size_t)n + 4095) & ~(size_t)4095;

	for (int i = 0; i < n; i++) {
		size_t at = (size_t)i * each;

		part[i].p = at < bytes ? p + at : p;
		part[i].bytes = at >= bytes ? 0 : bytes - at < each ? bytes - at : each;
	}
	for (int i = 1; i < n; i++)
		if (pthread_create(&th[i], NULL, touch_pages, &part[i]) != 0)
			touch_pages(&part[i]); // no thread: this one does it
		else
			started |= 1 << i;
	touch_pages(&part[0]);
	for (int i = 1; i < n; i++)
		if (started & (1 << i))
			pthread_join(th[i], NULL);
}

// 0 with *p mapped and registered; 1 when this way is not open (the table is
// full, or the driver will not register the mapping): take cudaHostAlloc;
// -1 when there is no memory to map.
static int mapped_host_alloc(void **p, size_t bytes)
{
	int slot = -1;
	void *m;

	pthread_mutex_lock(&mapped_lock);
	for (int i = 0; i < MAPPED_MAX && slot < 0; i++)
		if (mapped[i].p == NULL)
			slot = i, mapped[i].p = (void *)&mapped[i]; // reserved
	pthread_mutex_unlock(&mapped_lock);
	if (slot < 0)
		return 1; // table full: the caller takes cudaHostAlloc
	m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		goto fail;
	madvise(m, bytes, MADV_HUGEPAGE); // a hint: without THP it still works
	touch_parallel((unsigned char *)m, bytes);
	if (cudaHostRegister(m, bytes, cudaHostRegisterPortable) != cudaSuccess) {
		cudaGetLastError();
		munmap(m, bytes);
		pthread_mutex_lock(&mapped_lock);
		mapped[slot].p = NULL;
		pthread_mutex_unlock(&mapped_lock);
		return 1; // not registrable here: the caller takes cudaHostAlloc
	}
	pthread_mutex_lock(&mapped_lock);
	mapped[slot].p = m;
	mapped[slot].bytes = bytes;
	pthread_mutex_unlock(&mapped_lock);
	*p = m;
	return 0;
fail:
	pthread_mutex_lock(&mapped_lock);
	mapped[slot].p = NULL;
	pthread_mutex_unlock(&mapped_lock);
	*p = NULL;
	return -1;
}

// 1 and the size when p came from mapped_host_alloc (its slot freed).
static int mapped_take(void *p, size_t *bytes)
{
	int found = 0;

	pthread_mutex_lock(&mapped_lock);
	for (int i = 0; i < MAPPED_MAX && !found; i++)
		if (mapped[i].p == p) {
			*bytes = mapped[i].bytes;
			mapped[i].p = NULL;
			found = 1;
		}
	pthread_mutex_unlock(&mapped_lock);
	return found;
}

static int cuda_host_alloc(void **p, size_t bytes)
{
	// Portable: pinned for every context, should a second device join later.
	if (bytes >= MAPPED_MIN_BYTES) {
		int rc = mapped_host_alloc(p, bytes);

		if (rc <= 0)
			return rc;
	}
	cudaError_t e = cudaHostAlloc(p, bytes, cudaHostAllocPortable);
	if (e != cudaSuccess) {
		cudaGetLastError();
		*p = NULL;
		return -1;
	}
	return 0;
}

static void cuda_host_free(void *p)
{
	size_t bytes;

	if (p == NULL)
		return;
	if (mapped_take(p, &bytes)) {
		cudaCheck(cudaHostUnregister(p));
		munmap(p, bytes);
		return;
	}
	cudaCheck(cudaFreeHost(p));
}

// A mapping made elsewhere (the shared base), pinned in place; a read-only
// one needs the flag, which Hopper supports (cudaDevAttrHostRegisterReadOnlySupported).
static int cuda_host_register(void *p, size_t bytes, int read_only)
{
	unsigned flags = cudaHostRegisterPortable | (read_only ? cudaHostRegisterReadOnly : 0);

	if (cudaHostRegister(p, bytes, flags) != cudaSuccess) {
		cudaGetLastError();
		return -1;
	}
	return 0;
}

static void cuda_host_unregister(void *p)
{
	if (p != NULL)
		cudaCheck(cudaHostUnregister(p));
}

extern "C" int backend_cuda_device_count(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess) {
		cudaGetLastError();
		return 0;
	}
	return n;
}

// --- copies -----------------------------------------------------------------

static void cuda_copy_h2d(void *dst, const void *src, size_t bytes, int stream)
{
	if (bytes)
		cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_of(stream)));
}

static void cuda_copy_h2d_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                             int stream)
{
	if (width && height)
		cudaCheck(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyHostToDevice,
		                            stream_of(stream)));
}

static void cuda_copy_d2d(void *dst, const void *src, size_t bytes, int stream)
{
	if (bytes)
		cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(stream)));
}

static void cuda_memset_zero(void *dst, size_t bytes, int stream)
{
	if (bytes)
		cudaCheck(cudaMemsetAsync(dst, 0, bytes, stream_of(stream)));
}

// Queued behind everything on the compute stream, then waited for: the
// host sees the value the ops produced.
static void cuda_copy_d2h(void *dst, const void *src, size_t bytes)
{
	if (bytes)
		cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(STREAM_COMPUTE)));
	cudaCheck(cudaStreamSynchronize(stream_of(STREAM_COMPUTE)));
}

// Into pinned host memory, ordered only by the stream (the engine records
// and waits the events that make it safe).
static void cuda_copy_d2h_async(void *dst, const void *src, size_t bytes, int stream)
{
	if (bytes)
		cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(stream)));
}

// --- events -----------------------------------------------------------------

static struct backend_event *cuda_event_create(void)
{
	struct backend_event *e = (struct backend_event *)malloc(sizeof *e);
	if (!e) {
		fprintf(stderr, "%s: out of memory\n", poros_cuda_progname());
		exit(1);
	}
	cudaCheck(cudaEventCreate(&e->ev));
	return e;
}

static void cuda_event_destroy(struct backend_event *e)
{
	if (!e)
		return;
	cudaCheck(cudaEventDestroy(e->ev));
	free(e);
}

static void cuda_event_record(struct backend_event *e, int stream)
{
	cudaCheck(cudaEventRecord(e->ev, stream_of(stream)));
}

static void cuda_stream_wait_event(int stream, struct backend_event *e)
{
	cudaCheck(cudaStreamWaitEvent(stream_of(stream), e->ev, 0));
}

static void cuda_event_synchronize(struct backend_event *e)
{
	cudaCheck(cudaEventSynchronize(e->ev));
}

static float cuda_event_elapsed_ms(struct backend_event *start, struct backend_event *end)
{
	float ms = 0.0f;
	cudaCheck(cudaEventElapsedTime(&ms, start->ev, end->ev));
	return ms;
}

static void cuda_synchronize(void)
{
	cudaCheck(cudaDeviceSynchronize());
}

// The kernels work a sequence and head at a time; cuDNN's route (ops.h)
// plans by the batch, and its backward's sums changed with it on the H200.
static int cuda_attention_batch_invariant(int D, int S)
{
	return !attention_cudnn_route(D, S);
}

static void cuda_set_lane(int lane)
{
	if (lane < 0 || lane >= BACKEND_MAX_LANES || !state.lanes[lane].blas) {
		fprintf(stderr, "%s: CUDA backend: compute lane %d is not open\n", poros_cuda_progname(), lane);
		exit(1);
	}
	state.lane = lane;
}

static int cuda_lane_workspace(int lane, void *p, size_t bytes)
{
	if (lane <= 0 || lane >= BACKEND_MAX_LANES || bytes < CUBLAS_WORKSPACE_BYTES)
		return -1;
	if (state.lanes[lane].blas) { // a later engine in this process: its memory now
		cudaCheck(cudaStreamSynchronize(state.lanes[lane].stream));
		cublasCheck(cublasSetWorkspace(state.lanes[lane].blas, p, CUBLAS_WORKSPACE_BYTES));
		state.lanes[lane].workspace = p;
		return 0;
	}
	if (cudaStreamCreateWithFlags(&state.lanes[lane].stream, cudaStreamNonBlocking) != cudaSuccess) {
		cudaGetLastError();
		return -1;
	}
	// the same workspace size as lane 0's: the same kernels, the same bits
	blas_open(&state.lanes[lane], p, CUBLAS_WORKSPACE_BYTES);
	return 0;
}

static struct backend cuda_backend;

extern "C" const struct backend *backend_cuda_open(char *err, size_t errsz)
{
	char why[256];
	if (cuda_init(why, sizeof why) != 0) {
		if (err && errsz)
			snprintf(err, errsz, "%s", why);
		return NULL;
	}
	struct backend *b = &cuda_backend;
	b->name = "cuda";
	b->ops = &poros_cuda_ops;
	b->device_alloc = cuda_device_alloc;
	b->device_free = cuda_device_free;
	b->host_alloc = cuda_host_alloc;
	b->host_free = cuda_host_free;
	b->host_register = cuda_host_register;
	b->host_unregister = cuda_host_unregister;
	b->copy_h2d = cuda_copy_h2d;
	b->copy_d2d = cuda_copy_d2d;
	b->memset_zero = cuda_memset_zero;
	b->copy_d2h = cuda_copy_d2h;
	b->copy_d2h_async = cuda_copy_d2h_async;
	b->copy_h2d_2d = cuda_copy_h2d_2d;
	b->event_create = cuda_event_create;
	b->event_destroy = cuda_event_destroy;
	b->event_record = cuda_event_record;
	b->stream_wait_event = cuda_stream_wait_event;
	b->event_synchronize = cuda_event_synchronize;
	b->event_elapsed_ms = cuda_event_elapsed_ms;
	b->synchronize = cuda_synchronize;
	b->set_lane = cuda_set_lane;
	b->lane_workspace = cuda_lane_workspace;
	b->device_name = state.device_name;
	b->device_mem_mb = state.mem_mb;
	b->driver_version = state.driver;
	b->runtime_version = state.runtime;
	b->library_device_bytes = CUBLAS_WORKSPACE_BYTES;
	b->pos_mirror = attention_cuda_pos_mirror;
	b->set_row_unit = poros_cuda_set_row_unit;
	b->attention_batch_invariant = cuda_attention_batch_invariant;
	return b;
}
