/* tests/ops/attention_backward.c: attention_backward's checks: dq, dk, dv of
 * the attention, under the same masks.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

/* no value check here: attention_forward.c's packed-documents check runs it
 * too (bit-identical to each document alone) */
#define attention_backward_values_check NULL

#ifdef OPS_TEST_GRAD
struct attn_ctx {
	int B, S, H, G, D;
	const double *lw;
	double *q, *k, *v;
};

static double attn_loss(const void *p)
{
	const struct attn_ctx *c = p;
	return ref_attention_dot(c->lw, c->q, c->k, c->v, c->B, c->S, c->H, c->G, c->D);
}

static void test_attention_backward(void)
{
	enum { B = 2, S = 5, H = 4, G = 2, D = 8, T = B * S, NQ = T * H * D, NK = T * G * D };
	float q[NQ], k[NK], v[NK], lw[NQ], lse[B * H * S], dq[NQ], dk[NK], dv[NK];
	bf16 out[NQ];
	double qd[NQ], kd[NK], vd[NK], lwd[NQ], want_q[NQ], want_k[NK], want_v[NK], bq[NQ], bk[NK], bv[NK];
	double want_delta[B * H * S], bdelta[B * H * S];
	float *scratch = NEW(float, attention_scratch_floats(B, S, H, G, D));

	/* scores up to ~8: far from uniform, so the softmax Jacobian matters */
	fill_bf16_values(q, NQ, -2.0, 2.0);
	fill_bf16_values(k, NK, -2.0, 2.0);
	fill_bf16_values(v, NK, -1.0, 1.0);
	fill_bf16_values(lw, NQ, -1.0, 1.0);
	attention_forward_cpu(out, H * D, lse, scratch, q, k, v, NULL, NULL, NULL, B, S, H, G, D);
	fill_nan(dq, NQ); /* written, not accumulated: every element must be set */
	fill_nan(dk, NK);
	fill_nan(dv, NK);
	attention_backward_cpu(dq, dk, dv, scratch, lw, out, H * D, q, k, v, NULL, NULL, lse, NULL, B, S, H, G, D);

	widen_f32(qd, q, NQ);
	widen_f32(kd, k, NK);
	widen_f32(vd, v, NK);
	widen_f32(lwd, lw, NQ);
	struct attn_ctx ctx = { B, S, H, G, D, lwd, qd, kd, vd };
	finite_diff(want_q, qd, NQ, attn_loss, &ctx);
	finite_diff(want_k, kd, NK, attn_loss, &ctx);
	finite_diff(want_v, vd, NK, attn_loss, &ctx);
	ref_attention_bounds(bq, bk, bv, want_delta, bdelta, lwd, qd, kd, vd, B, S, H, G, D);
	/* The inputs are bf16 values, so their rounding changes nothing.  What
	 * the contract rounds, P and dS, and the forward's p and out that delta
	 * reads, move each gradient by at most 2^-8 of its sum of |terms| (1%
	 * over for taking |dS| from the double side).
	 * The rest is fp32: P is rebuilt as exp(score - lse) with lse rounded
	 * to fp32 (|lse| <= ~10, so ~1e-6 relative in P), then two fp32 sums of
	 * <= 2*5 terms: gradients of O(1) hold ~2e-6 relative; 1e-5 atol/rtol. */
	check_bounded("attention_backward dq (B=2 H=4 G=2)", dq, want_q, bq, NQ, 1.01 / 256, 1e-5, 1e-5);
	check_bounded("attention_backward dk (B=2 H=4 G=2)", dk, want_k, bk, NK, 1.01 / 256, 1e-5, 1e-5);
	check_bounded("attention_backward dv (B=2 H=4 G=2)", dv, want_v, bv, NK, 1.01 / 256, 1e-5, 1e-5);

	/* delta, left in the scratch (ops.h's attention_scratch_at): the
	 * contract's bf16(dout_i) . out_i, d ascending in fp32, bit for bit; and
	 * that is rowsum(P dP) of the double reference within the forward's
	 * roundings (2^-8 of 2 W_i, ref_attention_bounds) and D fp32 terms */
	const float *delta = attention_scratch_at(scratch, B, S, H, G, D).delta;
	float want_bits[B * H * S];
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			for (int i = 0; i < S; i++) {
				float acc = 0.0f;
				for (int d = 0; d < D; d++) {
					size_t e = ((size_t)b * S + i) * H * D + (size_t)h * D + d;
					acc += f32_from_bf16(bf16_from_f32(lw[e])) * f32_from_bf16(out[e]);
				}
				want_bits[((size_t)b * H + h) * S + i] = acc;
			}
	check_same_bits("attention_backward delta = bf16(dout) . out, d ascending", delta, want_bits,
			sizeof want_bits);
	check_bounded("attention_backward delta against the double rowsum(P dP)", delta, want_delta, bdelta,
		      B * H * S, 1.01 / 256, 1e-5, 1e-5);

	/* the products read q, k, v and dout rounded to bf16 and nothing finer:
	 * moving every input by 2^-10 of itself (under half a bf16 ulp) changes
	 * no bit, moving it by 2^-6 (over one ulp) changes the gradients */
	float q2[NQ], k2[NK], v2[NK], lw2[NQ], dq2[NQ], dk2[NK], dv2[NK];
	for (int pass = 0; pass < 2; pass++) {
		float nudge = pass == 0 ? 1.0f + 1.0f / 1024 : 1.0f + 1.0f / 64;
		for (int i = 0; i < NQ; i++) {
			q2[i] = q[i] * nudge;
			lw2[i] = lw[i] * nudge;
		}
		for (int i = 0; i < NK; i++) {
			k2[i] = k[i] * nudge;
			v2[i] = v[i] * nudge;
		}
		attention_backward_cpu(dq2, dk2, dv2, scratch, lw2, out, H * D, q2, k2, v2, NULL, NULL, lse, NULL, B,
				       S, H, G, D);
		int same = memcmp(dq, dq2, sizeof dq) == 0 && memcmp(dk, dk2, sizeof dk) == 0 &&
			   memcmp(dv, dv2, sizeof dv) == 0;
		int ok = pass == 0 ? same : !same;
		printf("%s attention_backward with inputs moved by %s bf16 ulp: %s bits\n", ok ? "ok  " : "FAIL",
		       pass == 0 ? "under half a" : "over one", same ? "same" : "different");
		failures += !ok;
	}
	free(scratch);
}

