// defines: attention_cudnn_forward, attention_cudnn_backward
//
// The attention's second route: cuDNN's fused flash attention (cuDNN 9,
// Hopper), reached through cuDNN's backend graph API.  The graphs below are
// what its fused-attention engines recognise: the forward's scores, scale,
// causal mask, softmax with its statistics (lse) and P V; the backward's
// delta (rowsum of dO * O), the recomputed P, dV = P^T dO, dP = dO V^T, dS =
// scale P (dP - delta), dK = dS^T Q and dQ = dS K.
//
// Determinism: the backward is built in cuDNN's "dP workspace" form (dS in
// the workspace, dQ a product over it, no fp32 atomics) on one key/value
// head per query head (attention.cu expands k and v), and an engine whose
// numerical notes say non-deterministic is refused: the same inputs give
// the same bits.  The workspace grows with S^2 per head, so the backward
// runs a few heads a call (ops.h's attention_cudnn_heads), one plan for
// all the calls.
//
// Inputs are the bf16 packs of attention.cu ((B, nh, S, D) rows, D =
// attention_dpad(D)); out is the op's (T, H*D) bf16 with rows ld_out
// apart; lse (B,H,S) fp32, cuDNN's statistics (max + log of the sum of the
// scaled scores, natural log).  One execution plan is built per shape and
// kept for the process (a build compiles kernels at run time).
#include <cudnn.h>
#include <time.h>

#include "attention.cuh"

#define CUDNN_MAX_OPS 48
#define CUDNN_MAX_DESCS 160

static void cudnn_fail(const char *what, cudnnStatus_t st, const char *file, int line)
{
	char msg[512] = "";
	cudnnGetLastErrorString(msg, sizeof msg);
	fprintf(stderr, "%s: cuDNN: %s: %s (%s:%d)%s%s\n", poros_cuda_progname(), what, cudnnGetErrorString(st), file,
	        line, msg[0] ? ": " : "", msg);
	exit(1);
}

#define cudnnCheck(call)                                                   \
	do {                                                               \
		cudnnStatus_t st_ = (call);                                \
		if (st_ != CUDNN_STATUS_SUCCESS)                           \
			cudnn_fail(#call, st_, __FILE__, __LINE__);        \
	} while (0)

static cudnnHandle_t cudnn_handle(void)
{
	static cudnnHandle_t h;
	if (!h)
		cudnnCheck(cudnnCreate(&h));
	cudnnCheck(cudnnSetStream(h, poros_cuda_compute_stream()));
	return h;
}

// ---------------------------------------------------------------------------
// A graph under construction: the descriptors it owns and its operations.

struct graph {
	cudnnBackendDescriptor_t ops[CUDNN_MAX_OPS];
	int nops;
	cudnnBackendDescriptor_t owned[CUDNN_MAX_DESCS];
	int nowned;
	int64_t next_virtual_uid;
};

static cudnnBackendDescriptor_t desc_new(struct graph *g, cudnnBackendDescriptorType_t type)
{
	cudnnBackendDescriptor_t d;
	cudnnCheck(cudnnBackendCreateDescriptor(type, &d));
	if (g->nowned == CUDNN_MAX_DESCS) {
		fprintf(stderr, "%s: cuDNN: graph too large\n", poros_cuda_progname());
		exit(1);
	}
	g->owned[g->nowned++] = d;
	return d;
}

static void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                int64_t count, const void *value)
{
	cudnnCheck(cudnnBackendSetAttribute(d, name, type, count, value));
}

static void set_desc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t v)
{
	set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

static void graph_free(struct graph *g)
{
	for (int i = 0; i < g->nowned; i++)
		cudnnBackendDestroyDescriptor(g->owned[i]);
	g->nowned = g->nops = 0;
}

struct tdesc {
	int64_t dim[4], stride[4];
};

static struct tdesc dims(int64_t a, int64_t b, int64_t c, int64_t d, int64_t sa, int64_t sb, int64_t sc, int64_t sd)
{
	struct tdesc t = { { a, b, c, d }, { sa, sb, sc, sd } };
	return t;
}

// The (b, h, r, c) layout with rows of c contiguous: strides h*r*c, r*c, c, 1.
static struct tdesc packed(int64_t b, int64_t h, int64_t r, int64_t c)
{
	return dims(b, h, r, c, h * r * c, r * c, c, 1);
}

// The same tensor with its last two dimensions swapped (a transposed view).
static struct tdesc transposed(struct tdesc t)
{
	return dims(t.dim[0], t.dim[1], t.dim[3], t.dim[2], t.stride[0], t.stride[1], t.stride[3], t.stride[2]);
}

static cudnnBackendDescriptor_t tensor_desc(struct graph *g, int64_t uid, cudnnDataType_t type, struct tdesc t,
                                           bool is_virtual, bool by_value)
{
	cudnnBackendDescriptor_t d = desc_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
	int64_t align = 16;
	set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
	set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, t.dim);
	set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, t.stride);
	set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
	set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
	set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
	if (by_value)
		set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
	cudnnCheck(cudnnBackendFinalize(d));
	return d;
}

