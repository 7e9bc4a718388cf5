/* tests/unit/test_train_parity.c: the parity claim.  Blockwise (block
 * sizes 1, 2, 3: one of them never divides the layer count) and resident
 * give bit-identical losses at every step and bit-identical LoRA
 * parameters after training, for Qwen2 (bias), Llama (tied lm_head) and
 * Qwen3 (q/k norm), NF4 and bf16, accumulation 1 and 4, with and without
 * dropout, with and without prefetch, with and without the attention
 * checkpoints (POROS_ATTN_CKPT; the recomputation takes the forward's
 * attention or runs it again), on one compute lane or two (POROS_LANES:
 * on the CPU they run in turn, each on its own buffers).  Compared with memcmp: not "close", the
 * same bits. */
#include "test_train_common.h"

/* resident, or blockwise at block_size, with the test's shared settings */
static void parity_config(struct train_config *cfg, const char *model, int mode, int block_size, int prefetch,
                          int nf4, int accum, double dropout)
{
	tt_parity_config(cfg, model, mode, block_size, nf4, accum, dropout);
	cfg->cell.poros.enable_prefetch = prefetch;
	cfg->cell.training.warmup_steps = 1;
}

int main(void)
{
	static const char *const models[] = { "poros/tiny-qwen2", "poros/tiny-llama", "poros/tiny-qwen3" };
	static const int accums[] = { 1, 4 };
	static const double dropouts[] = { 0.0, 0.1 };
	int combos = 0;

	set_progname("test_train_parity");
	for (int mi = 0; mi < 3; mi++)
		for (int nf4 = 0; nf4 < 2; nf4++)
			for (int ai = 0; ai < 2; ai++)
				for (int di = 0; di < 2; di++) {
					struct train_config cfg;
					struct tt_outcome ref;
					char what[160];

					parity_config(&cfg, models[mi], MODE_RESIDENT, 1, 1, nf4, accums[ai], dropouts[di]);
					if (tt_reference_run(&ref, &cfg, models[mi]) < 0)
						continue;
					for (int bs = 1; bs <= 3; bs++)
						for (int v = 0; v < (bs == 1 ? 1 : 2); v++) { /* block 2 without prefetch, 3 without attention checkpoints */
							int prefetch = !(bs == 2 && v == 1), attn = !(bs == 3 && v == 1);

							snprintf(what, sizeof what, "%s %s accum %d dropout %.1f block %d%s%s%s", models[mi],
							         nf4 ? "nf4" : "bf16", accums[ai], dropouts[di], bs,
							         prefetch ? "" : " no-prefetch", attn ? "" : " POROS_ATTN_CKPT=0",
							         bs == 2 ? "" : " POROS_LANES=2");
							parity_config(&cfg, models[mi], MODE_BLOCKWISE, bs, prefetch, nf4, accums[ai],
							              dropouts[di]);
							cfg.attn_ckpt = attn;
							cfg.lanes = bs == 2 ? 1 : 2; /* the second lane's buffers (one at accumulation 1) */
							combos += tt_compare_run(what, &ref, &cfg);
						}
					free(ref.params);
				}
	fprintf(stderr, "test_train_parity: %d blockwise runs compared with resident: %s\n", combos,
	        failures ? "FAILED" : "all bit-identical");
	return failures != 0;
}