static void attention_backward_grad_check(void)
{
	test_attention_backward();
}
#endif

#ifdef OPS_TEST_CUDA
#include "attention_case.h"

static void attention_bwd_gpu(const void *p)
{
	const struct attention_case *a = p;
	gpu->ops->attention_backward(a->dq, a->dk, a->dv, a->scratch, a->dout, a->out, a->ld_out, a->q, a->k, a->v,
	                             a->cos, a->sin, a->lse_in, a->pos, a->B, a->S, a->H, a->G, a->D);
}

/* A chain of fp32 sums in different orders: P rebuilt from lse, dP (D
 * terms), delta (D terms, from the same out on both sides), dq (S terms), dk and dv (S terms times the
 * group's heads); each stage adds ~1e-6 relative of its scale.  On top,
 * the bf16 roundings of P (for dv) and dS (for dq, dk) can flip by one ulp
 * between the sides, as in the forward: one flipped dS_ij moves dq_i by up
 * to scale 2^-8 |dS_ij| |k_j|, a flipped P_ij moves dv_j by 2^-8 P_ij
 * |dout_i|.  1e-3, 1e-3, 5e-4 of the largest value (dq, dk, dv) and 1e-4
 * relative sit between what those flips need and what a CPU that skipped
 * the contract's roundings needs (docs/numerics.md, "Tolerances"). */
static void test_attention_backward(int B, int S, int H, int G, int D, int ld_out, int docs)
{
	struct gpu_case c;
	if (!case_begin(&c, "attention_backward B=%d S=%d H=%d G=%d D=%d ld_out=%d docs=%d", B, S, H, G, D, ld_out,
	                docs))
		return;
	int32_t *pos = doc_positions(B, S, docs);
	size_t T = (size_t)B * S;
	float *q = rand_f32(T * H * D, -1, 1), *k = rand_f32(T * G * D, -1, 1), *v = rand_f32(T * G * D, -1, 1);
	float *dout = rand_f32(T * H * D, -1, 1);
	size_t sf = attention_scratch_floats(B, S, H, G, D);
	float *scratch = host_alloc(sf * 4), *lse = host_alloc((size_t)B * H * S * 4);
	bf16 *out = host_alloc(T * H * D * 2);
	attention_forward_cpu(out, H * D, lse, scratch, q, k, v, NULL, NULL, pos, B, S, H, G, D);
	float *ref_dq = host_alloc(T * H * D * 4), *ref_dk = host_alloc(T * G * D * 4);
	float *ref_dv = host_alloc(T * G * D * 4);
	double t0 = now_ms();
	attention_backward_cpu(ref_dq, ref_dk, ref_dv, scratch, dout, out, H * D, q, k, v, NULL, NULL, lse, pos, B, S,
			       H, G, D);
	c.cpu_ms = now_ms() - t0;

	/* the device reads the CPU forward's out, at ld_out with NaN pads (a
	 * read past a head's D columns would poison delta) */
	struct attention_case a = { 0 };
	attention_case_inputs(&a, q, k, v, pos, B, S, H, G, D);
	a.ld_out = ld_out;
	a.out = dev_from(pitched_copy(out, T, (size_t)H * D, (size_t)ld_out, 2), T * ld_out * 2, 0);
	a.dout = dev_from(dout, T * H * D * 4, 0);
	a.lse_in = dev_from(lse, (size_t)B * H * S * 4, 0);
	a.dq = case_out(&c, "dq", T * H * D * 4, NULL, 0);
	a.dk = case_out(&c, "dk", T * G * D * 4, NULL, 0);
	a.dv = case_out(&c, "dv", T * G * D * 4, NULL, 0);
	a.scratch = case_scratch(&c, attention_scratch_floats_cuda(B, S, H, G, D) * 4);
	case_run(&c, attention_bwd_gpu, &a);
	/* The cuDNN route (ops.h) hands back bf16 gradients (one rounding more:
	 * rtol), and its own exponential and lse flip the bf16 roundings of
	 * some P and dS elements that the CPU's and the kernels' share, each
	 * moving a gradient by 2^-8 of one term: up to 1e-2 of the largest
	 * gradient on the realistic shapes (docs/numerics.md, "Tolerances") */
	int route = !pos && attention_cudnn_route(D, S) && attention_cudnn_heads(B, S, H, D) > 0;
	double rtol = route ? BF16_RTOL : 1e-4, atol = route ? 1e-2 : 1e-3;
	check(&c, "dq", ref_dq, T * H * D, 0, atol, rtol);
	check(&c, "dk", ref_dk, T * G * D, 0, atol, rtol);
	check(&c, "dv", ref_dv, T * G * D, 0, route ? atol : 5e-4, rtol);
	case_end(&c);
}

