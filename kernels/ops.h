/* kernels/ops.h: the numeric ops of Poros, one interface for two backends.
 *
 * Three tiers hold each op.  kernels/ref/ (ref.h, one file per op family)
 * is the math in double with no rounding of its own: the op tests hold the
 * other two against it, and no tool links it.  kernels/cpu/<op>.c
 * (<op>_cpu) is the rounding contract below in plain C, rounding exactly
 * where CUDA stores bf16: the reference CUDA's bits and tolerances are
 * checked against, and the CPU backend.  kernels/cuda/<op>.cu (<op>_cuda,
 * the same arguments as device pointers, launched on the backend's current
 * compute stream, asynchronous) is the fast path.  The engine calls
 * neither backend directly: it calls through struct poros_ops, filled by
 * the backend.
 *
 * Dimension legend
 *   B batch, S sequence length, T = B*S tokens, C hidden size,
 *   H query heads, G key/value heads (H % G == 0), D head dim,
 *   F intermediate size, V vocabulary, R LoRA rank,
 *   K in features, N out features of a linear layer.
 * Layouts are row-major; shapes in comments, e.g. (T,C).
 *
 * Precision contract: the CPU backend rounds exactly where CUDA stores bf16,
 * so the two agree within bf16 tolerance; every op is deterministic (same
 * inputs and shapes, same bits).  Why, and the attention's formulas:
 * docs/numerics.md.
 *   tensor                                  dtype  rounded
 *   residual stream, q/k/v                  fp32   -
 *   gradients, but dgate and dup            fp32   -
 *   gate, up                                bf16   once, from the GEMM's sum
 *   dgate, dup                              bf16   once, when written
 *   base-GEMM inputs (norm out, attention   bf16   once, when written (RNE)
 *     out, swiglu out, a linear's dout)
 *   base weights (nf4: dequantized first)   bf16   -
 *   GEMM sums                               fp32   -
 *   attention q, k (after RoPE), v, dout    bf16   before each product
 *   attention scores, softmax, lse, dP, dS  fp32   -
 *   attention p (a tile's, unnormalised),   bf16   before p v, P^T dout,
 *     P and dS                                     dS k and dS^T q
 *   attention out                           bf16   once, acc / l
 *   LoRA A, B, u, du, grads, AdamW states   fp32   - (the products of bf16
 *                                                  x and dout are exact)
 * cuDNN's route (attention_cudnn_route): P normalised before bf16; dq, dk,
 * dv bf16 per query head, summed over a group in fp32.  A projection with
 * LoRA: the LoRA term and bias inside the base GEMM's fp32 sum (LoRA
 * extension below), else formed first and the base GEMM adds onto it.
 * Backward ops ADD into gradient outputs marked (+=); the caller zeroes.
 */
#ifndef POROS_OPS_H
#define POROS_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "numerics.h" /* bf16, its rounding, the dropout hash, the split, NF4, AdamW */

/* NF4 code book (numerics.h's POROS_NF4_CODE_INIT), index 0..15. */
extern const float poros_nf4_code[16];

/* LoRA extension: the adapter's terms ride in the base GEMM as E extra
 * columns of its reduction.  An fp32 value splits exactly into three bf16
 * parts, hi = bf16(w), mid = bf16(w - hi), lo = bf16(w - hi - mid)
 * (for |w| >= 2^-100: nearer the subnormals lo loses bits, far below
 * any sum's rounding here); a
 * product of two bf16 values is exact in fp32, so for each rank r the nine
 * products part_i(u) part_j(scale B) (i, j < 3) sum, in the GEMM's fp32
 * accumulator, to u * scale B up to the order of fp32 sums.  Extension
 * column c < 9R holds, on the activation side, part_i of u[t][r] and, on
 * the weight side, part_j of scale*B[n][r] (the product rounded once in
 * fp32, exact for a power-of-two scale), with i = c / (3R), j = (c / R)
 * % 3, r = c % R; column 9R holds 1 and the bias (0 without one); the
 * rest, up to E, are 0 on both sides (numerics.h: lora_ext_put,
 * lora_ext_weight_at).  Forward: [x | ext] (T,K+E) @ [W |
 * Bext]^T = x W^T + scale u B^T + bias in one fp32 sum.  Backward (no
 * dropout): [dout | ext(du)] (T,N+E) @ [W ; Aext] (N+E,K), rows N+c of
 * the weight holding part_j of A[r][k], gives dout W + du A in one sum. */
static inline int lora_ext_cols(int R)
{
	return R > 0 ? (9 * R + 1 + 31) / 32 * 32 : 0;
}

/* Floats a part of `bytes` takes in a scratch, kept 16-byte aligned. */
static inline size_t lora_part_floats(size_t bytes)
{
	return (bytes + 15) / 16 * 4;
}

/* The LoRA ops' scratch for a projection (T,K) -> (T,N) of rank R, in
 * floats: what CUDA's tensor-core products hold at once, the largest of
 * u's (A's three bf16 parts, the masked input, the (T,3R) sums), du's
 * (scale*B's parts, (T,3R)), dB's (u's parts, (N,3R)) and dA's (du's
 * parts, the masked input, (3R,K)), each part rounded up to 16 bytes, and
 * at least T*K.  CUDA requires a scratch this large; the CPU reads none. */
