// defines: adamw_update_cpu
/* AdamW as torch.optim.AdamW (the HF Trainer default) computes it, in the
 * same fp32 operation order:
 *   p *= 1 - lr*wd;  m = lerp(m, g, 1-b1);  v = v*b2 + (1-b2)*g*g
 *   p -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
 * with the bias corrections in double (torch computes them as Python
 * floats).  g = grad * grad_scale, the clipping factor. */
#include <math.h>

#include "ops.h"
#include "cpu_par.h"

/* torch.lerp: start + w (end - start), or from the end side when w >= 0.5 */
static inline float lerp_torch(float start, float end, float w)
{
	return fabsf(w) < 0.5f ? start + w * (end - start) : end - (end - start) * (1.0f - w);
}

/* param, m, v (n) updated in place from grad (n); step t >= 1 */
void adamw_update_cpu(float *param, const float *grad, float *m, float *v, long n, float lr, float beta1,
		      float beta2, float eps, float weight_decay, float grad_scale, int t)
{
	float step_size = (float)((double)lr / (1.0 - pow((double)beta1, t)));
	float bias_correction2_sqrt = (float)sqrt(1.0 - pow((double)beta2, t));
	float decay = (float)(1.0 - (double)lr * weight_decay);
	float avg_weight = (float)(1.0 - (double)beta1);
	float sq_weight = (float)(1.0 - (double)beta2);
#pragma omp parallel for schedule(static) if (n >= POROS_CPU_PAR_MIN)
	for (long i = 0; i < n; i++) {
		float g = grad[i] * grad_scale;
		float mi = lerp_torch(m[i], g, avg_weight);
		float vi = v[i] * beta2 + sq_weight * g * g;
		float denom = sqrtf(vi) / bias_correction2_sqrt + eps;
		param[i] = param[i] * decay - step_size * (mi / denom);
		m[i] = mi;
		v[i] = vi;
	}
}