/* A row of one document (pos = t % S) means what pos NULL means, and the
 * engine passes NULL for such micro-batches (tools/poros-train/layer.c):
 * the kernels must give the same bits both ways, forward and backward,
 * though with pos every tile takes the masked path and the first-key
 * table.  Each side's backward reads its own forward's out and lse. */
struct plain_pos_case {
	struct attention_case side[2]; /* pos NULL, pos t % S */
};

static void attention_plain_pos_gpu(const void *p)
{
	const struct plain_pos_case *x = p;
	for (int i = 0; i < 2; i++) {
		attention_fwd_gpu(&x->side[i]);
		attention_bwd_gpu(&x->side[i]);
	}
}

/* Side 0 of such a case alone: its forward, then its backward. */
static void attention_side0_gpu(const void *p)
{
	const struct plain_pos_case *x = p;
	attention_fwd_gpu(&x->side[0]);
	attention_bwd_gpu(&x->side[0]);
}

/* The outputs of the two sides of such a case, out, lse, dq, dk, dv: the
 * case's output names and their bytes. */
static const char *const pair_names[2][5] = { { "out0", "lse0", "dq0", "dk0", "dv0" },
	                                      { "out1", "lse1", "dq1", "dk1", "dv1" } };

static void pair_bytes(size_t bytes[5], int B, int S, int H, int G, int D)
{
	size_t T = (size_t)B * S;
	bytes[0] = T * H * D * 2;
	bytes[1] = (size_t)B * H * S * 4;
	bytes[2] = T * H * D * 4;
	bytes[3] = bytes[4] = T * G * D * 4;
}

/* Side i (inputs set) gets dout, the shared scratch and its outputs; its
 * backward reads its own forward's out and lse. */
static void pair_side(struct gpu_case *c, struct attention_case *a, int i, const size_t bytes[5], const float *dout,
                      float *scratch)
{
	a->ld_out = a->H * a->D;
	a->scratch = scratch;
	a->dout = dev_from(dout, bytes[2], 0);
	a->out = case_out(c, pair_names[i][0], bytes[0], NULL, 0);
	a->lse = case_out(c, pair_names[i][1], bytes[1], NULL, 0);
	a->lse_in = a->lse;
	a->dq = case_out(c, pair_names[i][2], bytes[2], NULL, 0);
	a->dk = case_out(c, pair_names[i][3], bytes[3], NULL, 0);
	a->dv = case_out(c, pair_names[i][4], bytes[4], NULL, 0);
}

/* Side 1's five outputs bit for bit those of side 0. */
static void pair_check_exact(struct gpu_case *c, const size_t bytes[5])
{
	for (int o = 0; o < 5; o++)
		check_exact(c, pair_names[1][o], got(c, pair_names[0][o]), bytes[o], o == 0 ? 2 : 4);
}

/* An environment variable set for a case and restored after. */
struct saved_env {
	const char *name;
	char *value; /* the caller's, NULL when unset */
};

static void env_set(struct saved_env *e, const char *value)
{
	const char *was = getenv(e->name);
	e->value = was ? strdup(was) : NULL;
	setenv(e->name, value, 1);
}

static void env_restore(struct saved_env *e)
{
	if (e->value)
		setenv(e->name, e->value, 1);
	else
		unsetenv(e->name);
	free(e->value);
	e->value = NULL;
}

/* case_run on the kernels (POROS_ATTENTION=mma) */
static void case_run_kernels(struct gpu_case *c, gpu_op op, const void *args)
{
	struct saved_env e = {"POROS_ATTENTION", NULL};
	env_set(&e, "mma");
	case_run(c, op, args);
	env_restore(&e);
}

