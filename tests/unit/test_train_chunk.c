/* tests/unit/test_train_chunk.c: the MLP in token chunks (layer.c,
 * mlp_chunk), forced at a small T through train_config's mlp_chunk (what
 * POROS_MLP_CHUNK sets).
 *
 *  - With chunking, blockwise (block sizes 1 and 3) and resident (with and
 *    without gradient checkpointing) still give bit-identical losses and
 *    adapters: Qwen2, Llama, Qwen3, NF4 and bf16, accumulation 1 and 4,
 *    dropout 0 and 0.1.
 *  - Chunked against one chunk (dropout 0, one forward and backward from
 *    the same adapter): every op but a LoRA weight gradient is row by row,
 *    so the loss and the attention projections' gradients are the same
 *    bits; gate, up and down sum their LoRA gradients chunk by chunk, so
 *    theirs agree to fp32 rounding (1e-5 of the largest), and differ.
 *  - A chunk of T rows or more is no chunking: the same bits as the
 *    default at a T under MLP_CHUNK_TOKENS. */
#include "test_train_common.h"

#define CHUNK 5 /* T = 32 rows: chunks of 5, 5, ..., and 2 */

static void chunk_config(struct train_config *cfg, const char *model, int mode, int recompute, int block_size,
                         int nf4, int accum, double dropout, int chunk)
{
	tt_parity_config(cfg, model, mode, block_size, nf4, accum, dropout);
	cfg->cell.training.gradient_checkpointing = recompute;
	cfg->mlp_chunk = chunk;
}

/* Blockwise and resident agree bit for bit with chunking on. */
static int check_parity(void)
{
	static const char *const models[] = { "poros/tiny-qwen2", "poros/tiny-llama", "poros/tiny-qwen3" };
	static const struct { int accum; double dropout; } runs[] = { { 1, 0.0 }, { 4, 0.1 }, { 1, 0.1 }, { 4, 0.0 } };
	int combos = 0;

	for (int mi = 0; mi < 3; mi++)
		for (int nf4 = 0; nf4 < 2; nf4++)
			for (int ri = 0; ri < 4; ri++) {
				struct train_config cfg;
				struct tt_outcome ref;
				char what[160];

				chunk_config(&cfg, models[mi], MODE_RESIDENT, 0, 1, nf4, runs[ri].accum, runs[ri].dropout,
				             CHUNK);
				if (tt_reference_run(&ref, &cfg, models[mi]) < 0)
					continue;
				for (int v = 0; v < 3; v++) {
					int mode = v == 0 ? MODE_RESIDENT : MODE_BLOCKWISE, bs = v == 2 ? 3 : 1;

					snprintf(what, sizeof what, "%s %s accum %d dropout %.1f chunk %d: %s", models[mi],
					         nf4 ? "nf4" : "bf16", runs[ri].accum, runs[ri].dropout, CHUNK,
					         v == 0 ? "resident checkpointed" : v == 1 ? "blockwise 1" : "blockwise 3");
					chunk_config(&cfg, models[mi], mode, mode == MODE_RESIDENT, bs, nf4, runs[ri].accum,
					             runs[ri].dropout, CHUNK);
					combos += tt_compare_run(what, &ref, &cfg);
				}
				free(ref.params);
			}
	return combos;
}

/* The loss and gradients of one forward and backward from a fixed adapter
 * (B non-zero, so A's gradients are too). */
static int grads(const char *model, int mode, int nf4, int chunk, double *loss, float **g, long *n)
{
	struct train_config cfg;
	struct tt_run r;
	float *p;

	chunk_config(&cfg, model, mode, mode == MODE_RESIDENT, 2, nf4, 2, 0.0, chunk);
	if (tt_open(&r, &cfg) < 0)
		return -1;
	*n = r.lo->total;
	p = xcalloc((size_t)*n, sizeof *p);
	tt_fill_lora(r.lo, p, 0, 0.1f, 7);
	engine_lora_write(r.e, p);
	*loss = engine_forward_backward(r.e, 1);
	*g = xmalloc((size_t)*n * sizeof **g);
	engine_grad_read(r.e, *g);
	free(p);
	tt_close(&r);
	return 0;
}

