// defines: adamw_update_cpu
/* AdamW as torch.optim.AdamW computes it: the step's constants and the
 * per-element update are numerics.h's (poros_adamw_step_of,
 * poros_adamw_element), shared with the CUDA kernel. */
#include "ops.h"
#include "cpu_par.h"

/* param, m, v (n) updated in place from grad (n); step t >= 1 */
void adamw_update_cpu(float *param, const float *grad, float *m, float *v, long n, float lr, float beta1,
		      float beta2, float eps, float weight_decay, float grad_scale, int t)
{
	struct poros_adamw_step s = poros_adamw_step_of(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
#pragma omp parallel for schedule(static) if (n >= POROS_CPU_PAR_MIN)
	for (long i = 0; i < n; i++)
		poros_adamw_element(param, grad, m, v, i, s);
}
