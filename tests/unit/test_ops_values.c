/* tests/unit/test_ops_values.c: every CPU op's values (tests/ops/<op>.c,
 * OPS_TEST_VALUES sections): against hand computation or an independent
 * double-precision reference, the bf16 and NF4 encodings bit by bit, row
 * pitches (every op with an ld argument gives its unpitched bits and leaves
 * pad columns alone); then, over every op at once, the ops table and the
 * determinism contract: the same inputs give the same bits whatever the
 * OpenMP thread count. */
#include <omp.h>

#define OPS_TEST_VALUES
#include "../ops/ops_check.h"
#include "../ops/ops_all.h"

#define VALUES_ENTRY(ret, name, args) { #name, name##_values_check },
static const struct op_check value_checks[] = { POROS_OPS_LIST(VALUES_ENTRY) };

static void test_ops_table(void)
{
	int bad = 0;
#define CHECK_ENTRY(ret, name, args) bad += poros_cpu_ops.name != name##_cpu;
	POROS_OPS_LIST(CHECK_ENTRY)
#undef CHECK_ENTRY
	printf("%s poros_cpu_ops binds every op to its _cpu function (%d wrong)\n", bad ? "FAIL" : "ok  ", bad);
	failures += bad != 0;
}

/* The cuDNN backward's heads a call (ops.h): the workspace cap's divisor
 * of H, never a dS over ATTN_CUDNN_DS_MAX_BYTES whatever the cap. */
static void test_cudnn_heads(void)
{
	static const struct { const char *cap; int B, S, H, want; } cases[] = {
		{ "", 1, 8192, 28, 7 },        /* 1 GiB: 7 of 7B's heads at 8192 */
		{ "4096", 1, 8192, 28, 14 },   /* all 28 (3.8e9 bytes) were wrong on the H100 */
		{ "8192", 1, 8192, 64, 16 },   /* 16 heads: 2^31 bytes, the bound itself */
		{ "4096", 1, 16384, 8, 4 },    /* 4 of 512 MiB */
		{ "65536", 1, 65536, 8, 0 },   /* one head over the bound: the kernels' backward */
		{ "65536", 1, 32768, 8, 1 },
	};
	int bad = 0;

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		setenv("POROS_CUDNN_WORKSPACE", cases[i].cap, 1);
		int got = attention_cudnn_heads(cases[i].B, cases[i].S, cases[i].H, 128);
		if (got != cases[i].want) {
			printf("FAIL attention_cudnn_heads(B=%d, S=%d, H=%d) under POROS_CUDNN_WORKSPACE=%s: %d, want %d\n",
			       cases[i].B, cases[i].S, cases[i].H, cases[i].cap, got, cases[i].want);
			bad++;
		}
	}
	unsetenv("POROS_CUDNN_WORKSPACE");
	printf("%s the cuDNN backward's heads a call stay within the workspace cap and 2^31 dS bytes\n",
	       bad ? "FAIL" : "ok  ");
	failures += bad != 0;
}

/* The cuDNN backward's tiles on long rows (ops.h): only where one call
 * of the whole row does not run, heads of one key/value group a call,
 * chunks evened out under the workspace cap and the dS bound; and the
 * scratch then keeps one group's per-head dk, dv. */