static void check_against_unchunked(const char *model, int mode, int nf4)
{
	struct train_config cfg;
	struct tt_run r;
	double l1, lc;
	float *g1 = NULL, *gc = NULL;
	long n1 = 0, nc = 0;
	char what[128];

	snprintf(what, sizeof what, "%s %s %s", model, nf4 ? "nf4" : "bf16", mode == MODE_RESIDENT ? "resident" : "blockwise");
	if (grads(model, mode, nf4, 0, &l1, &g1, &n1) < 0 || grads(model, mode, nf4, CHUNK, &lc, &gc, &nc) < 0 ||
	    n1 != nc) {
		CHECKF(0, "%s: a run failed", what);
		free(g1);
		free(gc);
		return;
	}
	CHECKF(memcmp(&l1, &lc, sizeof l1) == 0, "%s: loss %.17g chunked vs %.17g", what, lc, l1);
	chunk_config(&cfg, model, mode, 1, 2, nf4, 2, 0.0, CHUNK);
	if (tt_open(&r, &cfg) < 0)
		return;
	for (int m = 0; m < N_PROJ; m++) {
		double maxg = 0, maxd = 0;
		long differ = 0;

		for (int l = 0; l < r.lo->n_layers; l++) {
			const struct lora_slot *s = &r.lo->slot[l * N_PROJ + m];
			long na = (long)r.lo->rank * s->n_in, nb = (long)s->n_out * r.lo->rank;

			if (s->a < 0)
				continue;
			for (long i = 0; i < na + nb; i++) {
				long at = i < na ? s->a + i : s->b + (i - na);
				double d = fabs((double)gc[at] - g1[at]);

				maxg = fmax(maxg, fabs(g1[at]));
				maxd = fmax(maxd, d);
				differ += memcmp(&gc[at], &g1[at], sizeof(float)) != 0;
			}
		}
		CHECKF(maxg > 0, "%s: %s has no gradient", what, lora_module_names[m]);
		if (m < PROJ_GATE) /* row by row: the same bits */
			CHECKF(differ == 0, "%s: %s: %ld gradient values differ chunked (max %.3g)", what,
			       lora_module_names[m], differ, maxd);
		else /* the sums over tokens run chunk by chunk */
			CHECKF(maxd <= 1e-5 * maxg && differ > 0, "%s: %s: max delta %.3g of %.3g (%ld differ)", what,
			       lora_module_names[m], maxd, maxg, differ);
	}
	tt_close(&r);
	free(g1);
	free(gc);
}

/* A chunk of T rows or more runs the MLP in one piece: the default's bits. */
static void check_whole(void)
{
	struct train_config cfg;
	struct tt_outcome a, b;

	chunk_config(&cfg, "poros/tiny-qwen2", MODE_BLOCKWISE, 1, 2, 1, 2, 0.1, 0);
	if (tt_train(&a, &cfg) < 0)
		return;
	chunk_config(&cfg, "poros/tiny-qwen2", MODE_BLOCKWISE, 1, 2, 1, 2, 0.1, 32);
	if (tt_train(&b, &cfg) == 0) {
		tt_same_bits("chunk of T rows vs the default", &a, &b);
		free(b.params);
	}
	free(a.params);
}

int main(void)
{
	int combos;

	set_progname("test_train_chunk");
	combos = check_parity();
	for (int nf4 = 0; nf4 < 2; nf4++) {
		check_against_unchunked("poros/tiny-qwen2", MODE_RESIDENT, nf4);
		check_against_unchunked("poros/tiny-qwen3", MODE_BLOCKWISE, nf4);
		check_against_unchunked("poros/tiny-llama", MODE_BLOCKWISE, nf4);
	}
	check_whole();
	fprintf(stderr, "test_train_chunk: %d chunked runs compared with resident: %s\n", combos,
	        failures ? "FAILED" : "all bit-identical");
	return failures != 0;
}
