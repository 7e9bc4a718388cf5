// defines: sumsq_cpu sumsq_scratch_floats
/* Sum of squares (the gradient norm for clipping).  The order is fixed by
 * n alone: SUMSQ_CHUNKS contiguous chunks, each summed in double in index
 * order, then the chunk sums in chunk order; threads only pick up chunks,
 * so the result does not depend on the thread count. */
#include "ops.h"
#include "cpu_par.h"

#define SUMSQ_CHUNKS 64

/* 4096 floats: room for the CUDA backend's per-block partial sums. */
size_t sumsq_scratch_floats(long n)
{
	(void)n;
	return 4096;
}

/* out[0] = sum of x (n)^2.  The CPU keeps its partials in double on the
 * stack and does not use scratch. */
void sumsq_cpu(float *out, float *scratch, const float *x, long n)
{
	(void)scratch;
	double partial[SUMSQ_CHUNKS];
	long chunk = (n + SUMSQ_CHUNKS - 1) / SUMSQ_CHUNKS;
#pragma omp parallel for schedule(static) if (n >= POROS_CPU_PAR_MIN)
	for (int c = 0; c < SUMSQ_CHUNKS; c++) {
		long lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
		double s = 0.0;
		for (long i = lo; i < hi; i++)
			s += (double)x[i] * x[i];
		partial[c] = s;
	}
	double total = 0.0;
	for (int c = 0; c < SUMSQ_CHUNKS; c++)
		total += partial[c];
	out[0] = (float)total;
}