static void test_cudnn_tiles(void)
{
	static const struct { const char *cap, *tile; int B, S, H, G, hc, C; } cases[] = {
		{ "", "auto", 1, 8192, 28, 4, 0, 0 },        /* one call takes the row: no tiles */
		{ "", "auto", 1, 131072, 28, 4, 7, 8192 },   /* 7B: a group of 7 heads, 16 chunks of 8192 */
		{ "", "auto", 1, 65536, 64, 8, 8, 8192 },    /* 72B: a group of 8 heads, 8 chunks */
		{ "", "auto", 1, 100000, 64, 8, 8, 7744 },   /* 13 chunks of 7744, the last 7072 */
		{ "", "auto", 1, 32768, 64, 8, 8, 8192 },    /* the whole row's pack over 2^27 */
		{ "65536", "auto", 1, 131072, 28, 4, 7, 11968 }, /* the dS bound, not the cap: 2^31 bytes */
		{ "", "auto", 1, 524288, 64, 8, 2, 16384 },  /* 8 or 4 heads' views over 2^27: 2 a call */
		{ "", "1024", 1, 4096, 28, 4, 7, 1024 },     /* POROS_CUDNN_TILE=N */
		{ "", "1024", 2, 2500, 8, 2, 4, 896 },       /* 3 chunks: 896, 896, 708 */
		{ "", "1024", 1, 1024, 28, 4, 0, 0 },        /* no longer than the tile */
		{ "", "", 1, 131072, 28, 4, 0, 0 },          /* unset: the kernels' backward, until measured */
	};
	int bad = 0;

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		setenv("POROS_CUDNN_WORKSPACE", cases[i].cap, 1);
		setenv("POROS_CUDNN_TILE", cases[i].tile, 1);
		struct attention_cudnn_tiling t = attention_cudnn_tiles(cases[i].B, cases[i].S, cases[i].H, cases[i].G,
		                                                        128);
		int heads = attention_dkdv_heads(cases[i].B, cases[i].S, cases[i].H, cases[i].G, 128);
		size_t ds = (size_t)cases[i].B * t.hc * t.C * t.C * 2;
		if (t.hc != cases[i].hc || t.C != cases[i].C || (t.hc && heads != cases[i].H / cases[i].G) ||
		    ds > ((size_t)1 << 31)) {
			printf("FAIL attention_cudnn_tiles(B=%d, S=%d, H=%d, G=%d) under POROS_CUDNN_WORKSPACE=%s "
			       "POROS_CUDNN_TILE=%s: %d heads, %d tokens (dk, dv heads %d), want %d, %d\n", cases[i].B,
			       cases[i].S, cases[i].H, cases[i].G, cases[i].cap, cases[i].tile, t.hc, t.C, heads,
			       cases[i].hc, cases[i].C);
			bad++;
		}
	}
	unsetenv("POROS_CUDNN_WORKSPACE");
	unsetenv("POROS_CUDNN_TILE");
	printf("%s the cuDNN backward's tiles on long rows: one group's heads a call, chunks under the bounds\n",
	       bad ? "FAIL" : "ok  ");
	failures += bad != 0;
}

/* Output buffers of one run over every op, taken in the same order each run
 * so two runs can be compared op by op. */
struct arena {
	unsigned char *base;
	size_t used, cap;
	int count;
	const char *names[64];
	size_t offsets[64], sizes[64];
};

static void *take(struct arena *a, const char *name, size_t bytes)
{
	bytes = (bytes + 15) & ~(size_t)15;
	if (a->used + bytes > a->cap || a->count == 64) {
		fprintf(stderr, "test arena too small\n");
		exit(1);
	}
	void *p = a->base + a->used;
	a->names[a->count] = name;
	a->offsets[a->count] = a->used;
	a->sizes[a->count++] = bytes;
	a->used += bytes;
	return p;
}

enum {
	DB = 2, DS = 24, DT = DB * DS, DC = 80, DH = 4, DG = 2, DD = 16, DN = 96, DR = 8, DV = 300,
	DSQ = 100003, DNF4 = 64 * 40
};

struct det_inputs {
	float x[DT * DC], q[DT * DH * DD], k[DT * DG * DD], v[DT * DG * DD], A[DR * DC], B[DN * DR];
	float dy[DT * DN], logits[DT * DV], cos_t[DS * DD / 2], sin_t[DS * DD / 2];
	float big[DSQ], absmax[DNF4 / 64], dout_attn[DT * DH * DD];
	bf16 xb[DT * DC], W[DN * DC], bias[DN], wnorm[DC], wte[DV * DC], dyb[DT * DN], gate[DT * DN], up[DT * DN];
	int32_t tokens[DT], targets[DT], pos[DT];
	uint8_t packed[DNF4 / 2];
};

