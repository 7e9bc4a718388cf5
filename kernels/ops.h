/* kernels/ops.h: the numeric ops of Poros, one interface for two backends.
 *
 * kernels/cpu/<op>.c implements <op>_cpu; kernels/cuda/<op>.cu implements
 * <op>_cuda with the same arguments (device pointers, launched on the
 * backend's current compute stream, asynchronous).  The engine never calls
 * either directly: it calls through struct poros_ops, filled by the backend.
 *
 * Dimension legend
 *   B batch, S sequence length, T = B*S tokens, C hidden size,
 *   H query heads, G key/value heads (H % G == 0), D head dim,
 *   F intermediate size, V vocabulary, R LoRA rank,
 *   K in features, N out features of a linear layer.
 * Layouts are row-major; shapes in comments, e.g. (T,C).
 *
 * Precision contract (the CPU backend rounds exactly where CUDA stores bf16,
 * so the two agree within bf16 tolerance and each is deterministic):
 *   - residual stream, q/k/v, gate/up, all gradients: fp32, but for the
 *     gradients of gate and up, stored in bf16 (what their readers take)
 *   - inputs of base-weight GEMMs (norm out, attention out, swiglu out,
 *     upstream gradients of a linear): bf16, round-to-nearest-even
 *   - base weights: bf16 (nf4 is dequantized to bf16 before use)
 *   - GEMMs accumulate in fp32
 *   - attention: q, k, v (and the upstream gradient dout in backward) are
 *     rounded to bf16 before every product that reads them; the scores
 *     scale * q.k accumulate in fp32 and the softmax runs in fp32 (lse kept
 *     in fp32); the probabilities are rounded to bf16 (P16) for out = P16 v
 *     and dv = sum_h P16^T dout; in backward P is rebuilt in fp32 from lse,
 *     dP = dout v^T accumulates in fp32, delta_i = sum_j P_ij dP_ij and
 *     dS = P (dP - delta) are fp32, and dS is rounded to bf16 (dS16) for
 *     dq = scale dS16 k and dk = scale sum_h dS16^T q
 *   - LoRA A, B, their grads and AdamW states: fp32; the LoRA products are
 *     fp32 sums of exact products (the bf16 input x, the bf16 upstream
 *     gradient, fp32 A, B, u and du)
 *   - a projection with LoRA: the LoRA term scale * u B^T is formed first
 *     and the base GEMM adds onto it (out = (lora + x W^T) + bias); in
 *     backward the LoRA input gradient du A is formed (or added) first and
 *     the base GEMM adds onto it.  The LoRA backward reads the upstream
 *     gradient rounded to bf16, the same copy the base GEMM reads (as PEFT's
 *     bf16 autograd hands it to the adapter).
 * Every op is deterministic: same inputs and shapes, same bits.
 * Backward ops ADD into gradient outputs marked (+=); the caller zeroes.
 */
#ifndef POROS_OPS_H
#define POROS_OPS_H

#include <stddef.h>
#include <stdint.h>

typedef uint16_t bf16;

/* Round-to-nearest-even fp32 -> bf16; NaN stays NaN. */
static inline bf16 bf16_from_f32(float f)
{
	union { float f; uint32_t u; } v = { f };
	if ((v.u & 0x7fffffffu) > 0x7f800000u)
		return (bf16)((v.u >> 16) | 0x40);
	v.u += 0x7fffu + ((v.u >> 16) & 1u);
	return (bf16)(v.u >> 16);
}

static inline float f32_from_bf16(bf16 h)
{
	union { uint32_t u; float f; } v = { (uint32_t)h << 16 };
	return v.f;
}

/* Deterministic per-element dropout keep test shared by both backends:
 * element i of a tensor is kept iff poros_dropout_keep(seed, i, p). */
static inline uint64_t poros_mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static inline int poros_dropout_keep(uint64_t seed, uint64_t i, float p)
{
	uint32_t r = (uint32_t)(poros_mix64(seed ^ poros_mix64(i)) >> 40); /* 24 bits */
	return (float)r * (1.0f / 16777216.0f) >= p;
}