static inline size_t lora_scratch_floats(int T, int K, int N, int R)
{
	size_t t = (size_t)(T > 0 ? T : 0), k = (size_t)(K > 0 ? K : 0), n = (size_t)(N > 0 ? N : 0);
	size_t r3 = 3 * (size_t)(R > 0 ? R : 0), xm = lora_part_floats(t * k * 2), most = t * k;
	size_t need[4] = {
		lora_part_floats(r3 * k * 2) + xm + lora_part_floats(t * r3 * 4), /* u */
		lora_part_floats(n * r3 * 2) + lora_part_floats(t * r3 * 4),      /* du */
		lora_part_floats(t * r3 * 2) + lora_part_floats(n * r3 * 4),      /* dB */
		lora_part_floats(t * r3 * 2) + xm + lora_part_floats(r3 * k * 4), /* dA */
	};
	for (int i = 0; i < 4; i++)
		if (need[i] > most)
			most = need[i];
	return most;
}

/* The LoRA ops' arguments, by name (see lora_forward and lora_backward in
 * the list below for what each computes).  The fields under "hints" change
 * only how a backend computes, never the result: the CPU reads none of
 * them; CUDA uses them to run the long sums on tensor cores. */
struct lora_fwd_args {
	float *out;      /* (T,N) scale * u B^T, written; or NULL */
	float *u;        /* (T,R) xd A^T, written (saved for backward) */
	bf16 *ext;       /* (T,E) u's extension parts, rows ld_in apart; or NULL */
	const bf16 *in;  /* (T,K), rows ld_in apart */
	int ld_in;
	const float *A;  /* (R,K) */
	const float *B;  /* (N,R) */
	float scale, dropout_p;
	uint64_t dropout_seed;
	int T, K, N, R;
	float *scratch;  /* lora_scratch_floats(T,K,N,R) floats (CUDA; the CPU may
	                  * get NULL), contents undefined afterwards */
	/* hints */
	const bf16 *A3;  /* NULL, or A's three parts (3R rows, ld_a3 apart) */
	int ld_a3;
};

struct lora_bwd_args {
	float *din;        /* (T,K) du A through the mask, (+)=; or NULL */
	float *dA;         /* (R,K) += */
	float *dB;         /* (N,R) += */
	float *du;         /* (T,R) written */
	bf16 *ext;         /* (T,E) du's extension parts, rows ld_dout apart; or NULL */
	const bf16 *dout;  /* (T,N), rows ld_dout apart */
	int ld_dout;
	const bf16 *in;    /* (T,K), rows ld_in apart, as in forward */
	int ld_in;
	const float *u;    /* (T,R) from forward */
	const float *A;    /* (R,K) */
	const float *B;    /* (N,R) */
	float scale, dropout_p;
	uint64_t dropout_seed;
	int T, K, N, R;
	int accumulate;    /* din += rather than = */
	/* A group of segs > 1 micro-batches of T / segs rows each: du, and din
	 * or ext, over all T rows; dA and dB a micro-batch at a time, the i-th
	 * into dA + i * seg_stride and dB + i * seg_stride (floats), each as a
	 * call over its rows alone adds it (dropout_p must be 0: a mask is a
	 * micro-batch's).  0 or 1: one, into dA and dB. */
	int segs;
	long seg_stride;
	float *scratch;    /* as in lora_fwd_args */
	/* hints */
	const bf16 *B3;    /* NULL, or scale*B's three parts ((N,3R), rows ld_b3 apart) */
	int ld_b3;
};

#define POROS_OPS_LIST(X) \
/* out (T,C) = wte[tokens[t]] as fp32; tokens (T), wte (V,C) */ \
X(void, embedding_forward, (float *out, const int32_t *tokens, const bf16 *wte, int T, int C)) \
/* RMSNorm over rows: y = w * x / sqrt(mean(x^2) + eps) in fp32.  out_f32 \
 * and/or out_bf16 (T,C) may be NULL, rows ld_out (>= C) apart in both; \
 * in is (T,C) contiguous; rstd (T) is saved for backward. */ \
X(void, rmsnorm_forward, (float *out_f32, bf16 *out_bf16, int ld_out, float *rstd, const float *in, const bf16 *weight, float eps, int T, int C)) \
/* din (T,C) += d/d in, given dout (T,C), in, weight, rstd */ \
X(void, rmsnorm_backward, (float *din, const float *dout, const float *in, const bf16 *weight, const float *rstd, int T, int C)) \
/* out (T,N) = in (T,K) @ weight^T (weight (N,K)) + bias (N, may be NULL); \
 * accumulate != 0: out = (out + in @ weight^T) + bias.  Rows of in are \
 * ld_in (>= K) elements apart, rows of weight ld_w (>= K); out is (T,N) \
 * contiguous.  A LoRA extension (below) is just a larger K. */ \
