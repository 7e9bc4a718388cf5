/* tests/unit/test_train_ext.c: NF4 and bf16 training with the LoRA
 * extension (the adapter's terms summed inside the base GEMMs,
 * kernels/ops.h) against the fallback path (POROS_LORA_EXT=0: LoRA term
 * written first, base GEMM adds).  Only the order of fp32 sums differs, so one step's loss and
 * gradients agree to rounding, with and without dropout (backward then
 * falls back to the masked din), for Qwen2 (biases ride in the extension)
 * and Qwen3; they must not be the same bits, or the extension was not on,
 * and the dequantization buffer (NF4) or the stored layers (bf16) are
 * larger by the extension's rows and columns.  (Trained adapters are not compared: AdamW's first steps turn
 * a rounding-sized gradient into a step of lr either way.)  The weight
 * side of the extension must follow every update of A and B. */
#include "test_train_common.h"

/* The vram breakdown's figure (MiB) for one purpose, in bytes. */
static size_t purpose_bytes(struct engine *e, const char *purpose)
{
	char buf[4096], key[64];
	const char *p;

	if (engine_vram_breakdown_json(e, buf, sizeof buf) < 0)
		return 0;
	snprintf(key, sizeof key, "\"%s\":", purpose);
	p = strstr(buf, key);
	return p ? (size_t)(strtod(p + strlen(key), NULL) * 1048576.0 + 0.5) : 0;
}

static int open_run(struct tt_run *r, const char *model, int nf4, int ext, int mode, double dropout)
{
	struct train_config cfg;
	int rc;

	tt_config(&cfg, model);
	cfg.cell.precision = nf4 ? PRECISION_NF4 : PRECISION_BF16;
	cfg.mode = mode;
	cfg.cell.poros.block_size = 1;
	cfg.cell.training.gradient_accumulation_steps = 2;
	cfg.cell.lora.dropout = dropout;
	cfg.cell.training.steps = 3;
	cfg.cell.training.learning_rate = 5e-3;
	cfg.lora_ext = ext;
	rc = tt_open(r, &cfg);
	return rc;
}

/* One step from the same nonzero adapter (B = 0, PEFT's start, would make
 * A's gradient vanish): loss to fp32 rounding, gradients to the few bf16
 * roundings that a different fp32 sum can flip downstream (a wrong or
 * missing term moves them by their own size). */
static void one_step(const char *model, int nf4, double dropout)
{
	struct tt_run r[2];
	struct step_stats st[2];
	float *init = NULL, *g[2] = { NULL, NULL };
	size_t dq[2];
	long n = 0;
	char what[96];

	snprintf(what, sizeof what, "%s %s dropout %.1f", model, nf4 ? "nf4" : "bf16", dropout);
	for (int ext = 0; ext < 2; ext++) {
		if (open_run(&r[ext], model, nf4, ext, MODE_RESIDENT, dropout) < 0) {
			CHECKF(0, "%s: engine did not open", what);
			return;
		}
		n = r[ext].lo->total;
		if (!init) {
			init = xcalloc((size_t)n, sizeof *init);
			tt_fill_lora(r[ext].lo, init, 0, 0.05f, 7);
		}
		engine_lora_write(r[ext].e, init);
		CHECKF(engine_step(r[ext].e, 1, &st[ext]) == 0, "%s: step failed", what);
		g[ext] = xmalloc((size_t)n * sizeof *g[ext]);
		engine_grad_read(r[ext].e, g[ext]);
		dq[ext] = purpose_bytes(r[ext].e, nf4 ? "dequant" : "layers");
		tt_close(&r[ext]);
	}
	double diff = 0, norm = 0;
	long same = 0;
	for (long i = 0; i < n; i++) {
		diff += ((double)g[1][i] - g[0][i]) * ((double)g[1][i] - g[0][i]);
		norm += (double)g[0][i] * g[0][i];
		same += g[1][i] == g[0][i];
	}
	diff = sqrt(diff), norm = sqrt(norm);
	/* a flipped bf16 rounding of an activation moves the loss by ~1e-5 */
	CHECKF(fabs(st[1].loss - st[0].loss) <= 1e-4 * fabs(st[0].loss), "%s: loss %.9g (extension) vs %.9g (fallback)",
	       what, st[1].loss, st[0].loss);
	CHECKF(norm > 0 && diff <= 1e-2 * norm, "%s: gradients differ by %.3g of their norm %.3g", what,
	       norm > 0 ? diff / norm : 0.0, norm);
	CHECKF(same < n, "%s: gradients are the same bits: the extension was not used", what);
	CHECKF(dq[1] > dq[0], "%s: %s %zu bytes with the extension, %zu without", what, nf4 ? "dequant buffer" : "layers",
	       dq[1], dq[0]);
	fprintf(stderr, "test_train_ext: %s: loss %.9g vs %.9g, gradients within %.2e of their norm\n", what, st[1].loss,
	        st[0].loss, norm > 0 ? diff / norm : 0.0);
	free(init);
	free(g[0]);
	free(g[1]);
}

/* The weight side follows every optimizer step: two identical runs, but
 * the second is handed its own adapter (engine_lora_write, which marks
 * the extension stale) before step 3; step 3 must be the same bits in
 * both, though each dequantization buffer still held layer 0, with its
 * extension for step 2's adapter, from step 2's backward. */
static void follows_updates(const char *model, int nf4, int mode)
{
	double loss3[2];
	char what[96];

	snprintf(what, sizeof what, "%s %s %s", model, nf4 ? "nf4" : "bf16", mode == MODE_BLOCKWISE ? "blockwise" : "resident");
	for (int i = 0; i < 2; i++) {
		struct tt_run r;
		struct step_stats st;

		loss3[i] = NAN;
		if (open_run(&r, model, nf4, 1, mode, 0.0) < 0) {
			CHECKF(0, "%s: engine did not open", what);
			return;
		}
		CHECKF(engine_step(r.e, 1, &st) == 0 && engine_step(r.e, 2, &st) == 0, "%s: steps 1-2 failed", what);
		if (i == 1) {
			float *p = xmalloc((size_t)r.lo->total * sizeof *p);
			engine_lora_read(r.e, p);
			engine_lora_write(r.e, p);
			free(p);
		}
		CHECKF(engine_step(r.e, 3, &st) == 0, "%s: step 3 failed", what);
		loss3[i] = st.loss;
		tt_close(&r);
	}
	CHECKF(memcmp(&loss3[0], &loss3[1], sizeof *loss3) == 0, "%s: step 3 loss %.9g, %.9g with the adapter rewritten",
	       what, loss3[0], loss3[1]);
	fprintf(stderr, "test_train_ext: %s: step 3 the same bits with and without a rewrite (%.9g)\n", what, loss3[0]);
}

int main(void)
{
	static const char *const models[] = { "poros/tiny-qwen2", "poros/tiny-qwen3" };

	set_progname("test_train_ext");
	for (int mi = 0; mi < 2; mi++)
		for (int nf4 = 1; nf4 >= 0; nf4--) {
			one_step(models[mi], nf4, 0.0);
			one_step(models[mi], nf4, 0.1);
			follows_updates(models[mi], nf4, MODE_BLOCKWISE);
			follows_updates(models[mi], nf4, MODE_RESIDENT);
		}
	return test_verdict("test_train_ext");
}