/* NF4 code book (QLoRA, Dettmers et al. 2023), index 0..15. */
extern const float poros_nf4_code[16];
#define POROS_NF4_BLOCK 64

#define POROS_OPS_LIST(X) \
/* out (T,C) = wte[tokens[t]] as fp32; tokens (T), wte (V,C) */ \
X(void, embedding_forward, (float *out, const int32_t *tokens, const bf16 *wte, int T, int C)) \
/* RMSNorm over rows: y = w * x / sqrt(mean(x^2) + eps) in fp32.  out_f32 \
 * and/or out_bf16 (T,C) may be NULL; rstd (T) is saved for backward. */ \
X(void, rmsnorm_forward, (float *out_f32, bf16 *out_bf16, float *rstd, const float *in, const bf16 *weight, float eps, int T, int C)) \
/* din (T,C) += d/d in, given dout (T,C), in, weight, rstd */ \
X(void, rmsnorm_backward, (float *din, const float *dout, const float *in, const bf16 *weight, const float *rstd, int T, int C)) \
/* out (T,N) = in (T,K) @ weight^T (weight (N,K)) + bias (N, may be NULL); \
 * accumulate != 0: out = (out + in @ weight^T) + bias */ \
X(void, matmul_forward, (float *out, const bf16 *in, const bf16 *weight, const bf16 *bias, int T, int K, int N, int accumulate)) \
/* din (T,K) = dout (T,N) @ weight (N,K); accumulate != 0 adds instead */ \
X(void, matmul_backward_input, (float *din, const bf16 *dout, const bf16 *weight, int T, int K, int N, int accumulate)) \
/* LoRA (PEFT): xd = dropout_p ? x * keep / (1-p) : x (keep from \
 * poros_dropout_keep(seed, t*K+k, p)); u (T,R) = xd @ A^T, A (R,K); \
 * out (T,N) = scale * u @ B^T, B (N,R), written: the base GEMM \
 * (matmul_forward, accumulate) adds onto it.  u is saved for backward; \
 * N = 0 forms u alone (out is not touched and may be NULL). \
 * scratch: NULL, or T*K floats the backend may use for partial sums and \
 * split operands (CUDA then runs the long sums on tensor cores or over \
 * the whole GPU; contents are undefined afterwards).  Either way the \
 * result is deterministic. */ \
X(void, lora_forward, (float *out, float *u, float *scratch, const bf16 *in, const float *A, const float *B, float scale, float dropout_p, uint64_t dropout_seed, int T, int K, int N, int R)) \
/* Given dout (T,N) bf16: dB (N,R) += scale * dout^T @ u; du (T,R) = \
 * scale * dout @ B (scratch, written); dA (R,K) += du^T @ xd; din (T,K) = \
 * du @ A through the dropout mask, or += when accumulate (din may be NULL \
 * when no input gradient is needed); scratch as in lora_forward. */ \
X(void, lora_backward, (float *din, float *dA, float *dB, float *du, float *scratch, const bf16 *dout, const bf16 *in, const float *u, const float *A, const float *B, float scale, float dropout_p, uint64_t dropout_seed, int T, int K, int N, int R, int accumulate)) \
/* Rotary embedding, HF rotate_half layout, in place on x (T,nh,D); \
 * position of token t is t % S; cos, sin (S, D/2). */ \
X(void, rope_forward, (float *x, const float *cos, const float *sin, int B, int S, int nh, int D)) \
/* Inverse rotation of the gradient, in place on dx (T,nh,D). */ \
X(void, rope_backward, (float *dx, const float *cos, const float *sin, int B, int S, int nh, int D)) \
/* Causal GQA attention, softmax scale 1/sqrt(D).  q (T,H,D), k, v (T,G,D); \
 * out (T,H*D) bf16; lse (B,H,S) log-sum-exp of the scaled scores, saved. \
 * Inside, bf16 products with fp32 accumulation (the contract above): \
 * scores = scale * bf16(q) . bf16(k), softmax in fp32, out = bf16(P) @ \
 * bf16(v) rounded to bf16.  Keys j > i get P = 0 exactly. \
 * scratch: attention_scratch_floats(B,S,H,G,D) floats. */ \
