// defines: adamw_update_cuda, adamw_kernel
//
// AdamW as torch.optim.AdamW computes it, in the CPU's fp32 operation order:
//   p *= 1 - lr*wd;  m = lerp(m, g, 1-b1);  v = v*b2 + (1-b2)*g*g
//   p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
// with g = grad * grad_scale and the step constants computed on the host in
// double exactly as kernels/cpu/adamw.c does.  Elementwise.
#include <math.h>

#include "common.cuh"

#define ADAMW_THREADS 256

// torch.lerp: start + w (end - start), or from the end side when w >= 0.5
__device__ __forceinline__ float lerp_torch(float start, float end, float w)
{
	return fabsf(w) < 0.5f ? start + w * (end - start) : end - (end - start) * (1.0f - w);
}

// param, m, v (n) in place from grad (n)
__global__ void adamw_kernel(float *param, const float *grad, float *m, float *v, long n, float beta2,
                             float eps, float grad_scale, float step_size, float bias_correction2_sqrt,
                             float decay, float avg_weight, float sq_weight)
{
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
		float g = grad[i] * grad_scale;
		float mi = lerp_torch(m[i], g, avg_weight);
		float vi = v[i] * beta2 + sq_weight * g * g;
		float denom = sqrtf(vi) / bias_correction2_sqrt + eps;
		param[i] = param[i] * decay - step_size * (mi / denom);
		m[i] = mi;
		v[i] = vi;
	}
}

extern "C" void adamw_update_cuda(float *param, const float *grad, float *m, float *v, long n, float lr,
                                  float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t)
{
	if (n <= 0)
		return;
	float step_size = (float)((double)lr / (1.0 - pow((double)beta1, t)));
	float bias_correction2_sqrt = (float)sqrt(1.0 - pow((double)beta2, t));
	float decay = (float)(1.0 - (double)lr * weight_decay);
	float avg_weight = (float)(1.0 - (double)beta1);
	float sq_weight = (float)(1.0 - (double)beta2);
	adamw_kernel<<<grid_for(n, ADAMW_THREADS), ADAMW_THREADS, 0, poros_cuda_compute_stream()>>>(
		param, grad, m, v, n, beta2, eps, grad_scale, step_size, bias_correction2_sqrt, decay, avg_weight,
		sq_weight);
	launchCheck();
}
