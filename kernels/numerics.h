/* kernels/numerics.h: the scalar numerics both backends must compute to the
 * same bits, defined once.  the CPU kernels include it (through ops.h) as
 * plain C; the CUDA kernels (through common.cuh) compile the same bodies
 * for host and device.  Each function is the exact operation sequence the
 * results are pinned to: bf16 rounding, the dropout hash, the exact
 * three-way bf16 split of an fp32 value, the NF4 code book, AdamW's
 * update and RoPE's rotation.  Changing any of them changes every run's
 * bits.
 *
 * Contraction: the C build is ISO C (-std=c11: no a*b+c fused into fma),
 * nvcc fuses a*b+c by default; only poros_adamw_element has such a form,
 * and each backend compiles it as its old inline copy did, so neither
 * backend's bits move.  The rotary pair (poros_rope_first/second) has
 * two and spells its roundings out on the device, so there both backends
 * agree.  The others are integer work, exact subtractions and a product
 * by a power of two. */
#ifndef POROS_NUMERICS_H
#define POROS_NUMERICS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define POROS_HD static inline __host__ __device__
#else
#define POROS_HD static inline
#endif

typedef uint16_t bf16;

/* The bits of an fp32 value and back (a 4-byte memcpy is a register move
 * on both host and device). */
POROS_HD uint32_t poros_f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	return u;
}

POROS_HD float poros_f32_of_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

/* Round-to-nearest-even fp32 -> bf16; NaN stays NaN (quiet, sign kept). */
POROS_HD bf16 bf16_from_f32(float f)
{
	uint32_t u = poros_f32_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (bf16)((u >> 16) | 0x40u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (bf16)(u >> 16);
}

POROS_HD float f32_from_bf16(bf16 h)
{
	return poros_f32_of_bits((uint32_t)h << 16);
}

/* Deterministic per-element dropout keep test shared by both backends:
 * element i of a tensor is kept iff poros_dropout_keep(seed, i, p). */
POROS_HD uint64_t poros_mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

POROS_HD int poros_dropout_keep(uint64_t seed, uint64_t i, float p)
{
	uint32_t r = (uint32_t)(poros_mix64(seed ^ poros_mix64(i)) >> 40); /* 24 bits */
	return (float)r * (1.0f / 16777216.0f) >= p;
}

/* PEFT's dropout scales a kept element by 1/(1-p): this float, on both
 * backends. */
POROS_HD float poros_dropout_keep_scale(float p)
{
	return p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
}

/* Element i of a tensor after dropout: x * keep_scale when kept, else 0
 * (p = 0: x itself). */
POROS_HD float poros_dropped(float x, uint64_t seed, uint64_t i, float p, float keep_scale)
{
	if (p == 0.0f)
		return x;
	return poros_dropout_keep(seed, i, p) ? x * keep_scale : 0.0f;
}

/* The exact three-way split of an fp32 value into bf16 parts: hi =
 * bf16(w), mid = bf16(w - hi), lo = bf16(w - hi - mid); each difference
 * is exact in fp32 and 3 x 8 significant bits cover fp32's 24 (for |w| >=
 * 2^-100; nearer the subnormals lo loses bits).  part[0] = hi, part[1] =
 * mid, part[2] = lo. */
POROS_HD void lora_split3(float w, bf16 part[3])
{
	part[0] = bf16_from_f32(w);
	float r = w - f32_from_bf16(part[0]);
	part[1] = bf16_from_f32(r);
	part[2] = bf16_from_f32(r - f32_from_bf16(part[1]));
}

/* The activation side of the LoRA extension (ops.h): value r of u's or
 * du's row (R values) into its extension row, part i of it at columns
 * (3i + j)R + r for j < 3, to meet part j of the weight side's. */
POROS_HD void lora_ext_put(bf16 *row, float v, int r, int R)
{
	bf16 part[3];
	lora_split3(v, part);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 3; j++)
			row[(i * 3 + j) * R + r] = part[i];
}

/* The weight side's column c < 9R (ops.h): part (c / R) % 3 of w, the
 * column's element c % R of scale*B's row or of A's column. */
POROS_HD bf16 lora_ext_weight_at(float w, int c, int R)
{
	bf16 part[3];
	lora_split3(w, part);
	return part[(c / R) % 3];
}

/* NF4 code book (QLoRA NormalFloat4, Dettmers et al. 2023): 16 quantiles
 * of N(0,1) scaled to [-1, 1] with an exact zero at index 7; the values
 * are bitsandbytes' table, so weights quantized there dequantize to the
 * same numbers here.  An initializer: the CPU's poros_nf4_code and the
 * CUDA constant table are both defined from it. */
#define POROS_NF4_CODE_INIT                                                                           \
	{                                                                                             \
		-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,             \
		-0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,            \
		0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,                     \
		0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, \
		1.0f,                                                                                 \
	}
