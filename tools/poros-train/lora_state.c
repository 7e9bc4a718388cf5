/* tools/poros-train/lora_state.c: the adapter's state on the device: the
 * flat layout (engine.h), PEFT's initialisation, and the optimizer step
 * over parameters, gradients and AdamW moments (one layout for all four). */
#include "engine_impl.h"

#include <math.h>
#include <string.h>

#include "util/util.h"

#define LORA_ALIGN_FLOATS 64

static long align_floats(long n)
{
	return (n + LORA_ALIGN_FLOATS - 1) / LORA_ALIGN_FLOATS * LORA_ALIGN_FLOATS;
}

void lora_layout_init(struct lora_layout *lo, const struct layer_layout *lay, int L, int R, unsigned mask)
{
	long off = 0;

	lo->n_layers = L;
	lo->rank = R;
	lo->mask = mask;
	lo->slot = xcalloc((size_t)L * N_PROJ, sizeof *lo->slot);
	for (int l = 0; l < L; l++)
		for (int m = 0; m < N_PROJ; m++) {
			struct lora_slot *s = &lo->slot[l * N_PROJ + m];

			s->n_out = lay->n_out[m];
			s->n_in = lay->n_in[m];
			s->a = s->b = -1;
			if (!((mask >> m) & 1u))
				continue;
			s->a = off;
			off += align_floats((long)R * s->n_in);
			s->b = off;
			off += align_floats((long)s->n_out * R);
		}
	lo->total = off;
}

/* PEFT's init: A = kaiming_uniform(a=sqrt(5)), i.e. U(-1/sqrt(K), 1/sqrt(K)),
 * drawn counter-based from the seed; B = 0 so training starts at the base. */
void lora_init_host(const struct lora_layout *lo, float *host, uint64_t seed)
{
	memset(host, 0, (size_t)lo->total * sizeof *host);
	for (int l = 0; l < lo->n_layers; l++)
		for (int m = 0; m < N_PROJ; m++) {
			const struct lora_slot *s = &lo->slot[l * N_PROJ + m];
			uint64_t key = poros_mix64(seed ^ poros_mix64(0x10a0000ull + (uint64_t)l * N_PROJ + (uint64_t)m));
			float bound = 1.0f / sqrtf((float)s->n_in);
			long n = (long)lo->rank * s->n_in;

			if (s->a < 0)
				continue;
			for (long i = 0; i < n; i++) {
				uint32_t r = (uint32_t)(poros_mix64(key ^ (uint64_t)i) >> 40);
				float u = (float)r * (1.0f / 16777216.0f);

				host[s->a + i] = (2.0f * u - 1.0f) * bound;
			}
		}
}

float lora_grad_sumsq(struct engine *e)
{
	float sumsq;

	e->be->ops->sumsq(e->sumsq, e->sumsq_scratch, e->grads, e->lora.total);
	e->be->copy_d2h(&sumsq, e->sumsq, sizeof sumsq);
	return sumsq;
}

/* torch.optim.AdamW (betas 0.9, 0.999, eps 1e-8) on the gradients times
 * grad_scale (the clipping coefficient); step is AdamW's t. */
void lora_adamw(struct engine *e, float lr, float grad_scale, int step)
{
	const struct backend *be = e->be;
	float wd = (float)e->cfg->cell.training.weight_decay;

	if (e->opt_chunk == NULL) {
		be->ops->adamw_update(e->params, e->grads, e->adam_m, e->adam_v, e->lora.total, lr, 0.9f, 0.999f, 1e-8f, wd,
		                      grad_scale, step);
	} else {
		/* the update is element-wise: chunks of it give the bits of one call */
		float *m = e->opt_chunk, *v = e->opt_chunk + e->opt_chunk_n;
		for (long at = 0; at < e->lora.total; at += e->opt_chunk_n) {
			long n = e->lora.total - at < e->opt_chunk_n ? e->lora.total - at : e->opt_chunk_n;
			size_t bytes = (size_t)n * sizeof(float);
			be->copy_h2d(m, e->adam_m + at, bytes, STREAM_COMPUTE);
			be->copy_h2d(v, e->adam_v + at, bytes, STREAM_COMPUTE);
			be->ops->adamw_update(e->params + at, e->grads + at, m, v, n, lr, 0.9f, 0.999f, 1e-8f, wd, grad_scale,
			                      step);
			be->copy_d2h(e->adam_m + at, m, bytes); /* waits for the update */
			be->copy_d2h(e->adam_v + at, v, bytes);
		}
	}
	e->lora_ver++;
}

/* dst = the moments, wherever they live */
static void moments_read(const struct engine *e, float *dst, const float *src, size_t bytes)
{
	if (e->opt_chunk)
		memcpy(dst, src, bytes);
	else
		e->be->copy_d2h(dst, src, bytes);
}

void engine_state_read(struct engine *e, float *params, float *adam_m, float *adam_v)
{
	size_t bytes = (size_t)e->lora.total * sizeof(float);

	e->be->copy_d2h(params, e->params, bytes);
	moments_read(e, adam_m, e->adam_m, bytes);
	moments_read(e, adam_v, e->adam_v, bytes);
}

void engine_state_write(struct engine *e, const float *params, const float *adam_m, const float *adam_v)
{
	size_t bytes = (size_t)e->lora.total * sizeof(float);

	e->be->copy_h2d(e->params, params, bytes, STREAM_COMPUTE);
	if (e->opt_chunk) {
		memcpy(e->adam_m, adam_m, bytes);
		memcpy(e->adam_v, adam_v, bytes);
	} else {
		e->be->copy_h2d(e->adam_m, adam_m, bytes, STREAM_COMPUTE);
		e->be->copy_h2d(e->adam_v, adam_v, bytes, STREAM_COMPUTE);
	}
	e->be->synchronize();
	e->lora_ver++;
}