X(void, attention_forward, (bf16 *out, float *lse, float *scratch, const float *q, const float *k, const float *v, int B, int S, int H, int G, int D)) \
/* dq (T,H,D), dk, dv (T,G,D) written (not accumulated) from dout (T,H*D): \
 * P = exp(scale bf16(q).bf16(k) - lse) in fp32, dP = bf16(dout) @ bf16(v)^T \
 * in fp32, dS = P (dP - rowsum(P dP)) in fp32; dv = sum_h bf16(P)^T \
 * bf16(dout), dq = scale bf16(dS) @ bf16(k), dk = scale sum_h bf16(dS)^T \
 * bf16(q), all accumulated in fp32. */ \
X(void, attention_backward, (float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *q, const float *k, const float *v, const float *lse, int B, int S, int H, int G, int D)) \
/* out (n) = silu(gate) * up, bf16 */ \
X(void, swiglu_forward, (bf16 *out, const float *gate, const float *up, long n)) \
/* dgate, dup (n) written from dout (n), computed in fp32 and rounded to \
 * bf16: their only readers, the gate and up projections' backward, read \
 * the upstream gradient in bf16 */ \
X(void, swiglu_backward, (bf16 *dgate, bf16 *dup, const float *dout, const float *gate, const float *up, long n)) \
/* Fused softmax cross-entropy over logits (T,V): losses[t] = -log p[t][target]; \
 * dlogits (T,V) = (softmax - onehot) * dloss.  targets[t] < 0: ignored row, \
 * loss 0 and zero gradient. */ \
X(void, crossentropy_forward_backward, (bf16 *dlogits, float *losses, const float *logits, const int32_t *targets, float dloss, int T, int V)) \
/* a (n) += b (n) */ \
X(void, add_inplace, (float *a, const float *b, long n)) \
/* out (n) = bf16(in) */ \
X(void, cast_f32_to_bf16, (bf16 *out, const float *in, long n)) \
/* NF4 -> bf16: packed (n/2) two codes a byte, first element in the high \
 * nibble; absmax (n/64) fp32; n % 64 == 0. */ \
X(void, nf4_dequantize, (bf16 *out, const uint8_t *packed, const float *absmax, long n)) \
/* out[0] = sum of x^2 over n, deterministic order. */ \
X(void, sumsq, (float *out, float *scratch, const float *x, long n)) \
/* AdamW with bias correction (step t >= 1), decoupled weight decay; \
 * the gradient is multiplied by grad_scale first (clipping). */ \
X(void, adamw_update, (float *param, const float *grad, float *m, float *v, long n, float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t))

/* Scratch sizes (in floats) some ops need; same on both backends. */
size_t attention_scratch_floats(int B, int S, int H, int G, int D);
size_t sumsq_scratch_floats(long n);

/* The CUDA backend's attention scratch (kernels/cuda/attention.cu says what
 * goes where and when): two score-shaped squares, (B,H,S,S) fp32 each, and
 * four (T,H,D) bf16 copies (q, k and v expanded to the H query heads, dout),
 * two of which later hold one (T,H,D) fp32 buffer.  In floats, each part
 * rounded up to 4 (16 bytes).  attention_scratch_floats covers this and the
 * CPU's own layout. */
struct attention_parts {
	size_t square; /* B*H*S*S: scores, then P16 (or dP, then dS16) in place */
	size_t copy;   /* (T,H,D) bf16 */
};

static inline size_t attention_round4(size_t floats)
{
	return (floats + 3) / 4 * 4;
}

static inline struct attention_parts attention_parts_of(int B, int S, int H, int D)
{
	struct attention_parts p;
	p.square = attention_round4((size_t)B * H * S * S);
	p.copy = attention_round4(((size_t)B * S * H * D + 1) / 2);
	return p;
}

/* 2*B*H*S*S + 2*T*H*D floats, but for the rounding. */
static inline size_t attention_cuda_floats(int B, int S, int H, int D)
{
	struct attention_parts p = attention_parts_of(B, S, H, D);
	return 2 * p.square + 4 * p.copy;
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