X(void, matmul_forward, (float *out, const bf16 *in, int ld_in, const bf16 *weight, int ld_w, const bf16 *bias, int T, int K, int N, int accumulate)) \
/* out (T,N) bf16 = bf16(in (T,K) @ weight^T): matmul_forward's fp32 sum \
 * (no bias, written) rounded once to nearest even; rows of in ld_in (>= K) \
 * apart, of weight ld_w (>= K); out (T,N) contiguous.  The gate and up \
 * projections, whose only reader (swiglu) takes bf16. */ \
X(void, matmul_forward_bf16, (bf16 *out, const bf16 *in, int ld_in, const bf16 *weight, int ld_w, int T, int K, int N)) \
/* din (T,K) = dout (T,N) @ weight (N,K); accumulate != 0 adds instead. \
 * Rows of dout are ld_dout (>= N) apart, rows of weight ld_w (>= K); din \
 * is (T,K) contiguous. */ \
X(void, matmul_backward_input, (float *din, const bf16 *dout, int ld_dout, const bf16 *weight, int ld_w, int T, int K, int N, int accumulate)) \
/* LoRA (PEFT), struct lora_fwd_args' fields: xd = dropout_p ? x * keep / (1-p) : x (keep from \
 * poros_dropout_keep(seed, t*K+k, p)); u (T,R) = xd @ A^T, A (R,K), \
 * written and saved for backward; in (T,K) rows ld_in apart.  Then one of: \
 *  - out != NULL: out (T,N) = scale * u @ B^T, B (N,R), written (contiguous); \
 *    the base GEMM (matmul_forward, accumulate) adds onto it; \
 *  - ext != NULL: u's parts go into the extension columns ext (T,E) (rows \
 *    ld_in apart; ext = in + K in the engine) for the base GEMM to sum, \
 *    see "LoRA extension" below; \
 *  - both NULL: u alone. \
 * scratch: lora_scratch_floats(T,K,N,R) floats for the split operands \
 * and their sums, which CUDA requires (it runs the long sums on tensor \
 * cores; contents are undefined afterwards) and the CPU ignores (NULL \
 * there is fine).  The result is deterministic.  A3: NULL, or A's three bf16 parts as \
 * lora_weight_ext leaves them in rows N..N+3R-1 of the weight (hi, mid, \
 * lo blocks of R rows, rows ld_a3 apart), which a backend may read rather \
 * than split A again (the CPU sums A itself: same values). */ \
X(void, lora_forward, (const struct lora_fwd_args *a)) \
/* struct lora_bwd_args' fields: given dout (T,N) bf16, rows ld_dout \
 * apart, and in as in lora_forward: \
 * dB (N,R) += scale * dout^T @ u; du (T,R) = scale * dout @ B (written); \
 * dA (R,K) += du^T @ xd; then one of: \
 *  - din != NULL: din (T,K) = du @ A through the dropout mask, or += when \
 *    accumulate; \
 *  - ext != NULL (dropout_p must be 0: the mask cannot ride in a GEMM): \
 *    du's parts go into the extension columns ext (T,E) (rows ld_dout \
 *    apart; dout + N in the engine) for the base backward GEMM to sum; \
 *  - both NULL: no input gradient. \
 * scratch as in lora_forward.  B3: NULL, or scale*B's three bf16 parts \
 * side by side ((N,3R), rows ld_b3 apart) as lora_weight_ext leaves them \
 * at columns K..K+3R-1 of the weight; a backend may then form du as \
 * dout @ (scale*B), the product rounded once in fp32, rather than split B \
 * (the CPU sums B itself). */ \
X(void, lora_backward, (const struct lora_bwd_args *a)) \
/* The weight side of the LoRA extension of a base weight W (N,K), rows \
 * ld_w (>= K + E) apart in a buffer of N + E rows: columns K..K+E-1 of \
 * rows 0..N-1 get scale*B's parts, bias[n] (0 when bias is NULL) and \
 * zeros; rows N..N+E-1, columns 0..K-1, get A's parts and zeros.  The \
 * corner (rows >= N, columns >= K) is not touched (no GEMM reads it). */ \
X(void, lora_weight_ext, (bf16 *w, int ld_w, const float *A, const float *B, const bf16 *bias, float scale, int K, int N, int R)) \
/* Rotary embedding, HF rotate_half layout, in place on x (T,nh,D); \
 * cos, sin (S, D/2).  pos (T) int32, device memory on CUDA: the position \
 * of token t (its angle index), or NULL for t % S.  A position outside \
 * [0, t % S] is clamped into it (see attention_forward). */ \