static void test_attention_plain_pos(int B, int S, int H, int G, int D)
{
	struct gpu_case c;
	if (!case_begin(&c, "attention_forward+backward pos t %% S vs NULL B=%d S=%d H=%d G=%d D=%d", B, S, H, G, D))
		return;
	size_t T = (size_t)B * S, bytes[5];
	float *q = rand_f32(T * H * D, -1, 1), *k = rand_f32(T * G * D, -1, 1), *v = rand_f32(T * G * D, -1, 1);
	float *dout = rand_f32(T * H * D, -1, 1), *scratch;
	struct plain_pos_case x;
	memset(&x, 0, sizeof x);
	pair_bytes(bytes, B, S, H, G, D);
	scratch = case_scratch(&c, attention_scratch_floats_cuda(B, S, H, G, D) * 4);
	for (int i = 0; i < 2; i++) {
		attention_case_inputs(&x.side[i], q, k, v, i ? doc_positions(B, S, 1) : NULL, B, S, H, G, D);
		pair_side(&c, &x.side[i], i, bytes, dout, scratch);
	}
	/* the kernels' claim: NULL positions take the cuDNN route where it
	 * runs, which rounds otherwise (ops.h), so this compares the kernels */
	case_run_kernels(&c, attention_plain_pos_gpu, &x);
	pair_check_exact(&c, bytes);
	case_end(&c);
}

/* The rotation inside the ops: given the RoPE tables, both directions
 * give the bits of q and k rotated beforehand (rope_forward's pair, which
 * the CPU computes to the same bits), no tables, and dq, dk turned back by
 * rope_backward after, so the engine runs no rope pass; and the forward
 * with tables stays within the usual bound of the CPU's with tables.
 * D = 64 or 128 turns dq back in the dq kernel's store, other D in a
 * pass after; G < H turns dk in the group sum, G = H in a pass after.
 * docs > 0: document positions, which the rotation reads as well as the
 * mask. */
struct rope_case {
	struct plain_pos_case pair; /* side 0 rotates; side 1 reads rotated copies */
	const float *cos, *sin;
};

static void attention_rope_gpu(const void *p)
{
	const struct rope_case *x = p;
	const struct attention_case *a = &x->pair.side[1];
	attention_plain_pos_gpu(&x->pair);
	gpu->ops->rope_backward(a->dq, x->cos, x->sin, a->pos, a->B, a->S, a->H, a->D);
	gpu->ops->rope_backward(a->dk, x->cos, x->sin, a->pos, a->B, a->S, a->G, a->D);
}

static void test_attention_rope(int B, int S, int H, int G, int D, int docs)
{
	struct gpu_case c;
	if (!case_begin(&c, "attention_forward+backward rotating q, k vs rotated beforehand B=%d S=%d H=%d G=%d D=%d "
	                "docs=%d", B, S, H, G, D, docs))
		return;
	int32_t *pos = doc_positions(B, S, docs);
	size_t T = (size_t)B * S, sf = attention_scratch_floats(B, S, H, G, D), half = (size_t)D / 2, bytes[5];
	pair_bytes(bytes, B, S, H, G, D);
	float *q = rand_f32(T * H * D, -1, 1), *k = rand_f32(T * G * D, -1, 1), *v = rand_f32(T * G * D, -1, 1);
	float *dout = rand_f32(T * H * D, -1, 1), *scratch = host_alloc(sf * 4);
	float *cs = host_alloc((size_t)S * half * 4), *sn = host_alloc((size_t)S * half * 4);
	float *qr = dup_bytes(q, T * H * D * 4), *kr = dup_bytes(k, T * G * D * 4);
	float *ref_lse = host_alloc(bytes[1]);
	bf16 *ref = host_alloc(bytes[0]);
	ref_rope_tables(cs, sn, S, D, 10000.0);
	rope_forward_cpu(qr, cs, sn, pos, B, S, H, D);
	rope_forward_cpu(kr, cs, sn, pos, B, S, G, D);
	double t0 = now_ms();
	attention_forward_cpu(ref, H * D, ref_lse, scratch, q, k, v, cs, sn, pos, B, S, H, G, D);
	c.cpu_ms = now_ms() - t0;

	struct rope_case x;
	memset(&x, 0, sizeof x);
	float *dscratch = case_scratch(&c, attention_scratch_floats_cuda(B, S, H, G, D) * 4);
	x.cos = dev_from(cs, (size_t)S * half * 4, 0);
	x.sin = dev_from(sn, (size_t)S * half * 4, 0);
	for (int i = 0; i < 2; i++) {
		struct attention_case *a = &x.pair.side[i];
		attention_case_inputs(a, i ? qr : q, i ? kr : k, v, pos, B, S, H, G, D);
		if (i == 0)
			a->cos = x.cos, a->sin = x.sin;
		pair_side(&c, a, i, bytes, dout, dscratch);
	}
	case_run(&c, attention_rope_gpu, &x);
	pair_check_exact(&c, bytes);
	/* the forward's bound against the CPU: test_attention_forward's */
	check_rows(&c, "out0", ref, T, (size_t)H * D, (size_t)H * D, 1, 1e-3, BF16_RTOL);
	check(&c, "lse0", ref_lse, (size_t)B * H * S, 0, 2e-6, 1e-5);
	case_end(&c);
}

