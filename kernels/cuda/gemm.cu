// defines: poros_cuda_gemm, poros_cuda_gemm_batched, poros_cuda_set_row_unit
//
// Every cuBLAS GEMM of the ops, through cuBLASLt with the algorithm chosen
// once per shape and kept (common.cuh's gemm() calls here).
//
// Why: the engine may run several micro-batches of one layer as one call
// (a group, tools/poros-train/layer.h), where the other schedule runs them
// one at a time; blockwise == resident bit for bit then needs every
// row-local product to give a row the same bits whatever the number of rows
// in the call.  cuBLAS's own choice does not: it picks a kernel, and a
// split of the long sum, from the whole shape (at 32B, u's (T,48) products
// and down_proj's forward differ between 512 and 1024 rows).  One kernel
// with one configuration computes each output element the same way
// wherever its tile lies, so here the product of n rows, n a multiple of
// the row unit U (poros_cuda_set_row_unit: the rows of one micro-batch),
// runs the algorithm cuBLASLt's heuristic gives for U rows; measured on the
// H200 for every Qwen2.5 7B/32B/72B product shape at 2, 4 and 8 x 512 rows
// (docs/perf-notes.md).  Where that algorithm cannot take n rows (a
// split-K whose workspace grows with n), the call runs U rows at a time
// with it: the same bits.  Any other n (fewer rows than U, a head chunk, a
// product whose n is not rows) gets the heuristic's algorithm for n itself.
//
// The algorithm of a unit may be chosen at more rows than the unit, C (a
// multiple of it: poros_cuda_set_row_unit's choose_rows, a group's rows):
// then calls of U rows run the algorithm chosen for C, the first of the
// heuristic's candidates at C rows that cuBLASLt says also takes U rows
// (cublasLtMatmulAlgoCheck), so that a schedule of one micro-batch a call
// and one of C rows a call run one algorithm, and the group's calls run
// at the rate of their own size.  Whether such an algorithm keeps a row's
// bits at U rows is what the H200 must say (docs/perf-notes.md).
//
// "Rows" is the n of the column-major call with an untransposed B (our
// row-major activations, rows ldb apart): the base GEMMs and LoRA's u and
// du.  Every choice is cached by the whole call shape, so a shape always
// runs one algorithm: deterministic, and the same on every compute lane
// (the lanes' workspaces are the same size).
#include "common.cuh"

#define GEMM_CACHE 256
#define GEMM_CANDIDATES 8

struct gemm_key {
	cublasOperation_t ta, tb;
	int m, n, k, lda, ldb, ldc;
	cudaDataType_t ab, c;
	int accumulate; // beta != 0
	int align;      // bytes every operand and pitch is a multiple of (<= 16)
};

struct gemm_entry {
	struct gemm_key key;
	cublasLtMatmulAlgo_t algo;
	int whole; // -1: not tried at a larger n yet; 0: runs U rows at a time; 1: in one call
};

static struct {
	struct gemm_entry e[GEMM_CACHE];
	int n;
	int unit;
	int choose; // the rows a unit's algorithm is chosen at: unit, or a multiple of it
} cache;

extern "C" void *poros_cuda_workspace(size_t *bytes);

extern "C" void poros_cuda_set_row_unit(int rows, int choose_rows)
{
	cache.unit = rows > 0 ? rows : 0;
	cache.choose = cache.unit && choose_rows > cache.unit && choose_rows % cache.unit == 0 ? choose_rows : cache.unit;
}

static bool same_key(const gemm_key &a, const gemm_key &b)
{
	return a.ta == b.ta && a.tb == b.tb && a.m == b.m && a.n == b.n && a.k == b.k && a.lda == b.lda &&
	       a.ldb == b.ldb && a.ldc == b.ldc && a.ab == b.ab && a.c == b.c && a.accumulate == b.accumulate &&
	       a.align == b.align;
}

struct lt_call {
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t a, b, c;
};

static void lt_open(lt_call *l, const gemm_key &k, int n)
{
	cublasComputeType_t compute = CUBLAS_COMPUTE_32F; // fp32 inputs stay fp32: no TF32
	cudaDataType_t scale = CUDA_R_32F;
	cublasCheck(cublasLtMatmulDescCreate(&l->op, compute, scale));
	cublasCheck(cublasLtMatmulDescSetAttribute(l->op, CUBLASLT_MATMUL_DESC_TRANSA, &k.ta, sizeof k.ta));
	cublasCheck(cublasLtMatmulDescSetAttribute(l->op, CUBLASLT_MATMUL_DESC_TRANSB, &k.tb, sizeof k.tb));
	cublasCheck(cublasLtMatrixLayoutCreate(&l->a, k.ab, k.ta == CUBLAS_OP_N ? k.m : k.k,
	                                       k.ta == CUBLAS_OP_N ? k.k : k.m, k.lda));
	cublasCheck(cublasLtMatrixLayoutCreate(&l->b, k.ab, k.tb == CUBLAS_OP_N ? k.k : n, k.tb == CUBLAS_OP_N ? n : k.k,
	                                       k.ldb));
	cublasCheck(cublasLtMatrixLayoutCreate(&l->c, k.c, k.m, n, k.ldc));
}