X(void, rope_forward, (float *x, const float *cos, const float *sin, const int32_t *pos, int B, int S, int nh, int D)) \
/* Inverse rotation of the gradient, in place on dx (T,nh,D). */ \
X(void, rope_backward, (float *dx, const float *cos, const float *sin, const int32_t *pos, int B, int S, int nh, int D)) \
/* Causal GQA attention with document masks, softmax scale 1/sqrt(D). \
 * q (T,H,D), k, v (T,G,D); out (T,H*D) bf16, rows ld_out (>= H*D) \
 * apart; lse (B,H,S) log-sum-exp of the scaled scores, saved. \
 * pos (T) int32, device memory on CUDA, or NULL for pos[t] = t % S: \
 * token i of a row attends key j of the same row iff i - pos[i] <= j <= \
 * i, so a row packed with documents gives each its own causal attention \
 * when pos counts from 0 at each document's first token.  pos[i] is \
 * clamped into [0, i] (a device array cannot be checked without a \
 * synchronisation; the clamp keeps a bad one inside the row). \
 * Inside, bf16 products with fp32 accumulation (the contract above): \
 * scores = scale * bf16(q) . bf16(k), online softmax over key tiles in \
 * fp32, out = bf16(acc / l).  Masked keys get p = 0 exactly.  The \
 * exponential is the backend's (the CPU's expf; CUDA's 2^x unit on \
 * log2(e)-scaled scores, a few fp32 ulps apart). \
 * scratch: attention_scratch_floats(B,S,H,G,D) floats, O(B*S*H*D). \
 * rope_cos, rope_sin (S, D/2), or both NULL: q and k are given before \
 * the rotary embedding and the op rotates them as rope_forward does \
 * (numerics.h's pair, the same fp32 values, pos as above) on their way \
 * to bf16, so a caller needs no rotated copy in memory; NULL takes q and \
 * k as given. */ \
X(void, attention_forward, (bf16 *out, int ld_out, float *lse, float *scratch, const float *q, const float *k, const float *v, const float *rope_cos, const float *rope_sin, const int32_t *pos, int B, int S, int H, int G, int D)) \
/* dq (T,H,D), dk, dv (T,G,D) written (not accumulated) from dout (T,H*D) \
 * and the forward's out (T,H*D) bf16, rows ld_out apart, and lse (exactly \
 * what the forward was given and wrote), under the same mask (pos as in \
 * forward): P = exp(scale bf16(q).bf16(k) - lse) in fp32, dP = bf16(dout) \
 * @ bf16(v)^T in fp32, delta_i (row i, head h) = sum over d < D of \
 * bf16(dout[i,h,d]) out[i,h,d] in fp32 (which is rowsum(P dP) up to \
 * rounding, dout . (P V) = dout . out, as FlashAttention computes it), \
 * dS = P (dP - delta) in fp32; dv = sum_h bf16(P)^T bf16(dout), dq = \
 * scale bf16(dS) @ bf16(k), dk = scale sum_h bf16(dS)^T bf16(q), all \
 * accumulated in fp32.  rope_cos, rope_sin as in forward: q and k are \
 * rotated on their way to bf16, and dq, dk are the gradients at q and k \
 * as given: those at the rotated ones, turned back as rope_backward \
 * does (the same fp32 values, then numerics.h's pair). */ \
X(void, attention_backward, (float *dq, float *dk, float *dv, float *scratch, const float *dout, const bf16 *out, int ld_out, const float *q, const float *k, const float *v, const float *rope_cos, const float *rope_sin, const float *lse, const int32_t *pos, int B, int S, int H, int G, int D)) \
/* out (T,F) = silu(gate) * up, computed in fp32 and rounded to bf16, rows \
 * ld_out (>= F) apart; gate, up (T,F) bf16 contiguous */ \
X(void, swiglu_forward, (bf16 *out, int ld_out, const bf16 *gate, const bf16 *up, int T, int F)) \
/* dgate, dup (T,F) written from dout (T,F) fp32 and gate, up (T,F) bf16, \
 * computed in fp32 and rounded to bf16, rows ld_d (>= F) apart in both: \
 * their only readers, the gate and up projections' backward, read the \
 * upstream gradient in bf16.  dout, gate, up contiguous. */ \
X(void, swiglu_backward, (bf16 *dgate, bf16 *dup, int ld_d, const float *dout, const bf16 *gate, const bf16 *up, int T, int F)) \
/* Fused softmax cross-entropy over logits (T,V): losses[t] = -log p[t][target]; \
 * dlogits (T,V) = (softmax - onehot) * dloss.  targets[t] < 0: ignored row, \
 * loss 0 and zero gradient. */ \
X(void, crossentropy_forward_backward, (bf16 *dlogits, float *losses, const float *logits, const int32_t *targets, float dloss, int T, int V)) \
/* a (n) += b (n) */ \
X(void, add_inplace, (float *a, const float *b, long n)) \
/* out (rows,cols) = bf16(in (rows,cols)); in contiguous, rows of out \
 * ld_out (>= cols) apart */ \
X(void, cast_f32_to_bf16, (bf16 *out, int ld_out, const float *in, long rows, int cols)) \
/* NF4 -> bf16: out (rows,cols), rows ld_out (>= cols) apart; packed \
 * (rows*cols/2) two codes a byte in row-major element order, first \
 * element in the high nibble; absmax (rows*cols/64) fp32, blocks of 64 \
 * in that order; cols % 64 == 0, or ld_out == cols (one flat run) and \
 * rows*cols % 64 == 0. */ \
X(void, nf4_dequantize, (bf16 *out, int ld_out, const uint8_t *packed, const float *absmax, long rows, int cols)) \
/* out[0] = sum of x^2 over n, deterministic order. */ \
X(void, sumsq, (float *out, float *scratch, const float *x, long n)) \
/* AdamW with bias correction (step t >= 1), decoupled weight decay; \
 * the gradient is multiplied by grad_scale first (clipping). */ \