#define POROS_NF4_BLOCK 64

/* AdamW as torch.optim.AdamW (the HF Trainer default) computes it, in the
 * same fp32 operation order:
 *   p *= 1 - lr*wd;  m = lerp(m, g, 1-b1);  v = v*b2 + (1-b2)*g*g
 *   p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
 * with the step's constants in double (torch computes them as Python
 * floats), rounded once to fp32, and g = grad * grad_scale (clipping). */
struct poros_adamw_step {
	float beta2, eps, grad_scale;
	float step_size;             /* lr / (1 - beta1^t) */
	float bias_correction2_sqrt; /* sqrt(1 - beta2^t) */
	float decay;                 /* 1 - lr * weight_decay */
	float avg_weight;            /* 1 - beta1 */
	float sq_weight;             /* 1 - beta2 */
};

/* Host only (pow and sqrt in double): the constants of step t >= 1. */
static inline struct poros_adamw_step poros_adamw_step_of(float lr, float beta1, float beta2, float eps,
							  float weight_decay, float grad_scale, int t)
{
	struct poros_adamw_step s;
	s.beta2 = beta2;
	s.eps = eps;
	s.grad_scale = grad_scale;
	s.step_size = (float)((double)lr / (1.0 - pow((double)beta1, t)));
	s.bias_correction2_sqrt = (float)sqrt(1.0 - pow((double)beta2, t));
	s.decay = (float)(1.0 - (double)lr * weight_decay);
	s.avg_weight = (float)(1.0 - (double)beta1);
	s.sq_weight = (float)(1.0 - (double)beta2);
	return s;
}

/* torch.lerp: start + w (end - start), or from the end side when w >= 0.5 */
POROS_HD float poros_lerp_torch(float start, float end, float w)
{
	return fabsf(w) < 0.5f ? start + w * (end - start) : end - (end - start) * (1.0f - w);
}

/* Element i: param[i], m[i], v[i] updated in place from grad[i] (the very
 * loop body both backends' earlier copies had, so each compiles as it did). */
POROS_HD void poros_adamw_element(float *param, const float *grad, float *m, float *v, long i,
				  struct poros_adamw_step s)
{
	float g = grad[i] * s.grad_scale;
	float mi = poros_lerp_torch(m[i], g, s.avg_weight);
	float vi = v[i] * s.beta2 + s.sq_weight * g * g;
	float denom = sqrtf(vi) / s.bias_correction2_sqrt + s.eps;
	param[i] = param[i] * s.decay - s.step_size * (mi / denom);
	m[i] = mi;
	v[i] = vi;
}

/* Attention's document mask (ops.h): the first key token i (0..S-1 of row
 * b) attends is i - pos, pos clamped into [0, i]; no pos: 0 (causal). */
POROS_HD int poros_first_key(const int32_t *pos, int b, int S, int i)
{
	if (!pos)
		return 0;
	int p = pos[(size_t)b * S + i];
	p = p < 0 ? 0 : p > i ? i : p;
	return i - p;
}

/* RoPE's angle index of token t (of T = B*S): pos[t] clamped into
 * [0, t % S], or t % S without pos (ops.h). */
POROS_HD int poros_rope_position(const int32_t *pos, int S, long t)
{
	int i = (int)(t % S);
	if (!pos)
		return i;
	return pos[t] < 0 ? 0 : pos[t] > i ? i : pos[t];
}

/* One rotary pair in HF's rotate_half layout, (a, b) = (x[i], x[i + D/2])
 * by the angle whose cosine and sine are c, s: a' = a c - b s, b' = b c +
 * a s (the inverse rotation is s -> -s, exact).  Each product rounded,
 * then the sum, no fused multiply-add: the device spells the roundings
 * out (nvcc would contract), so rope_forward, rope_backward and the
 * attention ops' rotation give the same bits on both backends. */
POROS_HD float poros_rope_first(float a, float b, float c, float s)
{
#ifdef __CUDA_ARCH__
	return __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
#else
	return a * c - b * s;
#endif
}

POROS_HD float poros_rope_second(float a, float b, float c, float s)
{
#ifdef __CUDA_ARCH__
	return __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
#else
	return b * c + a * s;
#endif
}

/* Element d of a head row x (D elements) after the rotation, for a token
 * at angle row `at` of the (S, D/2) tables; with an odd D the last
 * element has no pair and stays. */
POROS_HD float poros_rope_element(const float *x, const float *cos, const float *sin, int at, int d, int D)
{
	int half = D / 2;
	if (d < half) {
		size_t i = (size_t)at * half + d;
		return poros_rope_first(x[d], x[d + half], cos[i], sin[i]);
	}
	if (d < 2 * half) {
		size_t i = (size_t)at * half + (d - half);
		return poros_rope_second(x[d - half], x[d], cos[i], sin[i]);
	}
	return x[d];
}

#endif