/* The kernels' backward with the per-head dk, dv of one key/value group
 * at a time (ops.h's attention_dkdv_heads, POROS_ATTN_GROUPED_MIN=1 here)
 * gives the bits of all groups at once: side 0 all, side 1 grouped, on the
 * kernels (POROS_ATTENTION=mma), with documents and the rotation. */
static void attention_grouped_gpu(const void *p)
{
	const struct plain_pos_case *x = p;
	for (int i = 0; i < 2; i++) {
		setenv("POROS_ATTN_GROUPED_MIN", i ? "1" : "2147483647", 1);
		attention_fwd_gpu(&x->side[i]);
		attention_bwd_gpu(&x->side[i]);
	}
	unsetenv("POROS_ATTN_GROUPED_MIN");
}

static void test_attention_grouped(int B, int S, int H, int G, int D, int docs, int rope)
{
	struct gpu_case c;
	if (!case_begin(&c, "attention_backward dk, dv one group at a time vs all B=%d S=%d H=%d G=%d D=%d docs=%d "
	                "rope=%d", B, S, H, G, D, docs, rope))
		return;
	size_t T = (size_t)B * S, half = (size_t)D / 2, bytes[5];
	pair_bytes(bytes, B, S, H, G, D);
	float *q = rand_f32(T * H * D, -1, 1), *k = rand_f32(T * G * D, -1, 1), *v = rand_f32(T * G * D, -1, 1);
	float *dout = rand_f32(T * H * D, -1, 1), *cos = NULL, *sin = NULL;
	if (rope) {
		float *cs = host_alloc((size_t)S * half * 4), *sn = host_alloc((size_t)S * half * 4);
		ref_rope_tables(cs, sn, S, D, 10000.0);
		cos = dev_from(cs, (size_t)S * half * 4, 0);
		sin = dev_from(sn, (size_t)S * half * 4, 0);
	}
	/* the scratch of all groups at once, the larger (T under the floor) */
	float *scratch = case_scratch(&c, attention_scratch_floats_cuda(B, S, H, G, D) * 4);
	struct plain_pos_case x;
	memset(&x, 0, sizeof x);
	for (int i = 0; i < 2; i++) {
		attention_case_inputs(&x.side[i], q, k, v, doc_positions(B, S, docs), B, S, H, G, D);
		x.side[i].cos = cos, x.side[i].sin = sin;
		pair_side(&c, &x.side[i], i, bytes, dout, scratch);
	}
	case_run_kernels(&c, attention_grouped_gpu, &x);
	pair_check_exact(&c, bytes);
	case_end(&c);
}

/* doc_positions' documents with each start rounded down to a multiple of
 * 4 tokens, so each document's lse and delta start 16-byte aligned (with
 * H*S a multiple of 4). */
static int32_t *doc_positions_aligned(int B, int S, int docs)
{
	int32_t *pos = host_alloc((size_t)B * S * sizeof *pos);
	for (int b = 0; b < B; b++) {
		int start = 0;
		for (int i = 0; i < S; i++) {
			for (int k = 1; k < docs; k++)
				if (i == ((int)((long)k * S / docs) + 3) / 4 * 4)
					start = i;
			pos[(size_t)b * S + i] = i - start;
		}
	}
	return pos;
}

/* Rows on cuDNN's route, forward and backward against the CPU within the
 * route's bounds (test_attention_backward's), the same bits twice, with
 * the route's settings set before the scratch is sized, as a process
 * does: POROS_ATTENTION=cudnn its length floor, POROS_CUDNN_DOC_MIN=1 the
 * documents' floor and quantum, POROS_CUDNN_WORKSPACE=workspace_mib (0:
 * unset) the heads a backward call.  docs > 0: packed rows, one call per
 * document, given the host mirror of pos the backend sets, the starts
 * 16-byte aligned or (unaligned) doc_positions' (53, 103 at S=150).  The
 * route's graphs declare out, lse and delta 16-byte aligned where a call
 * starts, so a call whose are not (a document's start, or a backward
 * call's first head h0 with h0*S not a multiple of 4) must take the
 * kernels.  Which ran: without the rotation, cuDNN's dq comes back as
 * bf16 widened (its low 16 bits zero), the kernels' fp32 sums do not. */