X(void, adamw_update, (float *param, const float *grad, float *m, float *v, long n, float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t))

/* Scratch sizes (in floats) some ops need; same on both backends (the
 * attention's and the LoRA ops' are static inline, above and below). */
size_t sumsq_scratch_floats(long n);

/* The attention's tiles: ATTN_KEY_TILE keys per online-softmax step
 * (both backends, so they round at the same places); the CUDA kernels
 * also take query tiles of 64 rows and, in backward's key pass, 32. */
#define ATTN_KEY_TILE 64
#define ATTN_ROW_GROUP 32

/* The head dimension the CUDA kernels compute with: D padded with zeros to
 * 64 or 128 (larger D: to 16, which only the CPU runs). */
static inline int attention_dpad(int D)
{
	return D <= 64 ? 64 : D <= 128 ? 128 : (D + 15) / 16 * 16;
}

/* The CUDA backend's cuDNN route (kernels/cuda/attention_cudnn.cu): taken
 * for one-document rows (pos NULL) of at least ATTN_CUDNN_MIN_SEQ tokens
 * when D fills the padded width (64, 128), as attention_cudnn_route says.
 * Its backward runs attention_cudnn_heads query heads a call (the largest
 * divisor of H whose bf16 dS workspace, B x heads x S^2, fits
 * attention_cudnn_workspace_cap() and ATTN_CUDNN_DS_MAX_BYTES, or one head
 * up to twice the cap; 0: too long a row, the kernels run the backward,
 * or with POROS_CUDNN_TILE cuDNN in tiles, attention_cudnn_tiles below).
 * It needs, after the attention scratch (attention_scratch_floats, below):
 * with G < H, k and v expanded to the H query heads (bf16); one call's dq,
 * dk, dv per query head (bf16, cuDNN's output); and cuDNN's workspace
 * (attention_cudnn_workspace_bytes). */
#define ATTN_CUDNN_WORKSPACE_CAP ((size_t)1 << 30)

/* POROS_CUDNN_WORKSPACE=MiB (poros-train refuses values outside 64 to
 * 65536) replaces ATTN_CUDNN_WORKSPACE_CAP: more heads a backward call,
 * up to ATTN_CUDNN_DS_MAX_BYTES, for that much more VRAM, which the plan
 * counts.  The heads a call can change the backward's rounding, as
 * POROS_ATTENTION's route does; blockwise and resident take the same. */
static inline size_t attention_cudnn_workspace_cap(void)
{
	const char *env = getenv("POROS_CUDNN_WORKSPACE");
	long mib = env && *env ? atol(env) : 0;
	return mib >= 1 ? (size_t)mib << 20 : ATTN_CUDNN_WORKSPACE_CAP;
}
/* The largest dS workspace a cuDNN backward call takes: 2^31 bytes (2^30
 * bf16 elements).  Calls past it were wrong, other bits run to run: 64
 * heads of 8192 tokens (2^33 bytes) on the H200, 28 (3.8e9 bytes) on the
 * H100; 16 (2^31) were right (docs/bench/runs/2026-12-05-394f345).  Those
 * calls also widened more than 2^24 elements of cuDNN's gradients, past
 * the grid of attention_unpack_kernel, which had no grid-stride loop
 * until 2026-12-05: likely the whole cause.  The bound stays until a run
 * shows such calls right with the loop. */
#ifndef ATTN_CUDNN_DS_MAX_BYTES /* a probe build may lift it (-D), to re-measure */
#define ATTN_CUDNN_DS_MAX_BYTES ((size_t)1 << 31)
#endif
/* The largest (B,H,S,D) pack cuDNN runs the backward of (see attention_cudnn_heads). */
#ifndef ATTN_CUDNN_BACKWARD_MAX_PACK
#define ATTN_CUDNN_BACKWARD_MAX_PACK ((size_t)1 << 27)
#endif

/* Packed rows take the route one cuDNN call per document when the engine
 * mirrors the positions on the host (backend.h's pos_mirror), a call has
 * at most ATTN_CUDNN_MAX_DOCS documents and every one is at least
 * ATTN_CUDNN_DOC_MIN tokens long and a multiple of ATTN_CUDNN_DOC_QUANTUM;
 * otherwise the kernels.  Each document length is a plan of its own (a
 * plan build costs about 0.3 s), so the quantum bounds the plans a run
 * builds to S / quantum; below the floor the kernels are faster. */
#define ATTN_CUDNN_MAX_DOCS 64
#define ATTN_CUDNN_DOC_MIN 1024
#define ATTN_CUDNN_DOC_QUANTUM 256

/* POROS_CUDNN_DOC_MIN=N (1 <= N, poros-train refuses other values) moves
 * the floor and lifts the quantum, for tests that reach the route at small
 * sizes and any length. */
static inline int attention_cudnn_doc_min(void)
{
	const char *env = getenv("POROS_CUDNN_DOC_MIN");
	int n = env && *env ? atoi(env) : 0;
	return n >= 1 ? n : ATTN_CUDNN_DOC_MIN;
}

