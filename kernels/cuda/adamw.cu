// defines: adamw_update_cuda, adamw_kernel
//
// AdamW as torch.optim.AdamW computes it, numerics.h's update
// (poros_adamw_element), the step constants computed on the host in
// double by poros_adamw_step_of as on the CPU.  Elementwise.
#include "common.cuh"

#define ADAMW_THREADS 256

// param, m, v (n) in place from grad (n); the step's constants one by
// one, not as the struct: so the kernel compiles to the very code of its
// earlier copy of the update (same PTX), whose bits the runs were pinned to.
__global__ void adamw_kernel(float *param, const float *grad, float *m, float *v, long n, float beta2,
                             float eps, float grad_scale, float step_size, float bias_correction2_sqrt,
                             float decay, float avg_weight, float sq_weight)
{
	struct poros_adamw_step s = { beta2, eps, grad_scale, step_size, bias_correction2_sqrt, decay, avg_weight,
	                              sq_weight };
	for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
		poros_adamw_element(param, grad, m, v, i, s);
}

extern "C" void adamw_update_cuda(float *param, const float *grad, float *m, float *v, long n, float lr,
                                  float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t)
{
	if (n <= 0)
		return;
	struct poros_adamw_step s = poros_adamw_step_of(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
	adamw_kernel<<<grid_for(n, ADAMW_THREADS), ADAMW_THREADS, 0, poros_cuda_compute_stream()>>>(
		param, grad, m, v, n, s.beta2, s.eps, s.grad_scale, s.step_size, s.bias_correction2_sqrt, s.decay,
		s.avg_weight, s.sq_weight);
	launchCheck();
}