static void test_attention_route_rows(int B, int S, int H, int G, int D, int docs, int unaligned, int workspace_mib)
{
	struct gpu_case c;
	if (!case_begin(&c, "attention_forward+backward rows on the cuDNN route B=%d S=%d H=%d G=%d D=%d docs=%d%s "
	                "workspace=%d MiB", B, S, H, G, D, docs, unaligned ? " unaligned" : "", workspace_mib))
		return;
	int32_t *pos = docs == 0 ? NULL : unaligned ? doc_positions(B, S, docs) : doc_positions_aligned(B, S, docs);
	size_t T = (size_t)B * S, bytes[5];
	float *q = rand_f32(T * H * D, -1, 1), *k = rand_f32(T * G * D, -1, 1), *v = rand_f32(T * G * D, -1, 1);
	float *dout = rand_f32(T * H * D, -1, 1), *scratch = host_alloc(attention_scratch_floats(B, S, H, G, D) * 4);
	float *ref_lse = host_alloc((size_t)B * H * S * 4), *ref_dq = host_alloc(T * H * D * 4);
	float *ref_dk = host_alloc(T * G * D * 4), *ref_dv = host_alloc(T * G * D * 4);
	bf16 *ref_out = host_alloc(T * H * D * 2);
	pair_bytes(bytes, B, S, H, G, D);
	double t0 = now_ms();
	attention_forward_cpu(ref_out, H * D, ref_lse, scratch, q, k, v, NULL, NULL, pos, B, S, H, G, D);
	attention_backward_cpu(ref_dq, ref_dk, ref_dv, scratch, dout, ref_out, H * D, q, k, v, NULL, NULL, ref_lse, pos,
			       B, S, H, G, D);
	c.cpu_ms = now_ms() - t0;

	/* the route's settings before the scratch is sized: without them a
	 * row under ATTN_CUDNN_MIN_SEQ plans the kernels' scratch alone */
	struct saved_env env[3] = {{"POROS_ATTENTION", NULL}, {"POROS_CUDNN_DOC_MIN", NULL},
	                           {"POROS_CUDNN_WORKSPACE", NULL}};
	char mib[16];
	snprintf(mib, sizeof mib, "%d", workspace_mib);
	env_set(&env[0], "cudnn");
	env_set(&env[1], "1");
	if (workspace_mib)
		env_set(&env[2], mib);
	/* a backward call's first heads h0: 0, hc, ...; off 16 bytes where h0*S is not a multiple of 4 */
	int hc = attention_cudnn_heads(B, S, H, D), calls_aligned = 1;
	for (int h0 = hc; hc > 0 && h0 < H; h0 += hc)
		calls_aligned &= (long)h0 * S % 4 == 0;
	int want_route = hc > 0 && !unaligned && calls_aligned;
	printf("    %d heads a backward call, its calls' lse %s16-byte aligned: %s expected\n", hc,
	       calls_aligned ? "" : "not ", want_route ? "the route" : "the kernels");
	struct plain_pos_case x; /* side 0 only: its own forward's out and lse */
	memset(&x, 0, sizeof x);
	attention_case_inputs(&x.side[0], q, k, v, pos, B, S, H, G, D);
	pair_side(&c, &x.side[0], 0, bytes, dout, case_scratch(&c, attention_scratch_floats_cuda(B, S, H, G, D) * 4));
	if (pos)
		gpu->pos_mirror(x.side[0].pos, pos, T);
	case_run(&c, attention_side0_gpu, &x);
	if (pos)
		gpu->pos_mirror(NULL, NULL, 0);
	if (workspace_mib)
		env_restore(&env[2]);
	env_restore(&env[1]);
	env_restore(&env[0]);

	check_rows(&c, "out0", ref_out, T, (size_t)H * D, (size_t)H * D, 1, 1e-3, BF16_RTOL);
	check(&c, "lse0", ref_lse, (size_t)B * H * S, 0, 2e-6, 1e-5);
	check(&c, "dq0", ref_dq, T * H * D, 0, 1e-2, BF16_RTOL);
	check(&c, "dk0", ref_dk, T * G * D, 0, 1e-2, BF16_RTOL);
	check(&c, "dv0", ref_dv, T * G * D, 0, 1e-2, BF16_RTOL);
	const uint32_t *dq_bits = got(&c, "dq0");
	size_t fine = 0;
	for (size_t i = 0; i < T * H * D; i++)
		fine += (dq_bits[i] & 0xffffu) != 0;
	int ran_route = fine == 0;
	printf("    dq0       %zu of %zu elements finer than bf16: the %s ran  %s\n", fine, T * H * D,
	       ran_route ? "route" : "kernels", ran_route == want_route ? "ok" : "MISMATCH");
	c.bad += ran_route != want_route;
	case_end(&c);
}

/* The cuDNN route's forward and backward at a micro-batch whose backward
 * call widens more than 2^24 elements (B x heads a call x S x D), against
 * the kernels' on the same inputs within the route's bounds against the
 * CPU.  The widening ran on a grid grid_for caps at 2^24 threads and had
 * no grid-stride loop: past that, dq, dk and dv kept the scratch's old
 * values (here the poison): 7B heads x 4 rows of 2048 tokens, or one row
 * of 72B's 64 heads at 2112-2880 tokens (32B's 40 at 3328-3648). */
static void route_vs_kernels_gpu(const void *p)
{
	const struct plain_pos_case *x = p;
	attention_side0_gpu(p);
	struct saved_env e = {"POROS_ATTENTION", NULL};
	env_set(&e, "mma");
	attention_fwd_gpu(&x->side[1]);
	attention_bwd_gpu(&x->side[1]);
	env_restore(&e);
}

