/* tests/unit/test_train_profile.c: profiling (POROS_PROFILE=1) and the memory
 * breakdown.  Profiling must not change a single bit of the losses or the
 * adapter; each op category must count exactly the calls the schedule
 * makes (so a category that silently stops being marked fails here); the
 * checkpoint traffic must be every layer's inputs out and all but the last
 * layer's back (with the attention checkpoints, all but the last layer's
 * attention out and back, and no attention forward in the recompute); and
 * the device memory by purpose must add up to the peak, with one
 * dequantized layer and two checkpoint sets in blockwise; and the head
 * runs in chunks of HEAD_CHUNK_MAX rows where its region has the room
 * (a tiny vocabulary always has it).  With two compute lanes the profile
 * counts the same calls (each lane a timeline of its own). */
#include "test_train_common.h"

#include <cjson/cJSON.h>

#include "ops.h" /* lora_ext_cols */

#define STEPS 2

struct outcome {
	float loss[STEPS];
	float *params;
	long n;
	char profile[4096];
	char breakdown[1024];
	size_t peak;
	int L, T, C, H, HD, E;
};

static int train(struct outcome *o, int mode, int nf4, int accum, int recompute, int attn, int lanes, int profile)
{
	struct train_config cfg;
	struct tt_run r;
	struct step_stats st;
	int rc = 0;

	tt_config(&cfg, "poros/tiny-qwen2");
	cfg.profile = profile;
	cfg.mode = mode;
	cfg.cell.method = mode == MODE_BLOCKWISE ? METHOD_POROS : METHOD_RESIDENT;
	cfg.cell.precision = nf4 ? PRECISION_NF4 : PRECISION_BF16;
	cfg.cell.training.gradient_accumulation_steps = accum;
	cfg.cell.training.gradient_checkpointing = recompute;
	cfg.cell.poros.block_size = 2;
	cfg.cell.training.steps = STEPS;
	cfg.cell.lora.dropout = 0.1;
	cfg.cell.training.learning_rate = 5e-3;
	cfg.attn_ckpt = attn;
	cfg.lanes = lanes;
	if (tt_open(&r, &cfg) < 0)
		return -1;
	for (int s = 1; s <= STEPS && rc == 0; s++) {
		rc = engine_step(r.e, s, &st);
		o->loss[s - 1] = (float)st.loss;
	}
	o->n = r.lo->total;
	o->params = xmalloc((size_t)o->n * sizeof *o->params);
	engine_lora_read(r.e, o->params);
	if (engine_profile_json(r.e, o->profile, sizeof o->profile) < 0)
		o->profile[0] = '\0';
	CHECKF(engine_vram_breakdown_json(r.e, o->breakdown, sizeof o->breakdown) > 0, "breakdown does not fit");
	o->peak = engine_vram_peak(r.e);
	o->L = r.mc.num_hidden_layers;
	o->T = cfg.cell.training.seq_len * cfg.cell.training.batch_size;
	o->C = r.mc.hidden_size;
	o->H = r.mc.num_attention_heads;
	o->HD = o->H * r.mc.head_dim;
	o->E = lora_ext_cols(cfg.cell.lora.rank); /* on with an adapter (POROS_LORA_EXT unset) */
	tt_close(&r);
	return rc;
}

static double num(const cJSON *o, const char *a, const char *b)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, a);

	if (b)
		x = cJSON_GetObjectItemCaseSensitive(x, b);
	return cJSON_IsNumber(x) ? x->valuedouble : -1.0;
}

static void check_bits(const char *what, const struct outcome *a, const struct outcome *b)
{
	long first = -1;

	for (int s = 0; s < STEPS; s++)
		CHECKF(memcmp(&a->loss[s], &b->loss[s], sizeof(float)) == 0, "%s: step %d loss %.9g vs %.9g profiled",
		         what, s + 1, a->loss[s], b->loss[s]);
	for (long i = 0; i < a->n && first < 0; i++)
		if (memcmp(&a->params[i], &b->params[i], sizeof(float)) != 0)
			first = i;
	CHECKF(first < 0, "%s: LoRA value %ld differs with profiling on", what, first);
}