static void run_every_op(struct arena *a, const struct det_inputs *in, float *scratch)
{
	float *f;
	bf16 *h;

	embedding_forward_cpu(take(a, "embedding_forward", sizeof(float) * DT * DC), in->tokens, in->wte, DT, DC);
	f = take(a, "rmsnorm_forward out", sizeof(float) * DT * DC);
	h = take(a, "rmsnorm_forward out_bf16", sizeof(bf16) * DT * DC);
	float *rstd = take(a, "rmsnorm_forward rstd", sizeof(float) * DT);
	rmsnorm_forward_cpu(f, h, DC, rstd, in->x, in->wnorm, 1e-6f, DT, DC);
	rmsnorm_backward_cpu(take(a, "rmsnorm_backward", sizeof(float) * DT * DC), in->x, in->x, in->wnorm, rstd,
			     DT, DC);
	matmul_forward_cpu(take(a, "matmul_forward", sizeof(float) * DT * DN), in->xb, DC, in->W, DC, in->bias, DT, DC,
			   DN, 0);
	matmul_forward_bf16_cpu(take(a, "matmul_forward_bf16", sizeof(bf16) * DT * DN), in->xb, DC, in->W, DC, DT, DC, DN);
	matmul_backward_input_cpu(take(a, "matmul_backward_input", sizeof(float) * DT * DC), in->dyb, DN, in->W, DC, DT,
				  DC, DN, 0);
	float *lora_out = take(a, "lora_forward out", sizeof(float) * DT * DN);
	float *u = take(a, "lora_forward u", sizeof(float) * DT * DR);
	lora_forward_cpu(&(struct lora_fwd_args){ .out = lora_out, .u = u, .in = in->xb, .ld_in = DC, .A = in->A,
		.B = in->B, .scale = 2.0f, .dropout_p = 0.1f, .dropout_seed = 7, .T = DT, .K = DC, .N = DN, .R = DR });
	/* taken one by one: the order of a call's arguments is unspecified */
	float *din = take(a, "lora_backward din", sizeof(float) * DT * DC);
	float *dA = take(a, "lora_backward dA", sizeof(float) * DR * DC);
	float *dB = take(a, "lora_backward dB", sizeof(float) * DN * DR);
	float *du = take(a, "lora_backward du", sizeof(float) * DT * DR);
	lora_backward_cpu(&(struct lora_bwd_args){ .din = din, .dA = dA, .dB = dB, .du = du, .dout = in->dyb,
		.ld_dout = DN, .in = in->xb, .ld_in = DC, .u = u, .A = in->A, .B = in->B, .scale = 2.0f,
		.dropout_p = 0.1f, .dropout_seed = 7, .T = DT, .K = DC, .N = DN, .R = DR });
	f = take(a, "rope_forward", sizeof in->q);
	memcpy(f, in->q, sizeof in->q);
	rope_forward_cpu(f, in->cos_t, in->sin_t, in->pos, DB, DS, DH, DD);
	f = take(a, "rope_backward", sizeof in->q);
	memcpy(f, in->q, sizeof in->q);
	rope_backward_cpu(f, in->cos_t, in->sin_t, in->pos, DB, DS, DH, DD);
	float *lse = take(a, "attention_forward lse", sizeof(float) * DB * DH * DS);
	bf16 *att = take(a, "attention_forward out", sizeof(bf16) * DT * DH * DD);
	attention_forward_cpu(att, DH * DD, lse, scratch, in->q, in->k, in->v, in->cos_t, in->sin_t, in->pos, DB, DS, DH,
			      DG, DD);
	attention_backward_cpu(take(a, "attention_backward dq", sizeof in->q), take(a, "attention_backward dk", sizeof in->k),
			       take(a, "attention_backward dv", sizeof in->v), scratch, in->dout_attn, att, DH * DD,
			       in->q, in->k, in->v, in->cos_t, in->sin_t, lse, in->pos, DB, DS, DH, DG, DD);
	swiglu_forward_cpu(take(a, "swiglu_forward", sizeof(bf16) * DT * DN), DN, in->gate, in->up, DT, DN);
	swiglu_backward_cpu(take(a, "swiglu_backward dgate", sizeof(bf16) * DT * DN),
			    take(a, "swiglu_backward dup", sizeof(bf16) * DT * DN), DN, in->dy, in->gate, in->up, DT, DN);
	crossentropy_forward_backward_cpu(take(a, "crossentropy dlogits", sizeof(bf16) * DT * DV),
					  take(a, "crossentropy losses", sizeof(float) * DT), in->logits, in->targets,
					  1.0f / DT, DT, DV);
	f = take(a, "add_inplace", sizeof in->big);
	memcpy(f, in->big, sizeof in->big);
	add_inplace_cpu(f, in->big, DSQ);
	cast_f32_to_bf16_cpu(take(a, "cast_f32_to_bf16", sizeof(bf16) * DSQ), DSQ, in->big, 1, DSQ);
	nf4_dequantize_cpu(take(a, "nf4_dequantize", sizeof(bf16) * DNF4), 64 * 8, in->packed, in->absmax, DNF4 / (64 * 8),
			   64 * 8);
	sumsq_cpu(take(a, "sumsq", sizeof(float)), scratch, in->big, DSQ);
	float *param = take(a, "adamw param", sizeof in->big), *m = take(a, "adamw m", sizeof in->big),
	      *v = take(a, "adamw v", sizeof in->big);
	memcpy(param, in->big, sizeof in->big);
	for (int step = 1; step <= 2; step++)
		adamw_update_cpu(param, in->big, m, v, DSQ, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.7f, step);
}