// A tensor in memory (given to the plan at execution under uid).
static cudnnBackendDescriptor_t io(struct graph *g, int64_t uid, cudnnDataType_t type, struct tdesc t)
{
	return tensor_desc(g, uid, type, t, false, false);
}

// A host scalar passed by value (a 1x1x1x1 fp32).
static cudnnBackendDescriptor_t scalar(struct graph *g, int64_t uid)
{
	return tensor_desc(g, uid, CUDNN_DATA_FLOAT, packed(1, 1, 1, 1), false, true);
}

// An intermediate the engine keeps to itself.
static cudnnBackendDescriptor_t virt(struct graph *g, cudnnDataType_t type, struct tdesc t)
{
	return tensor_desc(g, g->next_virtual_uid++, type, t, true, false);
}

static void add_op(struct graph *g, cudnnBackendDescriptor_t op)
{
	cudnnCheck(cudnnBackendFinalize(op));
	if (g->nops == CUDNN_MAX_OPS) {
		fprintf(stderr, "%s: cuDNN: too many operations\n", poros_cuda_progname());
		exit(1);
	}
	g->ops[g->nops++] = op;
}

// y = mode(x, b, t): b and t may be NULL; axis >= 0 for GEN_INDEX.
static void pointwise(struct graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t y,
                      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, int64_t axis)
{
	cudnnBackendDescriptor_t pw = desc_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
	set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
	set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
	if (axis >= 0)
		set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
	cudnnCheck(cudnnBackendFinalize(pw));
	cudnnBackendDescriptor_t op = desc_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
	set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
	set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
	if (b)
		set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
	if (t)
		set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
	set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
	add_op(g, op);
}

static void pw2(struct graph *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t x,
                cudnnBackendDescriptor_t b)
{
	pointwise(g, mode, CUDNN_DATA_FLOAT, y, x, b, NULL, -1);
}

// c = a @ b, fp32 accumulation.
static void matmul(struct graph *g, cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b)
{
	cudnnDataType_t comp = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t mm = desc_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
	set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
	cudnnCheck(cudnnBackendFinalize(mm));
	cudnnBackendDescriptor_t op = desc_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
	set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
	set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
	set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
	set_desc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
	add_op(g, op);
}

static void reduction(struct graph *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t y,
                      cudnnBackendDescriptor_t x)
{
	cudnnDataType_t comp = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t rd = desc_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
	set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
	set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
	cudnnCheck(cudnnBackendFinalize(rd));
	cudnnBackendDescriptor_t op = desc_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
	set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd);
	set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
	set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
	add_op(g, op);
}

static void reshape(struct graph *g, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t x)
{
	cudnnBackendDescriptor_t op = desc_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
	set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
	set_desc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
	add_op(g, op);
}

// scores -> scores with the causal mask: key j of query row i is kept iff
// i >= j.
static cudnnBackendDescriptor_t causal(struct graph *g, cudnnBackendDescriptor_t s, struct tdesc st,
                                       cudnnBackendDescriptor_t neg_inf)
{
	cudnnBackendDescriptor_t row = virt(g, CUDNN_DATA_INT32, st), col = virt(g, CUDNN_DATA_INT32, st);
	pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, row, s, NULL, NULL, 2);
	pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, col, s, NULL, NULL, 3);
	cudnnBackendDescriptor_t keep = virt(g, CUDNN_DATA_BOOLEAN, st);
	pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, keep, row, col, NULL, -1);
	cudnnBackendDescriptor_t masked = virt(g, CUDNN_DATA_FLOAT, st);
	pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, masked, s, neg_inf, keep, -1);
	return masked;
}

// ---------------------------------------------------------------------------
// Plans: the graph finalized, the first deterministic engine that builds.

struct plan {
	cudnnBackendDescriptor_t exec;
	int64_t workspace;
};

static bool engine_deterministic(cudnnBackendDescriptor_t cfg, int64_t *index)
{
	cudnnBackendDescriptor_t engine;
	int64_t n = 0;
	cudnnCheck(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine));
	cudnnCheck(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
	                                    &engine));
	cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
	n = 0;
	cudnnCheck(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
	                                    CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes));
	cudnnCheck(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, NULL, index));
	cudnnBackendDestroyDescriptor(engine);
	if (getenv("POROS_CUDNN_VERBOSE"))
		for (int64_t i = 0; i < n; i++)
			fprintf(stderr, "cudnn: engine %lld numerical note %d\n", (long long)*index, (int)notes[i]);
	for (int64_t i = 0; i < n; i++)
		if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC)
			return false;
	return true;
}