static inline int attention_cudnn_doc_quantum(void)
{
	const char *env = getenv("POROS_CUDNN_DOC_MIN");
	return env && *env ? 1 : ATTN_CUDNN_DOC_QUANTUM;
}

/* Rows shorter than ATTN_CUDNN_MIN_SEQ take the kernels, which are faster
 * there and keep a sequence's bits at any batch, so a micro-batch group's
 * attention is one call (backend.h, attention_batch_invariant): at 512
 * tokens, Qwen2.5-32B nf4 x 8 micro-batches in groups of 4 took 1.391 /
 * 1.398 s a step against cuDNN's 1.413 / 1.419 / 1.423 on the H200
 * (2026-12-05, docs/perf-notes.md).  POROS_ATTENTION=cudnn takes cuDNN at
 * any length, =mma the kernels at any. */
#define ATTN_CUDNN_MIN_SEQ 1024

static inline int attention_cudnn_route(int D, int S)
{
	const char *env = getenv("POROS_ATTENTION");
	if (!(D == 64 || D == 128) || (env && strcmp(env, "mma") == 0))
		return 0;
	return S >= ATTN_CUDNN_MIN_SEQ || (env && strcmp(env, "cudnn") == 0);
}

static inline size_t attention_cudnn_ds_bytes(int B, int S, int heads)
{
	size_t s64 = ((size_t)S + 63) / 64 * 64;
	return (size_t)B * heads * s64 * s64 * 2;
}

static inline int attention_cudnn_heads(int B, int S, int H, int D)
{
	size_t cap = attention_cudnn_workspace_cap();

	if (attention_cudnn_ds_bytes(B, S, 1) > 2 * cap || attention_cudnn_ds_bytes(B, S, 1) > ATTN_CUDNN_DS_MAX_BYTES)
		return 0;
	/* beyond 2^27 elements a (B,H,S,D) pack the backward was wrong (dq, dk
	 * off by their own size; the kernels and the forward right):
	 * docs/perf-notes.md, "Decisions that stand".  2^27 bf16 is where the
	 * expansion of k and v to the query heads (attention_expand_kernel,
	 * 8 a thread) outgrew its capped grid before it had a grid-stride
	 * loop (2026-12-05): likely the cause, not cuDNN; kept until measured */
	if ((size_t)B * H * S * D > ATTN_CUDNN_BACKWARD_MAX_PACK)
		return 0;
	for (int hc = H; hc > 1; hc--)
		if (H % hc == 0 && attention_cudnn_ds_bytes(B, S, hc) <= cap &&
		    attention_cudnn_ds_bytes(B, S, hc) <= ATTN_CUDNN_DS_MAX_BYTES)
			return hc;
	return 1;
}

/* The kernels' backward of a long row with G < H keeps the per-head dk and
 * dv (fp32, before their group sum) of one key/value group's H/G heads at
 * a time instead of all H: each group's sum is taken before the next group
 * runs, heads ascending as before, so the bits are the same, and at 7B
 * heads the two buffers take 7 KB a token instead of 28.  Taken when B*S
 * is at least attention_grouped_min_tokens() and the cuDNN backward, which
 * needs every head's, does not take the call (POROS_ATTN_GROUPED_MIN=N
 * moves the floor, for tests that reach it at small sizes). */
#define ATTN_GROUPED_MIN_TOKENS 32768

static inline long attention_grouped_min_tokens(void)
{
	const char *env = getenv("POROS_ATTN_GROUPED_MIN");
	long n = env && *env ? atol(env) : 0;
	return n >= 1 ? n : ATTN_GROUPED_MIN_TOKENS;
}

/* Rows too long for one cuDNN backward call (attention_cudnn_heads 0: one
 * head's dS over the bounds, or the pack over ATTN_CUDNN_BACKWARD_MAX_PACK)
 * run it in tiles: query chunks i and key chunks j <= i of C tokens (the
 * last chunk shorter), a call per tile on hc query heads, causal on the
 * diagonal tiles and unmasked below it, with the whole row's lse, so each
 * tile's P is the row's.  dq of chunk i sums its tiles j = 0..i, dk and
 * dv of chunk j the tiles i = j..n-1, each in fp32 in that order from
 * cuDNN's bf16 (numerics.md: one bf16 rounding a tile).  hc divides H/G
 * (a call holds heads of one key/value group; with G == H, H), the
 * largest whose views (hc heads of the row's packs, B x hc x S x D) stay
 * within ATTN_CUDNN_BACKWARD_MAX_PACK and whose tile of at least 1024
 * tokens fits the workspace cap and ATTN_CUDNN_DS_MAX_BYTES; C, the
 * largest multiple of 64 whose dS (B x hc x C^2 bf16) fits them, then
 * evened out over the chunks.  With G < H, k and v of a key chunk are
 * expanded to the call's heads (B x hc x C x D each).  Packed rows keep
 * the kernels' backward there.
 * Until a GPU run shows the tiles right (built 2026-12-05 without a
 * device), they run only when asked: POROS_CUDNN_TILE=auto as above,
 * POROS_CUDNN_TILE=N (a multiple of 64) tiles of N tokens for every row
 * longer than N on the route, for tests that reach them at small sizes;
 * unset, long rows keep the kernels' backward.  poros-train refuses other
 * values. */
