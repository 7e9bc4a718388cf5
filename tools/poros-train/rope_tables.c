/* tools/poros-train/rope_tables.c: HF's RoPE tables (rope_tables.h),
 * which the plan uploads (plan.c) and a run checks before step 1 (run.c):
 * a file of its own, below both engine.c and plan.c. */
#include "rope_tables.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

int rope_tables(float *cos_t, float *sin_t, const struct model_config *mc, int S, char *err, size_t errsz)
{
	int D = mc->head_dim, half = D / 2;
	const char *type = mc->rope_scaling_type;
	float *inv = xmalloc((size_t)half * sizeof *inv);

	if (*type && strcmp(type, "default") != 0 && strcmp(type, "linear") != 0 && strcmp(type, "llama3") != 0) {
		free(inv);
		return set_error(err, errsz,
		              "%s: rope_scaling type \"%s\" is not supported (poros-train implements default, linear, llama3)",
		              mc->model_id, type);
	}
	for (int i = 0; i < half; i++) {
		/* as HF: 1.0 / (base ** (arange(0, D, 2).float() / D)), all fp32 */
		float expo = (float)(2 * i) / (float)D;

		inv[i] = 1.0f / powf((float)mc->rope_theta, expo);
	}
	if (strcmp(type, "linear") == 0)
		for (int i = 0; i < half; i++)
			inv[i] = inv[i] / (float)mc->rope_scaling_factor;
	if (strcmp(type, "llama3") == 0) {
		/* transformers' _compute_llama3_parameters, elementwise in fp32 */
		float factor = (float)mc->rope_scaling_factor, lo = (float)mc->rope_low_freq_factor;
		float hi = (float)mc->rope_high_freq_factor, old = (float)mc->rope_original_max_position;
		float low_wl = old / lo, high_wl = old / hi;

		if (mc->rope_original_max_position <= 0 || hi == lo) {
			free(inv);
			return set_error(err, errsz, "%s: rope_scaling llama3 needs original_max_position_embeddings and "
			              "high_freq_factor != low_freq_factor", mc->model_id);
		}
		for (int i = 0; i < half; i++) {
			float wl = 2.0f * (float)M_PI / inv[i];
			float scaled = wl > low_wl ? inv[i] / factor : inv[i];
			float smooth = (old / wl - lo) / (hi - lo);
			float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;

			inv[i] = (!(wl < high_wl) && !(wl > low_wl)) ? smoothed : scaled;
		}
	}
	for (int s = 0; s < S; s++)
		for (int i = 0; i < half; i++) {
			float f = (float)s * inv[i];

			cos_t[(size_t)s * half + i] = cosf(f);
			sin_t[(size_t)s * half + i] = sinf(f);
		}
	free(inv);
	return 0;
}