// Returns false when no engine takes the graph (the reason on stderr when
// POROS_CUDNN_VERBOSE is set).
static bool plan_build(struct plan *p, struct graph *g, const char *what)
{
	bool verbose = getenv("POROS_CUDNN_VERBOSE") != NULL;
	cudnnHandle_t h = cudnn_handle();
	cudnnBackendDescriptor_t opg, heur;
	cudnnCheck(cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &opg));
	set(opg, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops);
	set(opg, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
	cudnnStatus_t st = cudnnBackendFinalize(opg);
	if (st != CUDNN_STATUS_SUCCESS) {
		if (verbose) {
			char msg[512] = "";
			cudnnGetLastErrorString(msg, sizeof msg);
			fprintf(stderr, "cudnn %s: operation graph: %s %s\n", what, cudnnGetErrorString(st), msg);
		}
		cudnnBackendDestroyDescriptor(opg);
		return false;
	}
	cudnnCheck(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur));
	set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, opg);
	cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
	set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
	cudnnCheck(cudnnBackendFinalize(heur));
	enum { MAX_CFG = 16 };
	cudnnBackendDescriptor_t cfgs[MAX_CFG];
	for (int i = 0; i < MAX_CFG; i++)
		cudnnCheck(cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfgs[i]));
	int64_t ncfg = 0;
	cudnnCheck(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, MAX_CFG,
	                                    &ncfg, cfgs));
	if (ncfg > MAX_CFG) // the count is of all the results, of which MAX_CFG were written
		ncfg = MAX_CFG;
	bool ok = false;
	for (int64_t i = 0; i < ncfg && !ok; i++) {
		int64_t index = -1;
		if (!engine_deterministic(cfgs[i], &index)) {
			if (verbose)
				fprintf(stderr, "cudnn %s: engine %lld is not deterministic\n", what, (long long)index);
			continue;
		}
		cudnnBackendDescriptor_t exec;
		cudnnCheck(cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &exec));
		set(exec, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
		set_desc(exec, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[i]);
		st = cudnnBackendFinalize(exec);
		if (st != CUDNN_STATUS_SUCCESS) {
			if (verbose) {
				char msg[512] = "";
				cudnnGetLastErrorString(msg, sizeof msg);
				fprintf(stderr, "cudnn %s: engine %lld: %s %s\n", what, (long long)index,
				        cudnnGetErrorString(st), msg);
			}
			cudnnBackendDestroyDescriptor(exec);
			continue;
		}
		cudnnCheck(cudnnBackendGetAttribute(exec, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
		                                    NULL, &p->workspace));
		p->exec = exec;
		ok = true;
		if (verbose)
			fprintf(stderr, "cudnn %s: engine %lld, workspace %lld bytes\n", what, (long long)index,
			        (long long)p->workspace);
	}
	if (!ok && verbose)
		fprintf(stderr, "cudnn %s: no engine of %lld takes the graph\n", what, (long long)ncfg);
	for (int i = 0; i < MAX_CFG; i++)
		cudnnBackendDestroyDescriptor(cfgs[i]);
	cudnnBackendDestroyDescriptor(heur);
	cudnnBackendDestroyDescriptor(opg);
	return ok;
}

static void plan_run(const struct plan *p, int n, const int64_t *uids, void *const *ptrs, void *workspace)
{
	cudnnHandle_t h = cudnn_handle();
	cudnnBackendDescriptor_t vp;
	cudnnCheck(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp));
	set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
	set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
	set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
	cudnnCheck(cudnnBackendFinalize(vp));
	cudnnCheck(cudnnBackendExecute(h, p->exec, vp));
	cudnnBackendDestroyDescriptor(vp);
}

// ---------------------------------------------------------------------------
// The graphs.

enum {
	UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF, UID_DO, UID_DQ, UID_DK, UID_DV,
	UID_DELTA, UID_ONE, UID_FIRST_VIRTUAL = 1000
};

// A call's shape: B sequences of S tokens, heads hc of the H query heads
// (G key/value heads in the forward; the backward's k, v are per query
// head), head dim D, out's rows ld_out apart.  The sequences are views
// into packs whose rows hold Srow >= S tokens (a document of a packed row:
// Srow is the row's length, the strides are the row's).  The backward's
// keys: Sk of them (S but in a tile of a long row), causal or (a tile
// below the diagonal) not, from packs of Hkv heads of Wk rows (H and
// Srow, or a tile's expansion: hc heads of Sk rows).
struct attn_shape {
	int B, S, Srow, H, G, hc, D, ld_out, Sk, causal, Hkv, Wk;
};

static bool shape_eq(const struct attn_shape *a, const struct attn_shape *b)
{
	return memcmp(a, b, sizeof *a) == 0;
}