struct attention_cudnn_tiling {
	int hc; /* query heads a call; 0: no tiles */
	int C;  /* tokens a chunk (the last may be shorter) */
};

/* POROS_CUDNN_TILE: N (tokens), -1 (auto) or 0 (unset: no tiles). */
static inline int attention_cudnn_tile_env(void)
{
	const char *env = getenv("POROS_CUDNN_TILE");
	int n = env && *env ? atoi(env) : 0;
	if (env && strcmp(env, "auto") == 0)
		return -1;
	return n >= 64 && n % 64 == 0 ? n : 0;
}

/* The largest multiple of 64 whose (B, hc, C, C) bf16 dS fits limit bytes. */
static inline int attention_cudnn_tile_max(int B, int hc, size_t limit)
{
	size_t per = (size_t)B * hc * 2, c = 64;
	while ((c + 64) * (c + 64) * per <= limit)
		c += 64;
	return c * c * per <= limit ? (int)c : 0;
}

static inline struct attention_cudnn_tiling attention_cudnn_tiles(int B, int S, int H, int G, int D)
{
	struct attention_cudnn_tiling t = { 0, 0 };
	int env = attention_cudnn_tile_env(), forced = env > 0 ? env : 0, span = G == H ? H : H / G, cmax = 0;
	size_t limit = attention_cudnn_workspace_cap();

	if (env == 0 || !attention_cudnn_route(D, S) || G <= 0 || H % G)
		return t;
	if (forced ? S <= forced : attention_cudnn_heads(B, S, H, D) > 0)
		return t;
	if (limit > ATTN_CUDNN_DS_MAX_BYTES)
		limit = ATTN_CUDNN_DS_MAX_BYTES;
	for (int hc = span; hc >= 1 && !t.hc; hc--) {
		if (span % hc || (size_t)B * hc * S * D > ATTN_CUDNN_BACKWARD_MAX_PACK)
			continue;
		cmax = forced ? forced : attention_cudnn_tile_max(B, hc, limit);
		if (cmax >= 1024 || (cmax >= 64 && (forced || hc == 1)))
			t.hc = hc;
	}
	if (!t.hc)
		return t;
	int n = (S + cmax - 1) / cmax;
	t.C = ((S + n - 1) / n + 63) / 64 * 64;
	return t;
}

/* The query heads the per-head dk, dv buffers hold: H, H/G (grouped) or 0 (G == H: none). */
static inline int attention_dkdv_heads(int B, int S, int H, int G, int D)
{
	if (G == H)
		return 0;
	if (attention_cudnn_tiles(B, S, H, G, D).hc > 0)
		return H / G; /* a group's heads at a time, as the grouped kernels */
	if ((long)B * S >= attention_grouped_min_tokens() &&
	    !(attention_cudnn_route(D, S) && attention_cudnn_heads(B, S, H, D) > 0))
		return H / G;
	return H;
}

/* The attention scratch, O(B*S*H*D) floats, carved by both backends with
 * attention_scratch_at (kernels/cuda/attention.cu says what the CUDA
 * kernels keep where): bf16 copies of q, dout (per query head) and k, v
 * (per key/value head), each head's rows of attention_dpad(D) elements;
 * delta (B,H,S) fp32; the earliest key of every group of ATTN_ROW_GROUP
 * query rows (int32); and, with G < H, the per-query-head dk and dv
 * (T,attention_dkdv_heads,D) fp32 before their group sum.  In floats, each part rounded up to 4 (16
 * bytes).  The CPU uses the copies (at D elements a row, which fit)
 * and delta. */
struct attention_parts {
	size_t q16;   /* (B,H,S,Dp) bf16: q, and dout in backward (twice) */
	size_t kv16;  /* (B,G,S,Dp) bf16: k, and v (twice) */
	size_t delta; /* (B,H,S) fp32 */
	size_t lo;    /* (B, ceil(S/32)) int32 */
	size_t heads; /* (T,attention_dkdv_heads,D) fp32, 0 when G == H: dk_h, dv_h (twice) */
};

static inline size_t attention_round4(size_t floats)
{
	return (floats + 3) / 4 * 4;
}

static inline struct attention_parts attention_parts_of(int B, int S, int H, int G, int D)
{
	struct attention_parts p;
	size_t dp = (size_t)attention_dpad(D);
	p.q16 = attention_round4(((size_t)B * H * S * dp + 1) / 2);
	p.kv16 = attention_round4(((size_t)B * G * S * dp + 1) / 2);
	p.delta = attention_round4((size_t)B * H * S);
	p.lo = attention_round4((size_t)B * ((S + ATTN_ROW_GROUP - 1) / ATTN_ROW_GROUP));
	p.heads = attention_round4((size_t)B * S * attention_dkdv_heads(B, S, H, G, D) * D);
	return p;
}

/* The whole scratch: 2 q16 + 2 kv16 + delta + lo + 2 heads (what the plan
 * carves for it, tools/poros-train/plan.c). */