static void test_thread_determinism(void)
{
	struct det_inputs *in = NEW(struct det_inputs, 1);
	size_t cap = 16u << 20;
	struct arena one = { NEW(unsigned char, cap), 0, cap, 0, { 0 }, { 0 }, { 0 } };
	struct arena four = { NEW(unsigned char, cap), 0, cap, 0, { 0 }, { 0 }, { 0 } };
	size_t scratch_n = attention_scratch_floats(DB, DS, DH, DG, DD);
	float *scratch = NEW(float, scratch_n > 4096 ? scratch_n : 4096);

	fill_f32(in->x, DT * DC, -2, 2);
	fill_f32(in->q, DT * DH * DD, -2, 2);
	fill_f32(in->k, DT * DG * DD, -2, 2);
	fill_f32(in->v, DT * DG * DD, -1, 1);
	fill_f32(in->A, DR * DC, -0.5, 0.5);
	fill_f32(in->B, DN * DR, -0.5, 0.5);
	fill_f32(in->dy, DT * DN, -1, 1);
	fill_bf16(in->gate, DT * DN, -6, 6);
	fill_bf16(in->up, DT * DN, -2, 2);
	fill_f32(in->logits, DT * DV, -8, 8);
	fill_f32(in->cos_t, DS * DD / 2, -1, 1);
	fill_f32(in->sin_t, DS * DD / 2, -1, 1);
	fill_f32(in->big, DSQ, -3, 3);
	fill_f32(in->absmax, DNF4 / 64, 0.01, 2);
	fill_f32(in->dout_attn, DT * DH * DD, -1, 1);
	fill_bf16(in->xb, DT * DC, -2, 2);
	fill_bf16(in->W, DN * DC, -0.2, 0.2);
	fill_bf16(in->bias, DN, -1, 1);
	fill_bf16(in->wnorm, DC, 0.5, 1.5);
	fill_bf16(in->wte, DV * DC, -1, 1);
	fill_bf16(in->dyb, DT * DN, -1, 1);
	for (int t = 0; t < DT; t++) {
		in->tokens[t] = (int32_t)(rng_uniform(0, DV - 1e-9));
		in->targets[t] = t % 7 == 3 ? -1 : (int32_t)(rng_uniform(0, DV - 1e-9));
		in->pos[t] = t % DS < 10 ? t % DS : t % DS - 10; /* two documents a row */
	}
	for (int i = 0; i < DNF4 / 2; i++)
		in->packed[i] = (uint8_t)rng_uniform(0, 256 - 1e-9);

	int saved = omp_get_max_threads();
	omp_set_num_threads(1);
	run_every_op(&one, in, scratch);
	omp_set_num_threads(4);
	CHECK(omp_get_max_threads() == 4);
	run_every_op(&four, in, scratch);
	omp_set_num_threads(saved);

	int differ = 0;
	for (int i = 0; i < one.count; i++) {
		if (memcmp(one.base + one.offsets[i], four.base + four.offsets[i], one.sizes[i]) != 0) {
			printf("  %s: 1 and 4 threads give different bits\n", one.names[i]);
			differ++;
		}
	}
	printf("%s %d op outputs bit-identical with 1 and 4 OpenMP threads (%d differ)\n", differ ? "FAIL" : "ok  ",
	       one.count, differ);
	failures += differ != 0;
	free(in);
	free(one.base);
	free(four.base);
	free(scratch);
}

/* usage: test_ops_values [OP...]: the named ops' value checks alone, or
 * every op's and then the checks over all of them */
int main(int argc, char **argv)
{
	run_op_checks("test_ops_values", "value", value_checks, sizeof value_checks / sizeof value_checks[0],
	              "tests/ops/<op>.c says where the rest are", argc, argv);
	if (argc == 1) {
		test_ops_table();
		test_cudnn_heads();
		test_cudnn_tiles();
		test_thread_determinism();
	}
	return op_checks_verdict("test_ops_values");
}