// The forward: out = softmax(scale q k^T, causal) v, stats = lse.
static bool forward_plan(struct plan *p, const struct attn_shape *s)
{
	struct graph g;
	memset(&g, 0, sizeof g);
	g.next_virtual_uid = UID_FIRST_VIRTUAL;
	int64_t B = s->B, S = s->S, R = s->Srow, H = s->H, G = s->G, D = s->D;
	struct tdesc qt = dims(B, H, S, D, H * R * D, R * D, D, 1), kt = dims(B, G, S, D, G * R * D, R * D, D, 1);
	struct tdesc scores = packed(B, H, S, S);
	struct tdesc ot = dims(B, H, S, D, R * s->ld_out, D, s->ld_out, 1), row = dims(B, H, S, 1, H * R, R, 1, 1);
	cudnnBackendDescriptor_t q = io(&g, UID_Q, CUDNN_DATA_BFLOAT16, qt);
	cudnnBackendDescriptor_t k = io(&g, UID_K, CUDNN_DATA_BFLOAT16, transposed(kt));
	cudnnBackendDescriptor_t v = io(&g, UID_V, CUDNN_DATA_BFLOAT16, kt);
	cudnnBackendDescriptor_t o = io(&g, UID_O, CUDNN_DATA_BFLOAT16, ot);
	cudnnBackendDescriptor_t stats = io(&g, UID_STATS, CUDNN_DATA_FLOAT, row);
	cudnnBackendDescriptor_t scale = scalar(&g, UID_SCALE), neg_inf = scalar(&g, UID_NEG_INF);

	cudnnBackendDescriptor_t qk = virt(&g, CUDNN_DATA_FLOAT, scores), sc = virt(&g, CUDNN_DATA_FLOAT, scores);
	matmul(&g, qk, q, k);
	pw2(&g, CUDNN_POINTWISE_MUL, sc, qk, scale);
	cudnnBackendDescriptor_t masked = causal(&g, sc, scores, neg_inf);
	cudnnBackendDescriptor_t mx = virt(&g, CUDNN_DATA_FLOAT, row), sub = virt(&g, CUDNN_DATA_FLOAT, scores);
	cudnnBackendDescriptor_t ex = virt(&g, CUDNN_DATA_FLOAT, scores), sum = virt(&g, CUDNN_DATA_FLOAT, row);
	cudnnBackendDescriptor_t lg = virt(&g, CUDNN_DATA_FLOAT, row), pr = virt(&g, CUDNN_DATA_BFLOAT16, scores);
	reduction(&g, CUDNN_REDUCE_TENSOR_MAX, mx, masked);
	pw2(&g, CUDNN_POINTWISE_SUB, sub, masked, mx);
	pw2(&g, CUDNN_POINTWISE_EXP, ex, sub, NULL);
	reduction(&g, CUDNN_REDUCE_TENSOR_ADD, sum, ex);
	pw2(&g, CUDNN_POINTWISE_LOG, lg, sum, NULL);
	pw2(&g, CUDNN_POINTWISE_ADD, stats, mx, lg);
	pw2(&g, CUDNN_POINTWISE_DIV, pr, ex, sum);
	matmul(&g, o, pr, v);
	bool ok = plan_build(p, &g, "forward");
	graph_free(&g);
	return ok;
}

// The backward of hc query heads with k, v per query head (expanded): dq,
// dk, dv bf16 (B, hc, S, D), packed; delta (B,H,S) fp32 for the chunk's
// heads.
// With one key/value head per query head, cuDNN's dQ over the dS workspace
// has no cross-head sum and gives the same bits run to run (with G < H in
// the graph its dQ does not: measured, perf-notes).
static bool backward_plan(struct plan *p, const struct attn_shape *s)
{
	struct graph g;
	memset(&g, 0, sizeof g);
	g.next_virtual_uid = UID_FIRST_VIRTUAL;
	int64_t B = s->B, S = s->S, W = s->Srow, H = s->H, R = s->hc, D = s->D, Sk = s->Sk, Hkv = s->Hkv, Wk = s->Wk;
	struct tdesc qt = dims(B, R, S, D, H * W * D, W * D, D, 1); // (B,H,W,D) packs, hc of the heads
	struct tdesc kt = dims(B, R, Sk, D, Hkv * Wk * D, Wk * D, D, 1); // (B,Hkv,Wk,D) packs
	struct tdesc ot = dims(B, R, S, D, W * s->ld_out, D, s->ld_out, 1);
	struct tdesc gt = packed(B, R, S, D), gkt = packed(B, R, Sk, D);
	struct tdesc row = dims(B, R, S, 1, H * W, W, 1, 1);
	struct tdesc scores = packed(B, R, S, Sk), scores_t = transposed(scores);
	cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT;
	cudnnBackendDescriptor_t q = io(&g, UID_Q, bf, qt);
	cudnnBackendDescriptor_t k_t = io(&g, UID_K, bf, transposed(kt));
	cudnnBackendDescriptor_t v_t = io(&g, UID_V, bf, transposed(kt));
	cudnnBackendDescriptor_t o = io(&g, UID_O, bf, ot);
	cudnnBackendDescriptor_t d_o = io(&g, UID_DO, bf, qt);
	cudnnBackendDescriptor_t stats = io(&g, UID_STATS, f32, row);
	cudnnBackendDescriptor_t delta = io(&g, UID_DELTA, f32, row);
	cudnnBackendDescriptor_t dq = io(&g, UID_DQ, bf, gt), dk = io(&g, UID_DK, bf, gkt), dv = io(&g, UID_DV, bf, gkt);
	cudnnBackendDescriptor_t scale = scalar(&g, UID_SCALE), neg_inf = scalar(&g, UID_NEG_INF);
	cudnnBackendDescriptor_t one = scalar(&g, UID_ONE);

	// delta = rowsum(dO * O)
	cudnnBackendDescriptor_t dOO = virt(&g, f32, dims(B, R, S, D, R * S * D, S * D, R * D, 1));
	cudnnBackendDescriptor_t dsum = virt(&g, f32, row);
	pw2(&g, CUDNN_POINTWISE_MUL, dOO, d_o, o);
	reduction(&g, CUDNN_REDUCE_TENSOR_ADD, dsum, dOO);
	pw2(&g, CUDNN_POINTWISE_MUL, delta, dsum, one);

	// P = exp(scale q k^T - lse), causal (a tile below the diagonal: every key)
	cudnnBackendDescriptor_t qk = virt(&g, f32, scores), sc = virt(&g, f32, scores);
	cudnnBackendDescriptor_t centred = virt(&g, f32, scores), pr = virt(&g, f32, scores);
	matmul(&g, qk, q, k_t);
	pw2(&g, CUDNN_POINTWISE_MUL, sc, qk, scale);
	pw2(&g, CUDNN_POINTWISE_SUB, centred, sc, stats);
	cudnnBackendDescriptor_t masked = s->causal ? causal(&g, centred, scores, neg_inf) : centred;
	pw2(&g, CUDNN_POINTWISE_EXP, pr, masked, NULL);

	// dV = P^T dO
	cudnnBackendDescriptor_t pt = virt(&g, bf, scores_t);
	reshape(&g, pt, pr);
	matmul(&g, dv, pt, d_o);

	// dS = scale P (dO V^T - delta)
	cudnnBackendDescriptor_t dp = virt(&g, f32, scores), dpc = virt(&g, f32, scores);
	cudnnBackendDescriptor_t ds0 = virt(&g, f32, scores), ds = virt(&g, f32, scores);
	matmul(&g, dp, d_o, v_t);
	pw2(&g, CUDNN_POINTWISE_SUB, dpc, dp, delta);
	pw2(&g, CUDNN_POINTWISE_MUL, ds0, dpc, pr);
	pw2(&g, CUDNN_POINTWISE_MUL, ds, ds0, scale);

	// dK = dS^T q
	cudnnBackendDescriptor_t dst = virt(&g, bf, scores_t);
	reshape(&g, dst, ds);
	matmul(&g, dk, dst, q);

	// dQ = dS k, a product over dS in the workspace
	cudnnBackendDescriptor_t k = virt(&g, bf, kt);
	reshape(&g, k, k_t);
	matmul(&g, dq, ds, k);
	bool ok = plan_build(p, &g, "backward");
	graph_free(&g);
	return ok;
}