/* Side 0's five outputs (the route) against side 1's (the kernels) within
 * the route's bounds against the CPU (test_attention_backward's). */
static void check_route_vs_kernels(struct gpu_case *c, int B, int S, int H, int G, int D)
{
	size_t T = (size_t)B * S;
	check_rows(c, "out0", got(c, "out1"), T, (size_t)H * D, (size_t)H * D, 1, 1e-3, BF16_RTOL);
	check(c, "lse0", got(c, "lse1"), (size_t)B * H * S, 0, 2e-6, 1e-5);
	check(c, "dq0", got(c, "dq1"), T * H * D, 0, 1e-2, BF16_RTOL);
	check(c, "dk0", got(c, "dk1"), T * G * D, 0, 1e-2, BF16_RTOL);
	check(c, "dv0", got(c, "dv1"), T * G * D, 0, 1e-2, BF16_RTOL);
}

static void test_attention_route_wide(int B, int S, int H, int G, int D)
{
	struct gpu_case c;
	if (!case_begin(&c, "attention_forward+backward on cuDNN, a backward call over 2^24 elements, against the "
	                "kernels B=%d S=%d H=%d G=%d D=%d", B, S, H, G, D))
		return;
	int hc = attention_cudnn_route(D, S) ? attention_cudnn_heads(B, S, H, D) : 0;
	size_t T = (size_t)B * S, wide = (size_t)B * hc * S * D, bytes[5];
	printf("    %d heads a cuDNN backward call, %zu elements widened a call  %s\n", hc, wide,
	       wide > ((size_t)1 << 24) ? "ok" : "MISMATCH (the shape no longer reaches the case)");
	c.bad += wide <= ((size_t)1 << 24);
	float *q = rand_f32(T * H * D, -1, 1), *k = rand_f32(T * G * D, -1, 1), *v = rand_f32(T * G * D, -1, 1);
	float *dout = rand_f32(T * H * D, -1, 1);
	float *scratch = case_scratch(&c, attention_scratch_floats_cuda(B, S, H, G, D) * 4);
	pair_bytes(bytes, B, S, H, G, D);
	struct plain_pos_case x;
	memset(&x, 0, sizeof x);
	for (int i = 0; i < 2; i++) {
		attention_case_inputs(&x.side[i], q, k, v, NULL, B, S, H, G, D);
		pair_side(&c, &x.side[i], i, bytes, dout, scratch);
	}
	case_run(&c, route_vs_kernels_gpu, &x);
	check_route_vs_kernels(&c, B, S, H, G, D);
	case_end(&c);
}

/* A long row's backward in cuDNN tiles (ops.h's attention_cudnn_tiles,
 * POROS_CUDNN_TILE=tile set before the scratch is sized) against the
 * kernels' on the same inputs, within the route's bounds, with or without
 * the rotation; the tiles did run (the route's counter): the chunks'
 * triangle times the head calls, in each of case_run's two runs (whose
 * bits case_end compares).  S not a multiple of the tile: a shorter last
 * chunk. */