/* Calls in step 2: 7 projections per layer, forward (and the recompute in
 * backward, which skips down_proj's base GEMM: its output is not needed;
 * blockwise always, resident with recompute) for each micro-batch; NF4
 * dequantizes per layer and pass (blockwise) or per layer, pass and
 * micro-batch (resident). */
static void check_profile(const char *what, const struct outcome *o, int blockwise, int nf4, int k, int recompute,
                          int attn)
{
	cJSON *p = cJSON_Parse(o->profile);
	long L = o->L, passes = blockwise || recompute ? 2 : 1, lora_fwd = passes * L * 7 * k, bwd = L * 7 * k;
	long fwd = lora_fwd - (passes - 1) * L * k, chunks = (o->T + 127) / 128; /* HEAD_CHUNK rows */
	long attn_fwd = (blockwise && attn ? 1 : passes) * L * k;
	double sum = 0, set_bytes = (double)k * o->T * o->C * sizeof(float);
	/* a record's attention part: (T,HD+E) bf16 and (H*T) fp32 per micro-batch, each on LAYOUT_ALIGN */
	double att_min = blockwise && attn ? (double)k * o->T * ((o->HD + o->E) * sizeof(uint16_t) + o->H * sizeof(float)) : 0;
	double att_max = att_min > 0 ? att_min + 2.0 * k * LAYOUT_ALIGN : 0, att_d2h, att_h2d;
	static const char *const cats[] = { "gemm_fwd", "gemm_bwd_input", "lora_fwd", "lora_bwd", "attn_fwd",
		                            "attn_bwd", "norm", "rope", "swiglu", "elementwise", "head_ce",
		                            "dequant", "embedding", "optimizer", "wait_copy", "other" };

	CHECKF(p != NULL, "%s: profile is not JSON: \"%s\"", what, o->profile);
	if (p == NULL)
		return;
	for (size_t i = 0; i < sizeof cats / sizeof *cats; i++) {
		double ms = num(p, cats[i], "ms");

		CHECKF(ms >= 0 && num(p, cats[i], "n") >= 0, "%s: category %s missing", what, cats[i]);
		sum += ms;
	}
	CHECKF(fabs(sum - num(p, "total_ms", NULL)) < 0.01 + 1e-3 * sum, "%s: categories add to %.3f, total %.3f",
	         what, sum, num(p, "total_ms", NULL));
	CHECKF(num(p, "total_ms", NULL) > 0, "%s: no time measured", what);
	CHECKF(num(p, "gemm_fwd", "n") == fwd, "%s: gemm_fwd n %g, want %ld", what, num(p, "gemm_fwd", "n"), fwd);
	CHECKF(num(p, "lora_fwd", "n") == lora_fwd, "%s: lora_fwd n %g, want %ld", what, num(p, "lora_fwd", "n"),
	       lora_fwd);
	CHECKF(num(p, "gemm_bwd_input", "n") == bwd, "%s: gemm_bwd_input n %g, want %ld", what,
	         num(p, "gemm_bwd_input", "n"), bwd);
	CHECKF(num(p, "lora_bwd", "n") == bwd, "%s: lora_bwd n %g, want %ld", what, num(p, "lora_bwd", "n"), bwd);
	CHECKF(num(p, "attn_fwd", "n") == attn_fwd && num(p, "attn_bwd", "n") == L * k,
	       "%s: attention n %g/%g, want %ld/%ld", what, num(p, "attn_fwd", "n"), num(p, "attn_bwd", "n"), attn_fwd,
	       L * k);
	CHECKF(num(p, "swiglu", "n") == (passes + 1) * L * k, "%s: swiglu n %g", what, num(p, "swiglu", "n"));
	/* the head: its norm forward and backward, and per chunk of rows the
	 * logits GEMM, the loss and the GEMM back */
	CHECKF(num(p, "embedding", "n") == k && num(p, "head_ce", "n") == k * (2 + 3 * chunks),
	       "%s: embedding n %g, head_ce n %g, want %d and %ld", what, num(p, "embedding", "n"),
	       num(p, "head_ce", "n"), k, k * (2 + 3 * chunks));
	CHECKF(num(p, "optimizer", "n") == 2, "%s: optimizer n %g (sumsq, adamw)", what, num(p, "optimizer", "n"));
	/* a pass that starts on the layer the previous one ended with (the
	 * last layer into backward, layer 0 into the next forward) finds it
	 * still dequantized: 2L-2 layers per pass pair from step 2 on */
	CHECKF(num(p, "dequant", "n") == (nf4 ? 7 * (2 * L - 2) * (blockwise ? 1 : k) : 0), "%s: dequant n %g", what,
	         num(p, "dequant", "n"));
	/* every layer's inputs out, all but the last layer's record back; the
	 * last layer's attention stays on the device */
	att_d2h = num(p, "ckpt_d2h_bytes", NULL) - (blockwise ? L * set_bytes : 0);
	att_h2d = num(p, "ckpt_h2d_bytes", NULL) - (blockwise ? (L - 1) * set_bytes : 0);
	CHECKF(att_d2h == att_h2d && att_d2h >= (L - 1) * att_min && att_d2h <= (L - 1) * att_max,
	       "%s: checkpoint traffic %g out, %g back (attention %g / %g, want (L-1) x %g..%g)", what,
	       num(p, "ckpt_d2h_bytes", NULL), num(p, "ckpt_h2d_bytes", NULL), att_d2h, att_h2d, att_min, att_max);
	CHECKF(num(p, "events", NULL) > 0, "%s: no events", what);
	cJSON_Delete(p);
}

