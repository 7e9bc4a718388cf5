// defines: add_inplace_cpu
/* Residual adds and gradient sums: elementwise, so trivially deterministic. */
#include "ops.h"
#include "cpu_par.h"

/* a (n) += b (n) */
void add_inplace_cpu(float *a, const float *b, long n)
{
#pragma omp parallel for schedule(static) if (n >= POROS_CPU_PAR_MIN)
	for (long i = 0; i < n; i++)
		a[i] += b[i];
}