// ---------------------------------------------------------------------------
// The plan cache: one forward and one backward plan per shape (a training
// step of one-document rows has one shape; packed rows one per document
// length), the least recently used one rebuilt when it is full.

#define PLAN_CACHE 96

struct cached {
	struct attn_shape shape;
	bool backward, ok;
	struct plan plan;
	unsigned long used;
};

static struct cached cache[PLAN_CACHE];
static int ncached;
static unsigned long plan_clock;
static struct attention_cudnn_stats stats;

static const struct plan *plan_for(const struct attn_shape *s, bool backward)
{
	for (int i = 0; i < ncached; i++)
		if (cache[i].backward == backward && shape_eq(&cache[i].shape, s)) {
			cache[i].used = ++plan_clock;
			return cache[i].ok ? &cache[i].plan : NULL;
		}
	struct cached *c;
	if (ncached < PLAN_CACHE) {
		c = &cache[ncached++];
	} else {
		c = &cache[0];
		for (int i = 1; i < PLAN_CACHE; i++)
			if (cache[i].used < c->used)
				c = &cache[i];
		if (c->ok)
			cudnnBackendDestroyDescriptor(c->plan.exec);
	}
	memset(c, 0, sizeof *c);
	c->used = ++plan_clock;
	stats.plans_built++;
	c->shape = *s;
	c->backward = backward;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	c->ok = backward ? backward_plan(&c->plan, s) : forward_plan(&c->plan, s);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	stats.build_ms += (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
	return c->ok ? &c->plan : NULL;
}

// A plan whose workspace is over what the scratch holds for it is not run
// (said once): the plan and the run must agree on memory.
static const struct plan *plan_within(const struct attn_shape *s, bool backward, size_t workspace_bytes)
{
	const struct plan *p = plan_for(s, backward);
	static bool said;
	if (p && (size_t)p->workspace > workspace_bytes) {
		if (!said)
			fprintf(stderr, "%s: cuDNN attention asks for %lld bytes of workspace where %zu are planned: "
			        "the attention kernels run instead\n", poros_cuda_progname(), (long long)p->workspace,
			        workspace_bytes);
		said = true;
		return NULL;
	}
	return p;
}

// The graphs declare every operand 16-byte aligned (tensor_desc).  The
// packs, gradients and workspace are (the scratch's parts, rows of D = 64
// or 128 bf16); out, lse and delta at a call's start need not be (a
// document's first row, a backward call's first head h0, a micro-batch's
// offset, with S or the document's start not a multiple of 4): such a
// call returns false, and the kernels run.
static bool rows_aligned(const bf16 *out, const float *lse, const float *delta, int S, int H, int hc, int D)
{
	for (int h0 = 0; h0 < H; h0 += hc)
		if (!aligned16(out + (size_t)h0 * D) || !aligned16(lse + (size_t)h0 * S) ||
		    (delta && !aligned16(delta + (size_t)h0 * S)))
			return false;
	return true;
}

// ---------------------------------------------------------------------------
// Entry points (attention.cu calls these after its packs).

extern "C" bool attention_cudnn_forward(bf16 *out, int ld_out, float *lse, void *workspace, size_t workspace_bytes,
                                        const bf16 *q16, const bf16 *k16, const bf16 *v16, int B, int S, int H,
                                        int G, int D)
{
	struct attn_shape s = { B, S, S, H, G, H, D, ld_out, S, 1, G, S };
	if (!rows_aligned(out, lse, NULL, S, H, H, D))
		return false;
	const struct plan *p = plan_within(&s, false, workspace_bytes);
	if (!p)
		return false;
	float scale = (float)(1.0 / sqrt((double)D)), neg_inf = -INFINITY;
	int64_t uids[] = { UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF };
	void *ptrs[] = { (void *)q16, (void *)k16, (void *)v16, out, lse, &scale, &neg_inf };
	plan_run(p, 7, uids, ptrs, workspace);
	return true;
}

// dst (T,H,D) fp32 heads h0 .. h0+hc-1 = src (B,hc,S,D) bf16, widened.
// Grid-stride: grid_for caps the grid at 65536 blocks (2^24 elements of
// 256 threads), which a call of B=4 x 28 heads x 2048 tokens passes.
__global__ void attention_unpack_kernel(float *dst, const bf16 *src, int S, int hc, int H, int h0, int D, long n)
{
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		long d = i % D, s = i / D % S, h = i / ((long)D * S) % hc, b = i / ((long)D * S * hc);
		dst[((b * S + s) * H + h0 + h) * D + d] = bf16_to_f32(src[i]);
	}
}