static void lt_close(lt_call *l)
{
	cublasLtMatrixLayoutDestroy(l->a);
	cublasLtMatrixLayoutDestroy(l->b);
	cublasLtMatrixLayoutDestroy(l->c);
	cublasLtMatmulDescDestroy(l->op);
}

// Whether algo takes the shape k at n rows (its workspace within ours).
static bool takes(const gemm_key &k, int n, const cublasLtMatmulAlgo_t *algo)
{
	size_t bytes;
	lt_call l;
	cublasLtMatmulHeuristicResult_t r;

	poros_cuda_workspace(&bytes);
	lt_open(&l, k, n);
	cublasStatus_t s = cublasLtMatmulAlgoCheck(poros_cuda_cublaslt(), l.op, l.a, l.b, l.c, l.c, algo, &r);
	lt_close(&l);
	return s == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= bytes;
}

// The heuristic's first algorithm for the shape k (at k.n), for operands
// aligned as k says, that also takes `also` rows (0: any).
static cublasLtMatmulAlgo_t choose(const gemm_key &k, int also)
{
	size_t bytes;
	uint32_t align = (uint32_t)k.align;
	lt_call l;
	cublasLtMatmulPreference_t pref;
	cublasLtMatmulHeuristicResult_t res[GEMM_CANDIDATES];
	int found = 0;

	poros_cuda_workspace(&bytes);
	lt_open(&l, k, k.n);
	cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
	cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
	                                                 sizeof bytes));
	cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align,
	                                                 sizeof align));
	cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align,
	                                                 sizeof align));
	cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align,
	                                                 sizeof align));
	cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align,
	                                                 sizeof align));
	cublasCheck(cublasLtMatmulAlgoGetHeuristic(poros_cuda_cublaslt(), l.op, l.a, l.b, l.c, l.c, pref,
	                                           GEMM_CANDIDATES, res, &found));
	cublasLtMatmulPreferenceDestroy(pref);
	lt_close(&l);
	for (int i = 0; i < found; i++)
		if (also == 0 || takes(k, also, &res[i].algo))
			return res[i].algo;
	fprintf(stderr, "%s: cuBLASLt has no algorithm for a %dx%dx%d GEMM%s\n", poros_cuda_progname(), k.m, k.n, k.k,
	        found ? " that also takes a micro-batch's rows" : "");
	exit(1);
}

// The cached algorithm of the shape k; also: as choose's.
static gemm_entry *entry(const gemm_key &k, int also)
{
	for (int i = 0; i < cache.n; i++)
		if (same_key(cache.e[i].key, k))
			return &cache.e[i];
	if (cache.n == GEMM_CACHE) { // more shapes than any run has: forget the oldest half
		memmove(cache.e, cache.e + GEMM_CACHE / 2, sizeof cache.e[0] * (GEMM_CACHE / 2));
		cache.n = GEMM_CACHE / 2;
	}
	gemm_entry *e = &cache.e[cache.n++];
	e->key = k;
	e->algo = choose(k, also);
	e->whole = -1;
	return e;
}

static cublasStatus_t lt_run(const gemm_key &k, int n, const cublasLtMatmulAlgo_t *algo, float alpha,
                             const void *A, const void *B, float beta, void *C)
{
	size_t bytes;
	void *ws = poros_cuda_workspace(&bytes);
	lt_call l;
	lt_open(&l, k, n);
	cublasStatus_t s = cublasLtMatmul(poros_cuda_cublaslt(), l.op, &alpha, A, l.a, B, l.b, &beta, C, l.c, C, l.c,
	                                  algo, ws, bytes, poros_cuda_compute_stream());
	lt_close(&l);
	return s;
}

static size_t type_bytes(cudaDataType_t t)
{
	return t == CUDA_R_16BF ? 2 : 4;
}

// The largest power of two up to 16 that every pointer and pitch of the
// call is a multiple of, in bytes: the ops pass 16 (rows of multiples of 8
// elements from aligned buffers); a tiny model's odd pitch gets an
// algorithm that takes it.  A group's blocks of U rows lie whole pitches
// apart, so they share the first block's alignment.
static int call_align(const void *A, const void *B, const void *C, size_t pitches)
{
	uintptr_t bits = (uintptr_t)A | (uintptr_t)B | (uintptr_t)C | (uintptr_t)pitches | 16;
	return (int)(bits & (~bits + 1));
}