static inline size_t attention_scratch_floats(int B, int S, int H, int G, int D)
{
	struct attention_parts p = attention_parts_of(B, S, H, G, D);
	return 2 * p.q16 + 2 * p.kv16 + p.delta + p.lo + 2 * p.heads;
}

/* The parts inside a scratch of attention_scratch_floats, in this order. */
struct attention_scratch {
	bf16 *q16, *dout16; /* (B,H,S,Dp) each */
	bf16 *k16, *v16;    /* (B,G,S,Dp) each */
	float *delta;       /* (B,H,S) */
	int32_t *first;     /* (B, ceil(S/32)) */
	float *dk_h, *dv_h; /* (T,attention_dkdv_heads,D) each; NULL when G == H */
};

static inline struct attention_scratch attention_scratch_at(float *scratch, int B, int S, int H, int G, int D)
{
	struct attention_parts p = attention_parts_of(B, S, H, G, D);
	struct attention_scratch a;
	a.q16 = (bf16 *)scratch;
	a.dout16 = (bf16 *)(scratch + p.q16);
	a.k16 = (bf16 *)(scratch + 2 * p.q16);
	a.v16 = (bf16 *)(scratch + 2 * p.q16 + p.kv16);
	a.delta = scratch + 2 * p.q16 + 2 * p.kv16;
	a.first = (int32_t *)(a.delta + p.delta);
	a.dk_h = G == H ? NULL : a.delta + p.delta + p.lo;
	a.dv_h = G == H ? NULL : a.delta + p.delta + p.lo + p.heads;
	return a;
}


/* dS, an fp32 (B, heads, S, D) accumulator and 64 KiB: more than cuDNN
 * 9.14-9.19 ask for (checked at run time; a plan that asks for more runs
 * the kernels instead, and says so). */
static inline size_t attention_cudnn_workspace_bytes(int B, int S, int heads, int D)
{
	size_t s64 = ((size_t)S + 63) / 64 * 64;
	return attention_cudnn_ds_bytes(B, S, heads) + (size_t)B * heads * s64 * D * 4 + 65536;
}

struct attention_cudnn_parts {
	size_t kv;        /* (B,H,S,D) bf16, with G < H: k and v expanded (twice); tiles: (B,hc,C,D) */
	size_t grads;     /* (B,heads,S,D) bf16: one call's dq, dk, dv per query head (three times); tiles: (B,hc,C,D) */
	size_t workspace; /* cuDNN's */
};

static inline struct attention_cudnn_parts attention_cudnn_parts_of(int B, int S, int H, int G, int D)
{
	struct attention_cudnn_parts p = { 0, 0, 0 };
	struct attention_cudnn_tiling t;
	int hc;
	if (!attention_cudnn_route(D, S))
		return p;
	p.workspace = attention_round4(65536 / 4); /* the forward's */
	if ((t = attention_cudnn_tiles(B, S, H, G, D)).hc > 0) {
		p.kv = G == H ? 0 : attention_round4(((size_t)B * t.hc * t.C * D + 1) / 2);
		p.grads = attention_round4(((size_t)B * t.hc * t.C * D + 1) / 2);
		p.workspace = attention_round4((attention_cudnn_workspace_bytes(B, t.C, t.hc, D) + 3) / 4);
		return p;
	}
	if ((hc = attention_cudnn_heads(B, S, H, D)) == 0)
		return p;
	p.kv = G == H ? 0 : attention_round4(((size_t)B * H * S * D + 1) / 2);
	p.grads = attention_round4(((size_t)B * hc * S * D + 1) / 2);
	p.workspace = attention_round4((attention_cudnn_workspace_bytes(B, S, hc, D) + 3) / 4);
	return p;
}

/* What the cuDNN route has done in this process (the CUDA backend only;
 * bench_attention and test_ops_cuda read it): plans built and their
 * time, per-document calls, long rows' tile calls. */
struct attention_cudnn_stats {
	long plans_built, doc_calls, tile_calls;
	double build_ms;
};
struct attention_cudnn_stats attention_cudnn_stats_read(void);

/* The CUDA backend's whole attention scratch: the above, then the route's. */
static inline size_t attention_scratch_floats_cuda(int B, int S, int H, int G, int D)
{
	struct attention_cudnn_parts p = attention_cudnn_parts_of(B, S, H, G, D);
	return attention_scratch_floats(B, S, H, G, D) + 2 * p.kv + 3 * p.grads + p.workspace;
}

#define POROS_DECLARE_CPU(ret, name, args) ret name##_cpu args;
#define POROS_DECLARE_CUDA(ret, name, args) ret name##_cuda args;
POROS_OPS_LIST(POROS_DECLARE_CPU)
POROS_OPS_LIST(POROS_DECLARE_CUDA)

#define POROS_OPS_MEMBER(ret, name, args) ret (*name) args;
struct poros_ops {
	POROS_OPS_LIST(POROS_OPS_MEMBER)
};

extern const struct poros_ops poros_cpu_ops;
extern const struct poros_ops poros_cuda_ops; /* only when built with CUDA */

#endif