static void unpack(float *dst, const bf16 *src, int B, int S, int hc, int H, int h0, int D)
{
	long n = (long)B * hc * S * D;
	attention_unpack_kernel<<<grid_for(n, 256), 256, 0, poros_cuda_compute_stream()>>>(dst, src, S, hc, H, h0, D,
	                                                                                    n);
	launchCheck();
}

// dq_h, dk_h, dv_h (T,H,D) fp32 per query head, delta (B,H,S) fp32, from
// q16, kx16, vx16, do16 (B,H,S,D) (k, v one per query head), out, lse:
// heads_per_call heads at a time, in order, through the bf16 parts grads
// (3 x B x heads_per_call x S x D).
extern "C" bool attention_cudnn_backward(float *dq_h, float *dk_h, float *dv_h, bf16 *grads, float *delta,
                                         void *workspace, size_t workspace_bytes, const bf16 *q16,
                                         const bf16 *kx16, const bf16 *vx16, const bf16 *do16, const bf16 *out,
                                         int ld_out, const float *lse, int heads_per_call, int B, int S, int H,
                                         int D)
{
	struct attn_shape s = { B, S, S, H, H, heads_per_call, D, ld_out, S, 1, H, S };
	if (!rows_aligned(out, lse, delta, S, H, heads_per_call, D))
		return false;
	const struct plan *p = plan_within(&s, true, workspace_bytes);
	if (!p)
		return false;
	float scale = (float)(1.0 / sqrt((double)D)), neg_inf = -INFINITY, one = 1.0f;
	size_t part = (size_t)B * heads_per_call * S * D;
	bf16 *dq16 = grads, *dk16 = grads + part, *dv16 = grads + 2 * part;
	for (int h0 = 0; h0 < H; h0 += heads_per_call) {
		size_t pack = (size_t)h0 * S * D;
		int64_t uids[] = { UID_Q, UID_K, UID_V, UID_O, UID_DO, UID_STATS, UID_DELTA, UID_DQ, UID_DK, UID_DV,
		                   UID_SCALE, UID_NEG_INF, UID_ONE };
		void *ptrs[] = { (void *)(q16 + pack), (void *)(kx16 + pack), (void *)(vx16 + pack),
		                 (void *)(out + (size_t)h0 * D), (void *)(do16 + pack), (void *)(lse + (size_t)h0 * S),
		                 delta + (size_t)h0 * S, dq16, dk16, dv16, &scale, &neg_inf, &one };
		plan_run(p, 13, uids, ptrs, workspace);
		unpack(dq_h, dq16, B, S, heads_per_call, H, h0, D);
		unpack(dk_h, dk16, B, S, heads_per_call, H, h0, D);
		unpack(dv_h, dv16, B, S, heads_per_call, H, h0, D);
	}
	return true;
}

// ---------------------------------------------------------------------------
// Long rows in tiles (ops.h's attention_cudnn_tiles): query chunk i of C
// tokens against key chunk j <= i, the diagonal tile causal, the others
// unmasked, each with the row's lse, so every tile's P is the whole row's
// and the gradients are sums of the tiles' parts.

// dst (T,Hd,D) fp32 rows r0 .. r0+len-1 of each sequence (S rows apart),
// heads hd0 .. hd0+hc-1, from src (B,hc,len,D) bf16: widened, and written
// (add false) or added to what is there (add true).
__global__ void attention_unpack_rows_kernel(float *dst, const bf16 *src, int S, int r0, int len, int hc, int Hd,
                                             int hd0, int D, long n, bool add)
{
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		long d = i % D, s = i / D % len, h = i / ((long)D * len) % hc, b = i / ((long)D * len * hc);
		float *at = dst + ((b * S + r0 + s) * Hd + hd0 + h) * D + d;
		float v = bf16_to_f32(src[i]);
		*at = add ? *at + v : v;
	}
}