static void check_breakdown(const char *what, const struct outcome *o, int blockwise, int nf4, int k, int attn)
{
	cJSON *b = cJSON_Parse(o->breakdown), *it;
	double att = blockwise && attn ? (double)k * o->T * ((o->HD + o->E) * sizeof(uint16_t) + o->H * sizeof(float)) : 0;
	double sum = 0, set_mib = ((double)k * o->T * o->C * sizeof(float) + att) / MIB;

	CHECKF(b != NULL, "%s: breakdown is not JSON: \"%s\"", what, o->breakdown);
	if (b == NULL)
		return;
	cJSON_ArrayForEach(it, b) sum += it->valuedouble;
	CHECKF(fabs(sum - (double)o->peak / MIB) < 0.05 * cJSON_GetArraySize(b) + 1e-9,
	         "%s: breakdown adds to %.2f MiB, peak %.2f", what, sum, (double)o->peak / MIB);
	CHECKF(num(b, blockwise ? "slabs" : "layers", NULL) > 0 && num(b, blockwise ? "layers" : "slabs", NULL) < 0,
	         "%s: weights under the wrong purpose: %s", what, o->breakdown);
	CHECKF((num(b, "dequant", NULL) > 0) == nf4, "%s: dequant %g", what, num(b, "dequant", NULL));
	CHECKF(num(b, "lora_state", NULL) > 0 && num(b, "activations", NULL) > 0 && num(b, "lm_head", NULL) > 0 &&
	         num(b, "workspace", NULL) > 0, "%s: a purpose is missing: %s", what, o->breakdown);
	/* blockwise keeps the step's embedding rows in the residual-stream gradients (plan.c) */
	CHECKF((num(b, "embedding", NULL) > 0) == !blockwise, "%s: embedding %g MiB (blockwise %d)", what,
	       num(b, "embedding", NULL), blockwise);
	if (blockwise)
		CHECKF(fabs(num(b, "checkpoints", NULL) - 2 * set_mib) < 0.05, "%s: checkpoints %g MiB, want 2 records %g",
		         what, num(b, "checkpoints", NULL), 2 * set_mib);
	else
		CHECKF(fabs(num(b, "checkpoints", NULL) - (o->L + 1) * set_mib) < 0.05 * (o->L + 1),
		         "%s: checkpoints %g MiB, want L+1 = %d inputs", what, num(b, "checkpoints", NULL), o->L + 1);
	cJSON_Delete(b);
}

/* The head's op calls in one step at T = B*S rows: its norm forward and
 * backward, and per chunk the logits GEMM, the loss and the GEMM back. */
