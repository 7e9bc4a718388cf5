/* tests/unit/test_train_grad.c: the whole model's hand-written LoRA
 * gradients against finite differences of the engine's own loss.
 *
 * The model runs with accumulation 2 (so the 1/k scaling and the
 * accumulation are covered), alpha/r = 2 and every LoRA value drawn in
 * +-0.1 (B must be non-zero or A's gradient vanishes).  For each LoRA
 * tensor kind (q_proj A, q_proj B, ..., down_proj B, all layers together)
 * the direction d is the unit vector along that part of the gradient plus
 * an equal-norm random part, so the test sees the gradient's direction and
 * size, not only its sign.  analytic = g . d, in double.
 *
 * The loss is not smooth at a fine scale: the activations feeding the base
 * GEMMs are rounded to bf16 (8 significant bits), so moving p flips
 * roundings, and the loss carries a deterministic noise of ~5e-4 here.  A
 * plain central difference needs a loss move far above that, which makes
 * its O(h^2) curvature error large (we measured 4-17% at moves of
 * 5e-3..2e-1).  So the numeric derivative is a least-squares fit of the odd
 * part D(x) = (L(x d) - L(-x d)) / 2 = b x + c x^3 at x = h/4, h/2, 3h/4, h,
 * with h moving the loss by 0.1: the cubic term takes the curvature, four
 * distances average the noise, and b is the derivative.  Measured over 5
 * LoRA draws x 42 checks: at most 2.7% from the analytic value.  We require
 * 5% (plus 1e-4 absolute); a real bug is far off: dropping rope_backward on
 * k, for one, puts k_proj 21-30% off. */
#include "test_train_common.h"

static double loss_at(struct tt_run *r, const float *p0, const double *d, double h, float *work)
{
	for (long i = 0; i < r->lo->total; i++)
		work[i] = (float)((double)p0[i] + h * d[i]);
	engine_lora_write(r->e, work);
	return engine_forward_backward(r->e, 1);
}

/* The slope b of D(x) = (L(p + x d) - L(p - x d)) / 2 = b x + c x^3,
 * least squares over x = h/4, h/2, 3h/4, h. */
static double fitted_slope(struct tt_run *r, const float *p0, const double *d, double h, float *work)
{
	double s2 = 0, s4 = 0, s6 = 0, r1 = 0, r3 = 0;

	for (int j = 1; j <= 4; j++) {
		double x = h * j / 4;
		double D = (loss_at(r, p0, d, x, work) - loss_at(r, p0, d, -x, work)) / 2;

		s2 += x * x;
		s4 += x * x * x * x;
		s6 += x * x * x * x * x * x;
		r1 += D * x;
		r3 += D * x * x * x;
	}
	/* the normal equations [s2 s4; s4 s6] (b, c) = (r1, r3) */
	return (r1 * s6 - r3 * s4) / (s2 * s6 - s4 * s4);
}

/* 1 when float offset i belongs to projection m's A (is_b 0) or B. */
static int in_part(const struct lora_layout *lo, long i, int m, int is_b)
{
	for (int l = 0; l < lo->n_layers; l++) {
		const struct lora_slot *s = &lo->slot[l * N_PROJ + m];
		long at = is_b ? s->b : s->a, n = is_b ? (long)s->n_out * lo->rank : (long)lo->rank * s->n_in;

		if (s->a >= 0 && i >= at && i < at + n)
			return 1;
	}
	return 0;
}

static void check_model(const char *model)
{
	struct train_config cfg;
	struct tt_run r;
	float *p0, *g, *work;
	double *d;
	long n;

	tt_config(&cfg, model);
	cfg.cell.training.gradient_accumulation_steps = 2;

	if (tt_open(&r, &cfg) < 0) {
		CHECKF(0, "%s: cannot build the engine", model);
		return;
	}
	n = r.lo->total;
	p0 = xcalloc((size_t)n, sizeof *p0);
	g = xcalloc((size_t)n, sizeof *g);
	work = xcalloc((size_t)n, sizeof *work);
	d = xcalloc((size_t)n, sizeof *d);
	/* B != 0, or A's gradient would be zero and untested */
	tt_fill_lora(r.lo, p0, 0, 0.1f, 7);
	engine_lora_write(r.e, p0);
	engine_forward_backward(r.e, 1);
	engine_grad_read(r.e, g);
	for (int m = 0; m < N_PROJ; m++)
		for (int is_b = 0; is_b < 2; is_b++) {
			double gnorm = 0, rnorm = 0, dnorm = 0, analytic = 0, h, numeric, tol;

			for (long i = 0; i < n; i++) {
				int in = in_part(r.lo, i, m, is_b);

				d[i] = in ? tt_uniform(1000 + (uint64_t)m * 2 + (uint64_t)is_b, (uint64_t)i) : 0.0;
				gnorm += in ? (double)g[i] * g[i] : 0.0;
				rnorm += d[i] * d[i];
			}
			gnorm = sqrt(gnorm);
			rnorm = sqrt(rnorm);
			for (long i = 0; i < n; i++) {
				d[i] = (in_part(r.lo, i, m, is_b) && gnorm > 0 ? g[i] / gnorm : 0.0) + d[i] / rnorm;
				dnorm += d[i] * d[i];
			}
			dnorm = sqrt(dnorm);
			for (long i = 0; i < n; i++) {
				d[i] /= dnorm;
				analytic += (double)g[i] * d[i];
			}
			h = fabs(analytic) > 1e-6 ? 0.1 / fabs(analytic) : 1.0;
			if (h > 2.0)
				h = 2.0;
			numeric = fitted_slope(&r, p0, d, h, work);
			tol = 0.05 * fabs(analytic) + 1e-4;
			CHECKF(fabs(numeric - analytic) <= tol, "%s: %s lora_%c: analytic %.6g vs numeric %.6g (h %.3g)",
			         model, lora_module_names[m], is_b ? 'B' : 'A', analytic, numeric, h);
			if (getenv("TT_VERBOSE"))
				fprintf(stderr, "%s %s lora_%c: analytic %.6g numeric %.6g rel %.2e\n", model, lora_module_names[m],
				        is_b ? 'B' : 'A', analytic, numeric, fabs(numeric - analytic) / fabs(analytic));
		}
	free(p0);
	free(g);
	free(work);
	free(d);
	tt_close(&r);
}

int main(void)
{
	set_progname("test_train_grad");
	check_model("poros/tiny-qwen2");
	check_model("poros/tiny-llama");
	check_model("poros/tiny-qwen3");
	if (failures)
		fprintf(stderr, "test_train_grad: %d failure%s\n", failures, failures == 1 ? "" : "s");
	else
		fprintf(stderr, "test_train_grad: ok\n");
	return failures != 0;
}