static void unpack_rows(float *dst, const bf16 *src, int B, int S, int r0, int len, int hc, int Hd, int hd0, int D,
                        bool add)
{
	long n = (long)B * hc * len * D;
	attention_unpack_rows_kernel<<<grid_for(n, 256), 256, 0, poros_cuda_compute_stream()>>>(
		dst, src, S, r0, len, hc, Hd, hd0, D, n, add);
	launchCheck();
}

// Tile (i, j)'s shape: the query chunk's rows against the key chunk's, k
// and v from the row's packs (expanded false: H heads of S rows) or from
// the key chunk's expansion to the call's heads (hc heads of its rows).
static struct attn_shape tile_shape(int i, int j, int B, int S, int H, int hc, int C, bool expanded, int D,
                                    int ld_out)
{
	int lq = S - i * C < C ? S - i * C : C, lk = S - j * C < C ? S - j * C : C;
	struct attn_shape s = { B, lq, S, H, H, hc, D, ld_out, lk, i == j, expanded ? hc : H, expanded ? lk : S };
	return s;
}

extern "C" bool attention_cudnn_tiles_ready(const bf16 *out, const float *lse, const float *delta, int B, int S,
                                            int H, int hc, int C, bool expanded, int D, int ld_out,
                                            size_t workspace_bytes)
{
	int n = (S + C - 1) / C;
	for (int i = 0; i < n; i++) { // C is a multiple of 64: each chunk's rows as aligned as the row's
		size_t r0 = (size_t)i * C;
		if (!rows_aligned(out + r0 * ld_out, lse + r0, delta + r0, S, H, hc, D))
			return false;
	}
	for (int j = 0; j < n; j++)
		for (int i = j; i < n; i++) {
			struct attn_shape s = tile_shape(i, j, B, S, H, hc, C, expanded, D, ld_out);
			if (!plan_within(&s, true, workspace_bytes))
				return false;
		}
	return true;
}

extern "C" void attention_cudnn_backward_tiles(float *dq, float *dk_acc, float *dv_acc, int Hd, int hd0, bf16 *grads,
                                               float *delta, void *workspace, const bf16 *q16, const bf16 *k16,
                                               const bf16 *v16, bool expanded, const bf16 *do16, const bf16 *out,
                                               int ld_out, const float *lse, int h0, int hc, int j, int C, int B,
                                               int S, int H, int D)
{
	float scale = (float)(1.0 / sqrt((double)D)), neg_inf = -INFINITY, one = 1.0f;
	size_t part = (size_t)B * hc * C * D, c0 = (size_t)j * C;
	bf16 *dq16 = grads, *dk16 = grads + part, *dv16 = grads + 2 * part;
	size_t kat = expanded ? 0 : ((size_t)h0 * S + c0) * D;
	int n = (S + C - 1) / C;
	for (int i = j; i < n; i++) {
		struct attn_shape s = tile_shape(i, j, B, S, H, hc, C, expanded, D, ld_out);
		const struct plan *p = plan_for(&s, true); // built by attention_cudnn_tiles_ready
		size_t r0 = (size_t)i * C, qat = ((size_t)h0 * S + r0) * D;
		int64_t uids[] = { UID_Q, UID_K, UID_V, UID_O, UID_DO, UID_STATS, UID_DELTA, UID_DQ, UID_DK, UID_DV,
		                   UID_SCALE, UID_NEG_INF, UID_ONE };
		void *ptrs[] = { (void *)(q16 + qat), (void *)(k16 + kat), (void *)(v16 + kat),
		                 (void *)(out + r0 * ld_out + (size_t)h0 * D), (void *)(do16 + qat),
		                 (void *)(lse + (size_t)h0 * S + r0), delta + (size_t)h0 * S + r0, dq16, dk16, dv16,
		                 &scale, &neg_inf, &one };
		plan_run(p, 13, uids, ptrs, workspace);
		// dq of chunk i sums tiles j = 0..i, dk and dv of chunk j tiles i = j..n-1
		unpack_rows(dq, dq16, B, S, (int)r0, s.S, hc, H, h0, D, j > 0);
		unpack_rows(dk_acc, dk16, B, S, (int)c0, s.Sk, hc, Hd, hd0, D, i > j);
		unpack_rows(dv_acc, dv16, B, S, (int)c0, s.Sk, hc, Hd, hd0, D, i > j);
		stats.tile_calls++;
	}
}

// ---------------------------------------------------------------------------
// Packed rows: one call per document, each a view of its rows in the
// packs (the row's strides, the document's length), so every document
// gets its own causal attention with no mask across documents and no
// padding.  Plans are per document length.

extern "C" struct attention_cudnn_stats attention_cudnn_stats_read(void)
{
	return stats;
}