static void check_head_chunks(int S, int B, int chunks)
{
	struct train_config cfg;
	struct tt_run r;
	struct step_stats st;
	char prof[4096], what[64];
	cJSON *p;

	snprintf(what, sizeof what, "head at T = %d", S * B);
	tt_config(&cfg, "poros/tiny-qwen2");
	cfg.profile = 1;
	cfg.mode = MODE_BLOCKWISE;
	cfg.cell.method = METHOD_POROS;
	cfg.cell.training.seq_len = S;
	cfg.cell.training.batch_size = B;
	cfg.cell.training.steps = 1;
	if (tt_open(&r, &cfg) < 0) {
		CHECKF(0, "%s: engine did not open", what);
		return;
	}
	CHECKF(engine_step(r.e, 1, &st) == 0 && engine_profile_json(r.e, prof, sizeof prof) >= 0, "%s: step failed",
	       what);
	p = cJSON_Parse(prof);
	CHECKF(num(p, "head_ce", "n") == 2 + 3 * chunks, "%s: head_ce n %g, want %d (%d chunks)", what,
	       num(p, "head_ce", "n"), 2 + 3 * chunks, chunks);
	cJSON_Delete(p);
	tt_close(&r);
}

int main(void)
{
	static const struct {
		int mode, nf4, accum, recompute, attn, lanes;
	} cases[] = { { MODE_BLOCKWISE, 1, 2, 0, 1, 0 }, { MODE_BLOCKWISE, 0, 3, 0, 1, 0 }, { MODE_BLOCKWISE, 1, 2, 0, 0, 0 },
		      { MODE_BLOCKWISE, 1, 3, 0, 1, 2 }, { MODE_RESIDENT, 1, 2, 1, 1, 0 }, { MODE_RESIDENT, 1, 2, 0, 1, 0 } };

	set_progname("test_train_profile");
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct outcome plain, prof;
		char what[96];
		int blockwise = cases[i].mode == MODE_BLOCKWISE;

		snprintf(what, sizeof what, "%s %s accum %d%s%s%s", blockwise ? "blockwise" : "resident",
		         cases[i].nf4 ? "nf4" : "bf16", cases[i].accum,
		         !blockwise && cases[i].recompute ? " recompute" : "",
		         blockwise && !cases[i].attn ? " POROS_ATTN_CKPT=0" : "", cases[i].lanes == 2 ? " POROS_LANES=2" : "");
		memset(&plain, 0, sizeof plain);
		memset(&prof, 0, sizeof prof);
		if (train(&plain, cases[i].mode, cases[i].nf4, cases[i].accum, cases[i].recompute, cases[i].attn,
		          cases[i].lanes, 0) < 0 ||
		    train(&prof, cases[i].mode, cases[i].nf4, cases[i].accum, cases[i].recompute, cases[i].attn,
		          cases[i].lanes, 1) < 0) {
			CHECKF(0, "%s: a run failed", what);
			free(plain.params);
			free(prof.params);
			continue;
		}
		CHECKF(plain.profile[0] == '\0', "%s: a profile without profiling: %s", what, plain.profile);
		CHECKF(plain.loss[1] != plain.loss[0], "%s: training did not move the loss", what);
		check_bits(what, &plain, &prof);
		check_profile(what, &prof, blockwise, cases[i].nf4, cases[i].accum, cases[i].recompute, cases[i].attn);
		check_breakdown(what, &plain, blockwise, cases[i].nf4, cases[i].accum, cases[i].attn);
		CHECKF(strcmp(plain.breakdown, prof.breakdown) == 0, "%s: profiling changed the memory: %s vs %s", what,
		         plain.breakdown, prof.breakdown);
		free(plain.params);
		free(prof.params);
	}
	check_head_chunks(512, 2, 1);   /* 1024 rows: one chunk */
	check_head_chunks(320, 4, 2);   /* 1280 rows: 1024 + 256 */
	fprintf(stderr, "test_train_profile: %s\n", failures ? "FAILED" : "ok");
	return failures != 0;
}