extern "C" void poros_cuda_gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                                const void *A, cudaDataType_t ab, int lda, const void *B, int ldb, float beta,
                                void *C, cudaDataType_t c_type, int ldc)
{
	size_t pitches = (size_t)lda * type_bytes(ab) | (size_t)ldb * type_bytes(ab) | (size_t)ldc * type_bytes(c_type);
	gemm_key key = { ta, tb, m, n, k, lda, ldb, ldc, ab, c_type, beta != 0.0f, call_align(A, B, C, pitches) };
	int U = cache.unit, at_rows = cache.choose;

	if (m <= 0 || n <= 0)
		return;
	if (k <= 0) { // no sum: C = beta C, which cuBLAS does without a kernel choice
		cublasCheck(cublasGemmEx(poros_cuda_cublas(), ta, tb, m, n, k, &alpha, A, ab, lda, B, ab, ldb, &beta, C,
		                         c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
		return;
	}
	if (tb == CUBLAS_OP_N && U > 0 && n % U == 0 && (n > U || at_rows > U)) { // rows: U's algorithm
		gemm_key unit = key, at = key;
		unit.n = U;
		at.n = at_rows;
		gemm_entry *e = entry(at, at_rows > U ? U : 0);
		if (n == U) {
			cublasCheck(lt_run(unit, U, &e->algo, alpha, A, B, beta, C));
			return;
		}
		if (e->whole != 0) {
			cublasStatus_t s = lt_run(key, n, &e->algo, alpha, A, B, beta, C);
			if (s == CUBLAS_STATUS_SUCCESS) {
				e->whole = 1;
				return;
			}
			e->whole = 0; // it cannot take n rows: U at a time, the same bits
		}
		for (int r = 0; r < n; r += U)
			cublasCheck(lt_run(unit, U, &e->algo, alpha, A, (const char *)B + (size_t)r * ldb * type_bytes(ab),
			                   beta, (char *)C + (size_t)r * ldc * type_bytes(c_type)));
		return;
	}
	gemm_entry *e = entry(key, 0);
	cublasCheck(lt_run(key, n, &e->algo, alpha, A, B, beta, C));
}

// batch products of one shape, operand i at A + i stride_a, B + i
// stride_b, C + i stride_c (elements), in one cuBLASLt call on the
// algorithm poros_cuda_gemm runs for that shape alone: each product is
// computed by its own tiles with that kernel and configuration, so its
// bits are those of its own call (measured: tests/gpu/bench_invariance,
// "segments").  Where cuBLASLt refuses the batched call, and for a batch
// of one, one poros_cuda_gemm call each.
extern "C" void poros_cuda_gemm_batched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                                        const void *A, cudaDataType_t ab, int lda, long long stride_a,
                                        const void *B, int ldb, long long stride_b, float beta, void *C,
                                        cudaDataType_t c_type, int ldc, long long stride_c, int batch)
{
	size_t es = type_bytes(ab), cs = type_bytes(c_type);
	size_t pitches = (size_t)lda * es | (size_t)ldb * es | (size_t)ldc * cs | (size_t)stride_a * es |
	                 (size_t)stride_b * es | (size_t)stride_c * cs;
	gemm_key key = { ta, tb, m, n, k, lda, ldb, ldc, ab, c_type, beta != 0.0f, call_align(A, B, C, pitches) };

	if (batch <= 0 || m <= 0 || n <= 0)
		return;
	if (batch > 1 && k > 0 && tb != CUBLAS_OP_N) { // not a row product: one algorithm a shape
		gemm_entry *e = entry(key, 0);
		size_t bytes;
		void *ws = poros_cuda_workspace(&bytes);
		int32_t count = batch;
		long long strides[3] = { stride_a, stride_b, stride_c };
		lt_call l;
		lt_open(&l, key, n);
		cublasLtMatrixLayout_t lays[3] = { l.a, l.b, l.c };
		for (int i = 0; i < 3; i++) {
			cublasCheck(cublasLtMatrixLayoutSetAttribute(lays[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
			                                             sizeof count));
			cublasCheck(cublasLtMatrixLayoutSetAttribute(lays[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
			                                             &strides[i], sizeof strides[i]));
		}
		cublasStatus_t s = cublasLtMatmul(poros_cuda_cublaslt(), l.op, &alpha, A, l.a, B, l.b, &beta, C, l.c, C,
		                                  l.c, &e->algo, ws, bytes, poros_cuda_compute_stream());
		lt_close(&l);
		if (s == CUBLAS_STATUS_SUCCESS)
			return;
	}
	for (int i = 0; i < batch; i++)
		poros_cuda_gemm(ta, tb, m, n, k, alpha, (const char *)A + (size_t)i * stride_a * es, ab, lda,
		                (const char *)B + (size_t)i * stride_b * es, ldb, beta,
		                (char *)C + (size_t)i * stride_c * cs, c_type, ldc);
}