// The forward of every document; false (nothing run) when a plan does not
// build or wants more workspace than given.
extern "C" bool attention_cudnn_forward_docs(bf16 *out, int ld_out, float *lse, void *workspace,
                                             size_t workspace_bytes, const bf16 *q16, const bf16 *k16,
                                             const bf16 *v16, int S, int H, int G, int D,
                                             const struct attention_doc *docs, int ndocs)
{
	for (int i = 0; i < ndocs; i++) {
		struct attn_shape s = { 1, docs[i].len, S, H, G, H, D, ld_out, docs[i].len, 1, G, S };
		size_t row = (size_t)docs[i].b * S + docs[i].start;
		if (!rows_aligned(out + row * ld_out, lse + (size_t)docs[i].b * H * S + docs[i].start, NULL, S, H, H, D) ||
		    !plan_within(&s, false, workspace_bytes))
			return false;
	}
	float scale = (float)(1.0 / sqrt((double)D)), neg_inf = -INFINITY;
	for (int i = 0; i < ndocs; i++) {
		const struct attention_doc *d = &docs[i];
		struct attn_shape s = { 1, d->len, S, H, G, H, D, ld_out, d->len, 1, G, S };
		const struct plan *p = plan_for(&s, false);
		size_t row = (size_t)d->b * S + d->start;
		int64_t uids[] = { UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG_INF };
		void *ptrs[] = { (void *)(q16 + ((size_t)d->b * H * S + d->start) * D),
		                 (void *)(k16 + ((size_t)d->b * G * S + d->start) * D),
		                 (void *)(v16 + ((size_t)d->b * G * S + d->start) * D), out + row * ld_out,
		                 lse + (size_t)d->b * H * S + d->start, &scale, &neg_inf };
		plan_run(p, 7, uids, ptrs, workspace);
	}
	stats.doc_calls += ndocs;
	return true;
}

// The heads a backward call of a document of len tokens takes: the largest
// divisor of H whose workspace fits and whose three gradients fit grads
// (grads_elems bf16 each); 0 when not even one head does.
static int doc_heads(int len, int H, int D, size_t workspace_bytes, size_t grads_elems)
{
	for (int hc = H; hc >= 1; hc--)
		if (H % hc == 0 && attention_cudnn_workspace_bytes(1, len, hc, D) <= workspace_bytes &&
		    (size_t)hc * len * D <= grads_elems)
			return hc;
	return 0;
}

// The backward of every document into dq_h, dk_h, dv_h (T,H,D) fp32 per
// query head and delta, as attention_cudnn_backward; false (nothing run)
// when a plan does not build or does not fit.
extern "C" bool attention_cudnn_backward_docs(float *dq_h, float *dk_h, float *dv_h, bf16 *grads,
                                              size_t grads_elems, float *delta, void *workspace,
                                              size_t workspace_bytes, const bf16 *q16, const bf16 *kx16,
                                              const bf16 *vx16, const bf16 *do16, const bf16 *out, int ld_out,
                                              const float *lse, int S, int H, int D,
                                              const struct attention_doc *docs, int ndocs)
{
	for (int i = 0; i < ndocs; i++) {
		int hc = doc_heads(docs[i].len, H, D, workspace_bytes, grads_elems);
		struct attn_shape s = { 1, docs[i].len, S, H, H, hc, D, ld_out, docs[i].len, 1, H, S };
		size_t row = (size_t)docs[i].b * S + docs[i].start, hrow = (size_t)docs[i].b * H * S + docs[i].start;
		if (hc == 0 || !rows_aligned(out + row * ld_out, lse + hrow, delta + hrow, S, H, hc, D) ||
		    !plan_within(&s, true, workspace_bytes))
			return false;
	}
	float scale = (float)(1.0 / sqrt((double)D)), neg_inf = -INFINITY, one = 1.0f;
	for (int i = 0; i < ndocs; i++) {
		const struct attention_doc *d = &docs[i];
		int hc = doc_heads(d->len, H, D, workspace_bytes, grads_elems), L = d->len;
		struct attn_shape s = { 1, L, S, H, H, hc, D, ld_out, L, 1, H, S };
		const struct plan *p = plan_for(&s, true);
		size_t part = (size_t)hc * L * D, row = (size_t)d->b * S + d->start;
		bf16 *dq16 = grads, *dk16 = grads + part, *dv16 = grads + 2 * part;
		for (int h0 = 0; h0 < H; h0 += hc) {
			size_t pack = (((size_t)d->b * H + h0) * S + d->start) * D, hrow = ((size_t)d->b * H + h0) * S + d->start;
			int64_t uids[] = { UID_Q, UID_K, UID_V, UID_O, UID_DO, UID_STATS, UID_DELTA, UID_DQ, UID_DK,
			                   UID_DV, UID_SCALE, UID_NEG_INF, UID_ONE };
			void *ptrs[] = { (void *)(q16 + pack), (void *)(kx16 + pack), (void *)(vx16 + pack),
			                 (void *)(out + row * ld_out + (size_t)h0 * D), (void *)(do16 + pack),
			                 (void *)(lse + hrow), delta + hrow, dq16, dk16, dv16, &scale, &neg_inf, &one };
			plan_run(p, 13, uids, ptrs, workspace);
			unpack(dq_h + row * H * D, dq16, 1, L, hc, H, h0, D);
			unpack(dk_h + row * H * D, dk16, 1, L, hc, H, h0, D);
			unpack(dv_h + row * H * D, dv16, 1, L, hc, H, h0, D);
		}
	}
	stats.doc_calls += ndocs;
	return true;
}
