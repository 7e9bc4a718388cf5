/* kernels/ref/ref.h: the reference tier, the ops' math in double.
 *
 * Three tiers hold each op: kernels/ref/<family>.c (here) is the math in
 * double, with no rounding of its own, that the op tests hold the others
 * against; kernels/cpu/<op>.c is the rounding contract (ops.h), plain C
 * that rounds where CUDA stores bf16; kernels/cuda/<op>.cu is the fast
 * path.  This tier is linked into the op tests only (build/libporos_ref.a),
 * never into a tool.
 *
 * A function named ref_<op> gives the op's outputs; ref_<op>_dot gives
 * sum(lw .* forward(inputs)), the loss whose finite differences the
 * gradient checks take (tests/ops/ops_check.h, finite_diff).  Shapes and
 * dimension letters are ops.h's. */
#ifndef POROS_REF_H
#define POROS_REF_H

#include <stdint.h>

#include "numerics.h" /* bf16, the dropout hash */

/* --- matmul.c --- */
/* out (T,N) = x (T,K) @ W^T (W (N,K)), both contiguous */
void ref_matmul(double *out, const bf16 *x, const bf16 *W, int T, int K, int N);
/* din (T,K) = dout (T,N) @ W (N,K) */
void ref_matmul_backward_input(double *din, const double *dout, const double *W, int T, int K, int N);
/* sum lw (T,N) .* (x (T,K) @ W^T) */
double ref_matmul_dot(const double *lw, const double *x, const double *W, int T, int K, int N);

/* --- rmsnorm.c --- */
/* sum lw (T,C) .* (w * x * rstd(x)), rstd = 1/sqrt(mean(x^2) + eps) */
double ref_rmsnorm_dot(const double *lw, const double *x, const double *w, double eps, int T, int C);

/* --- lora.c --- */
/* u (T,R) = dropout(x) A^T, out (T,N) = scale u B^T, the dropout mask
 * numerics.h's poros_dropout_keep; returns how many of x's elements were
 * dropped (p = 0: none). */
long ref_lora(double *out, double *u, const bf16 *x, const float *A, const float *B, double scale, float p,
              uint64_t seed, int T, int K, int N, int R);
/* sum lw (T,N) .* (scale ((x .* keep) A^T) B^T), keep (T,K) 0 or 1/(1-p);
 * R at most 64 */
double ref_lora_dot(const double *lw, const double *x, const double *keep, const double *A, const double *B,
                    double scale, int T, int K, int N, int R);

/* --- rope.c --- */
/* cos, sin (S, D/2) as HF builds them, in fp32: inv_freq = theta^(-2i/D),
 * angle = pos * inv_freq (the tables every rope and attention test reads) */
void ref_rope_tables(float *cos_t, float *sin_t, int S, int D, double theta);
/* out (T,nh,D) = rope(x) at positions t % S: each pair (x1, x2) -> (x1 cos
 * - x2 sin, x2 cos + x1 sin), HF's rotate_half layout */
void ref_rope(double *out, const float *x, const float *cos_t, const float *sin_t, int T, int S, int nh, int D);
/* sum lw .* rope(x), x (T,nh,D) at positions t % S, HF's rotate_half */
double ref_rope_dot(const double *lw, const double *x, const double *cos_t, const double *sin_t, int T, int S,
                    int nh, int D);

/* --- attention.c --- (causal GQA, one document per row, S at most 64 for
 * the _dot and _bounds functions) */
/* out (T,H*D) and lse (B,H,S) from the inputs as given; bound (T,H*D) gets
 * sum_j P_ij |v_jd|, the scale of the rounding the bf16 contract adds */
void ref_attention(double *out, double *lse, double *bound, const float *q, const float *k, const float *v, int B,
                   int S, int H, int G, int D);
/* sum lw (T,H*D) .* attention(q, k, v) */
double ref_attention_dot(const double *lw, const double *q, const double *k, const double *v, int B, int S, int H,
                         int G, int D);
/* The scale of the rounding the bf16 contract adds to each gradient of
 * attention_backward under upstream gradient lw: bq, bk, bv the sums of
 * |term| of dq, dk, dv; delta (B,H,S) the double rowsum(P dP) and bdelta
 * its bound (kernels/ref/attention.c derives them). */
void ref_attention_bounds(double *bq, double *bk, double *bv, double *delta, double *bdelta, const double *lw,
                          const double *q, const double *k, const double *v, int B, int S, int H, int G, int D);

/* --- swiglu.c --- */
/* out (n) = silu(gate) * up */
void ref_swiglu(double *out, const double *gate, const double *up, long n);
/* sum lw .* silu(gate) * up */
double ref_swiglu_dot(const double *lw, const double *gate, const double *up, long n);

/* --- crossentropy.c --- */
/* loss (T) = logsumexp(logits_t) - logits_t[target_t], every target in
 * [0, V) */
void ref_crossentropy(double *loss, const float *logits, const int32_t *targets, int T, int V);
/* the mean over rows whose target is not negative of -log
 * softmax(logits)[target] */
double ref_crossentropy_mean(const double *logits, const int32_t *targets, int T, int V);

/* --- adamw.c --- */
/* param, m, v (n) after AdamW step `step` (from 1) on grad * grad_scale,
 * from param_in, m_in, v_in, weight decay decoupled (param (1 - lr wd)) */
void ref_adamw(double *param, double *m, double *v, const float *param_in, const float *grad, const float *m_in,
               const float *v_in, long n, double lr, double b1, double b2, double eps, double wd, double grad_scale,
               int step);

#endif