static void test_attention_route_tiles(int B, int S, int H, int G, int D, int tile, int rope)
{
	struct gpu_case c;
	if (!case_begin(&c, "attention_forward+backward on cuDNN in tiles of %d, against the kernels B=%d S=%d H=%d G=%d "
	                "D=%d rope=%d", tile, B, S, H, G, D, rope))
		return;
	char value[32];
	snprintf(value, sizeof value, "%d", tile);
	struct saved_env env[2] = {{"POROS_CUDNN_TILE", NULL}, {"POROS_ATTENTION", NULL}};
	/* the scratch for both sides: the kernels' (mma) keep dk, dv per head
	 * of every group at this length, the tiles' of one group */
	env_set(&env[1], "mma");
	size_t sf = attention_scratch_floats_cuda(B, S, H, G, D);
	env_restore(&env[1]);
	env_set(&env[0], value);
	if (attention_scratch_floats_cuda(B, S, H, G, D) > sf)
		sf = attention_scratch_floats_cuda(B, S, H, G, D);
	struct attention_cudnn_tiling t = attention_cudnn_tiles(B, S, H, G, D);
	int chunks = t.C ? (S + t.C - 1) / t.C : 0;
	long want = t.hc ? (long)chunks * (chunks + 1) / 2 * (H / t.hc) : 0;
	printf("    %d heads a call, chunks of %d tokens: %ld tile calls  %s\n", t.hc, t.C, want,
	       t.hc && chunks > 1 ? "ok" : "MISMATCH (the shape no longer reaches the tiles)");
	c.bad += !(t.hc && chunks > 1);
	size_t T = (size_t)B * S, half = (size_t)D / 2, bytes[5];
	float *q = rand_f32(T * H * D, -1, 1), *k = rand_f32(T * G * D, -1, 1), *v = rand_f32(T * G * D, -1, 1);
	float *dout = rand_f32(T * H * D, -1, 1), *scratch = case_scratch(&c, sf * 4);
	float *cs = host_alloc((size_t)S * half * 4), *sn = host_alloc((size_t)S * half * 4);
	ref_rope_tables(cs, sn, S, D, 10000.0);
	const float *dcos = rope ? dev_from(cs, (size_t)S * half * 4, 0) : NULL;
	const float *dsin = rope ? dev_from(sn, (size_t)S * half * 4, 0) : NULL;
	pair_bytes(bytes, B, S, H, G, D);
	struct plain_pos_case x;
	memset(&x, 0, sizeof x);
	for (int i = 0; i < 2; i++) {
		attention_case_inputs(&x.side[i], q, k, v, NULL, B, S, H, G, D);
		x.side[i].cos = dcos, x.side[i].sin = dsin;
		pair_side(&c, &x.side[i], i, bytes, dout, scratch);
	}
	struct attention_cudnn_stats st0 = attention_cudnn_stats_read();
	case_run(&c, route_vs_kernels_gpu, &x);
	struct attention_cudnn_stats st1 = attention_cudnn_stats_read();
	env_restore(&env[0]);
	long ran = st1.tile_calls - st0.tile_calls;
	printf("    %ld tile calls ran in case_run's two runs  %s\n", ran, want && ran == 2 * want ? "ok" : "MISMATCH");
	c.bad += !(want && ran == 2 * want);
	check_route_vs_kernels(&c, B, S, H, G, D);
	case_end(&c);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void attention_backward_cuda_check(int realistic)
{
	if (!realistic) {
		test_attention_backward(3, 5, 6, 3, 8, 48, 0);
		test_attention_backward(3, 5, 6, 3, 8, 53, 0); /* pitched out, odd ld */
		test_attention_backward(1, 33, 2, 2, 64, 128, 0);
		test_attention_backward(1, 150, 4, 2, 128, 512, 0);
		test_attention_backward(2, 150, 4, 2, 16, 72, 3); /* pitched out, documents */
		test_attention_backward(1, 601, 2, 1, 16, 32, 0);
		test_attention_plain_pos(2, 150, 4, 2, 64);
		test_attention_rope(2, 70, 4, 2, 6, 0);   /* D/2 odd: pairs across a pack's element pair */
		test_attention_rope(2, 150, 4, 2, 16, 3); /* documents: the rotation's positions too */
		test_attention_rope(2, 150, 4, 2, 64, 3); /* dq turned in the kernel's store */
		test_attention_rope(1, 70, 2, 2, 64, 0);  /* G = H: dk turned in a pass */
		test_attention_grouped(2, 150, 4, 2, 64, 0, 0);
		test_attention_grouped(2, 150, 6, 2, 16, 3, 1); /* documents; dq turned in a pass */
		test_attention_grouped(1, 70, 6, 3, 64, 0, 1);
		test_attention_route_rows(2, 150, 4, 2, 64, 3, 0, 0);
		test_attention_route_rows(2, 150, 4, 2, 64, 3, 1, 0); /* documents start off 16 bytes */
		test_attention_route_rows(1, 300, 6, 2, 64, 0, 0, 1); /* 3 heads a call, h0*S aligned */
		test_attention_route_rows(1, 301, 6, 2, 64, 0, 0, 1); /* h0 = 3: lse + 903 */
	} else {
		test_attention_backward(1, 512, 32, 8, 128, 4096, 0);
		test_attention_backward(1, 512, 32, 8, 128, 4096 + 160, 0); /* out with the o projection's extension */
		test_attention_backward(2, 64, 8, 2, 64, 512, 0);
		test_attention_backward(2, 300, 8, 2, 64, 512, 0);
		test_attention_backward(1, 1100, 4, 2, 64, 256, 0);
		test_attention_backward(1, 1100, 28, 4, 128, 3584, 0);
		test_attention_backward(2, 1100, 8, 2, 128, 1024, 5);
		test_attention_plain_pos(1, 1100, 28, 4, 128);
		test_attention_rope(1, 1100, 28, 4, 128, 0);
		test_attention_rope(2, 600, 8, 2, 64, 4);
		test_attention_grouped(1, 1100, 28, 4, 128, 0, 1);
		test_attention_grouped(1, 1100, 64, 8, 128, 0, 1);
		test_attention_grouped(2, 600, 8, 2, 64, 4, 1);
		test_attention_route_rows(1, 2048, 28, 4, 128, 4, 0, 0);
		test_attention_route_rows(2, 1100, 8, 2, 64, 3, 0, 0);
		test_attention_route_wide(4, 2048, 28, 4, 128); /* 7B heads, batch 4: 28 heads a call */
		test_attention_route_wide(1, 2560, 64, 8, 128); /* 72B heads, one row: 64 a call */
		test_attention_route_tiles(1, 4096, 28, 4, 128, 1024, 1); /* 7B heads, 4 chunks, rotated */
		test_attention_route_tiles(2, 2500, 8, 2, 64, 1024, 0);   /* a shorter last chunk, batch 2 */
		test_attention_route_tiles(1, 3000, 4, 4, 128, 1024, 1);  /* G = H: dk straight, rotated after */
	}
}
#endif
