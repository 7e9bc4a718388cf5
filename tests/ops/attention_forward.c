/* tests/ops/attention_forward.c: attention_forward's checks: causal GQA
 * attention with document masks (online softmax over key tiles), and its
 * scratch size.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
/* Fills q and k with bf16 values in +-qk and v in +-1, runs the forward
 * into out and lse, and checks both against the double reference: out
 * within 1.01 * 2^-7 of sum_j P_ij |v_jd| (see the callers for why), lse
 * within lse_atol + 1e-6 relative. */
static void attention_check_reference(const char *out_name, const char *lse_name, double lse_atol, bf16 *out,
                                      float *lse, float *scratch, float *q, float *k, float *v, double qk, int B,
                                      int S, int H, int G, int D)
{
	long NQ = (long)B * S * H * D, NK = (long)B * S * G * D;
	float *outf = NEW(float, NQ);
	double *want = NEW(double, NQ), *want_lse = NEW(double, B * H * S), *bound = NEW(double, NQ);

	fill_bf16_values(q, NQ, -qk, qk);
	fill_bf16_values(k, NK, -qk, qk);
	fill_bf16_values(v, NK, -1.0, 1.0);
	attention_forward_cpu(out, H * D, lse, scratch, q, k, v, NULL, NULL, NULL, B, S, H, G, D);
	ref_attention(want, want_lse, bound, q, k, v, B, S, H, G, D);
	for (long i = 0; i < NQ; i++)
		outf[i] = f32_from_bf16(out[i]);
	check_bounded(out_name, outf, want, bound, NQ, 1.01 / 128, 1e-6, 0.0);
	check_close(lse_name, lse, want_lse, B * H * S, lse_atol, 1e-6);
	free(outf), free(want), free(want_lse), free(bound);
}

static void test_attention_values(void)
{
	enum { B = 2, S = 6, H = 4, G = 2, D = 16, T = B * S, NQ = T * H * D, NK = T * G * D };
	float q[NQ], k[NK], v[NK], lse[B * H * S], lse2[B * H * S];
	bf16 out[NQ], out2[NQ];
	float *scratch = NEW(float, attention_scratch_floats(B, S, H, G, D));

	/* bf16 inputs make the products exact, so the scores and the softmax
	 * are fp32-accurate (~1e-6).  Rounding P to bf16 moves out by at most
	 * 2^-8 sum_j P_j |v_j|, and rounding out to bf16 by 2^-8 |out|, which
	 * is at most as much again: 2^-7 of the sum, 1% for the fp32 steps. */
	attention_check_reference("attention_forward out (causal GQA)", "attention_forward lse", 1e-6, out, lse, scratch,
	                          q, k, v, 2.0, B, S, H, G, D);

	/* the products read q, k, v rounded to bf16 and nothing finer: moving
	 * every input by 2^-10 of itself (under half a bf16 ulp) changes no
	 * bit, moving it by 2^-6 (over one ulp) changes out */
	float q2[NQ], k2[NK], v2[NK];
	for (int pass = 0; pass < 2; pass++) {
		float nudge = pass == 0 ? 1.0f + 1.0f / 1024 : 1.0f + 1.0f / 64;
		for (int i = 0; i < NQ; i++)
			q2[i] = q[i] * nudge;
		for (int i = 0; i < NK; i++) {
			k2[i] = k[i] * nudge;
			v2[i] = v[i] * nudge;
		}
		attention_forward_cpu(out2, H * D, lse2, scratch, q2, k2, v2, NULL, NULL, NULL, B, S, H, G, D);
		int same = memcmp(out, out2, sizeof out) == 0 && memcmp(lse, lse2, sizeof lse) == 0;
		int ok = pass == 0 ? same : !same;
		printf("%s attention_forward with inputs moved by %s bf16 ulp: %s bits\n", ok ? "ok  " : "FAIL",
		       pass == 0 ? "under half a" : "over one", same ? "same" : "different");
		failures += !ok;
	}

	/* causal: changing the last token's q, k, v leaves every earlier row alone */
	for (int b = 0; b < B; b++) {
		size_t last = (size_t)b * S + S - 1;
		for (int i = 0; i < H * D; i++)
			q[last * H * D + i] += 0.75f;
		for (int i = 0; i < G * D; i++) {
			k[last * G * D + i] -= 1.5f;
			v[last * G * D + i] *= -3.0f;
		}
	}
	attention_forward_cpu(out2, H * D, lse2, scratch, q, k, v, NULL, NULL, NULL, B, S, H, G, D);
	int same = 1, last_changed = 0;
	for (int b = 0; b < B; b++) {
		size_t first = (size_t)b * S * H * D, rows = (size_t)(S - 1) * H * D;
		same &= memcmp(out + first, out2 + first, rows * sizeof(bf16)) == 0;
		last_changed |= memcmp(out + first + rows, out2 + first + rows, (size_t)H * D * sizeof(bf16)) != 0;
		for (int h = 0; h < H; h++)
			same &= memcmp(lse + ((size_t)b * H + h) * S, lse2 + ((size_t)b * H + h) * S,
				       (S - 1) * sizeof(float)) == 0;
	}
	printf("%s attention_forward causal mask: earlier rows bit-identical after changing the last token\n",
	       same && last_changed ? "ok  " : "FAIL");
	failures += !(same && last_changed);
	free(scratch);
}

static void test_attention_single_token(void)
{
	/* S = 1: the only key gets probability exactly 1, so out = bf16(v) of
	 * the query head's kv head, h / (H/G) = 0, 0, 1, 1 */
	enum { B = 2, S = 1, H = 4, G = 2, D = 8 };
	float q[B * H * D], k[B * G * D], v[B * G * D], lse[B * H];
	bf16 out[B * H * D];
	float *scratch = NEW(float, attention_scratch_floats(B, S, H, G, D));
	int bad = 0;

	fill_f32(q, B * H * D, -3.0, 3.0);
	fill_f32(k, B * G * D, -3.0, 3.0);
	fill_f32(v, B * G * D, -1.0, 1.0);
	attention_forward_cpu(out, H * D, lse, scratch, q, k, v, NULL, NULL, NULL, B, S, H, G, D);
	for (int b = 0; b < B; b++)
		for (int h = 0; h < H; h++)
			for (int d = 0; d < D; d++)
				bad += out[(b * H + h) * D + d] != bf16_from_f32(v[(b * G + h / 2) * D + d]);
	printf("%s attention_forward with S=1 returns v of the head's kv group (%d mismatches)\n",
	       bad ? "FAIL" : "ok  ", bad);
	failures += bad != 0;
	free(scratch);
}

/* The scratch: O(B*S*H*D), no score square (ops.h's attention_parts):
 * two bf16 copies per query head and per key/value head at the padded head
 * dim, delta (B,H,S), the first-key table, and with G < H two (T,H,D) fp32
 * buffers for the per-head dk, dv; each part rounded up to 16 bytes.  It
 * holds the CPU's layout (the copies at D, then delta) by construction. */
/* attention_scratch_at, the one carving both backends use: in a scratch of
 * attention_scratch_floats, the parts in order, each 16-byte aligned and
 * large enough for its elements (the copies at attention_dpad(D), so the
 * CPU's rows of D fit too), the last ending inside; the per-head buffers
 * only with G < H. */
static void test_attention_scratch_carving(void)
{
	static const int shapes[][5] = { { 3, 5, 6, 3, 8 },      { 1, 33, 2, 2, 64 }, { 2, 150, 4, 2, 128 },
					 { 1, 1024, 4, 2, 64 }, { 1, 7, 6, 3, 160 } };
	int bad = 0;
	/* twice: under the grouped floor, then (POROS_ATTN_GROUPED_MIN=1)
	 * over it, where dk_h, dv_h hold one group's heads unless the cuDNN
	 * backward (D = 64, 128, at least ATTN_CUDNN_MIN_SEQ tokens) takes the call */
	for (size_t i = 0; i < 2 * sizeof shapes / sizeof shapes[0]; i++) {
		size_t ns = sizeof shapes / sizeof shapes[0];
		int grouped = i >= ns;
		const int *sh = shapes[i % ns];
		int B = sh[0], S = sh[1], H = sh[2], G = sh[3], D = sh[4];
		if (grouped)
			setenv("POROS_ATTN_GROUPED_MIN", "1", 1);
		int hs = attention_dkdv_heads(B, S, H, G, D);
		unsetenv("POROS_ATTN_GROUPED_MIN");
		if (hs != (G == H ? 0 : grouped && ((D != 64 && D != 128) || S < ATTN_CUDNN_MIN_SEQ) ? H / G : H)) {
			if (bad++ < 5)
				printf("  B=%d S=%d H=%d G=%d D=%d: dk_h holds %d heads\n", B, S, H, G, D, hs);
			continue;
		}
		if (grouped)
			setenv("POROS_ATTN_GROUPED_MIN", "1", 1);
		size_t n = attention_scratch_floats(B, S, H, G, D), t = (size_t)B * S, dp = (size_t)attention_dpad(D);
		float *base = NEW(float, n);
		struct attention_scratch a = attention_scratch_at(base, B, S, H, G, D);
		/* each part's start and the bytes it must hold, in carving order */
		const unsigned char *start[8] = { (void *)a.q16, (void *)a.dout16, (void *)a.k16, (void *)a.v16,
						  (void *)a.delta, (void *)a.first, (void *)a.dk_h, (void *)a.dv_h };
		size_t need[8] = { t * H * dp * 2, t * H * dp * 2, t * G * dp * 2, t * G * dp * 2, t * H * 4,
				   (size_t)B * ((S + 31) / 32) * 4, t * hs * D * 4, t * hs * D * 4 };
		int parts = G == H ? 6 : 8, ok = (G == H) == (a.dk_h == NULL && a.dv_h == NULL) &&
						 start[0] == (const unsigned char *)base;
		for (int k = 0; k < parts; k++) {
			const unsigned char *end = k + 1 < parts ? start[k + 1] : (const unsigned char *)(base + n);
			ok &= (size_t)(start[k] - (const unsigned char *)base) % 16 == 0 && end >= start[k] &&
			      (size_t)(end - start[k]) >= need[k];
		}
		unsetenv("POROS_ATTN_GROUPED_MIN");
		if (!ok && bad++ < 5)
			printf("  B=%d S=%d H=%d G=%d D=%d: a part overlaps the next, is misaligned or overruns\n", B, S,
			       H, G, D);
		free(base);
	}
	printf("%s attention_scratch_at carves aligned, ordered parts that hold their elements (%d bad)\n",
	       bad ? "FAIL" : "ok  ", bad);
	failures += bad != 0;
}

static void test_attention_scratch(void)
{
	static const int heads[][2] = { { 32, 32 }, { 32, 8 }, { 40, 8 }, { 64, 8 }, { 28, 4 }, { 6, 3 }, { 2, 1 } };
	static const int lengths[] = { 1, 5, 7, 33, 128, 300, 512, 1000, 8192 };
	static const int dims[] = { 5, 8, 64, 128, 160 };
	int bad = 0;
	for (int b = 1; b <= 3; b += 2)
		for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++)
			for (size_t si = 0; si < sizeof lengths / sizeof lengths[0]; si++)
				for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
					int H = heads[hi][0], G = heads[hi][1], S = lengths[si], D = dims[di];
					size_t dp = (size_t)attention_dpad(D), t = (size_t)b * S;
					size_t got = attention_scratch_floats(b, S, H, G, D);
					/* what the CPU reads and writes: 4 copies at D, delta */
					size_t cpu = t * H * D + t * G * D + t * H;
					/* linear in S: copies, delta, table, heads, and the rounding */
					size_t most = t * H * dp + t * G * dp + t * H + (t + 31) / 32 + 1 +
						      (G == H ? 0 : 2 * t * H * D) + 7 * 4;
					struct attention_parts parts = attention_parts_of(b, S, H, G, D);
					int ok = got >= cpu && got <= most &&
						 parts.q16 % 4 == 0 && parts.kv16 % 4 == 0 && parts.delta % 4 == 0 &&
						 parts.lo % 4 == 0 && parts.heads % 4 == 0 && dp >= (size_t)D && dp % 16 == 0;
					if (!ok && bad++ < 5)
						printf("  B=%d S=%d H=%d G=%d D=%d: %zu floats (CPU needs %zu, at most %zu)\n", b,
						       S, H, G, D, got, cpu, most);
				}
	printf("%s attention scratch holds the CPU layout and is linear in S (%d bad)\n", bad ? "FAIL" : "ok  ", bad);
	failures += bad != 0;
	/* Qwen2.5-7B at S=8192 (H=28, G=4, D=128): 2 * 28*8192*128/2 + 2 *
	 * 4*8192*128/2 + 28*8192 + 256 + 2 * 8192*28*128 = 92504320 floats (353
	 * MiB), where the two fp32 score squares alone took 2*28*8192^2 */
	CHECK(attention_scratch_floats(1, 8192, 28, 4, 128) == 92504320);
	/* MHA needs no per-head buffers: 4 copies of 512*32*128/2, delta, table */
	CHECK(attention_scratch_floats(1, 512, 32, 32, 128) == 4 * 1048576 + 16384 + 16);
	/* odd shapes round each part up to 4 floats: 3*6*5*64/2 = 2880, 3*3*5*64/2
	 * = 1440, delta 90 -> 92, table 3 -> 4, heads 720 */
	CHECK(attention_scratch_floats(3, 5, 6, 3, 8) == 2 * 2880 + 2 * 1440 + 92 + 4 + 2 * 720);
	CHECK(attention_dpad(8) == 64 && attention_dpad(64) == 64 && attention_dpad(65) == 128 &&
	      attention_dpad(128) == 128 && attention_dpad(130) == 144);
	test_attention_scratch_carving();
}

/* More rows than one key tile (S = 150: tiles of 64, 64, 22): the online
 * softmax's rescaling across tiles against the double reference, with
 * scores large enough (q, k in [-3, 3]) that the running max moves. */
static void test_attention_tiles(void)
{
	enum { B = 1, S = 150, H = 2, G = 1, D = 16, T = B * S, NQ = T * H * D, NK = T * G * D };
	float *q = NEW(float, NQ), *k = NEW(float, NK), *v = NEW(float, NK), *lse = NEW(float, B * H * S);
	bf16 *out = NEW(bf16, NQ);
	float *scratch = NEW(float, attention_scratch_floats(B, S, H, G, D));

	/* each p is rounded once, relative to the running max: still 2^-8 of
	 * its term, and out's own rounding 2^-8 of |out| (as in
	 * test_attention_values); the rescaling adds fp32 steps, ~1e-6 */
	attention_check_reference("attention_forward out over 3 key tiles", "attention_forward lse over 3 key tiles",
	                          2e-6, out, lse, scratch, q, k, v, 3.0, B, S, H, G, D);
	free(q), free(k), free(v), free(lse), free(out), free(scratch);
}

/* Document masks: a row packed with documents gives each document what it
 * gets alone.  The backward sums over the same keys and rows in the same
 * order, so with the same out and lse it is bit-identical; the forward too when the
 * documents start on key tiles (multiples of 64), and otherwise the
 * online softmax's steps fall elsewhere: within the rounding bound of the
 * double reference (each p rounded once; twice the bound for two sides). */
static void test_attention_documents(void)
{
	enum { B = 2, S = 150, H = 4, G = 2, D = 16, T = B * S, NQ = T * H * D, NK = T * G * D };
	static const int split[2][3] = { { 64, 86, 0 }, { 70, 5, 75 } };
	float *q = NEW(float, NQ), *k = NEW(float, NK), *v = NEW(float, NK), *dout = NEW(float, NQ);
	float *lse = NEW(float, B * H * S), *dq = NEW(float, NQ), *dk = NEW(float, NK), *dv = NEW(float, NK);
	float *lse1 = NEW(float, H * S), *dq1 = NEW(float, NQ), *dk1 = NEW(float, NK), *dv1 = NEW(float, NK);
	bf16 *out = NEW(bf16, NQ), *out1 = NEW(bf16, NQ);
	double *want = NEW(double, NQ), *want_lse = NEW(double, H * S), *bound = NEW(double, NQ);
	int32_t pos[T];
	float *scratch = NEW(float, attention_scratch_floats(B, S, H, G, D));

	fill_bf16_values(q, NQ, -3.0, 3.0);
	fill_bf16_values(k, NK, -3.0, 3.0);
	fill_bf16_values(v, NK, -1.0, 1.0);
	fill_bf16_values(dout, NQ, -1.0, 1.0);
	for (int c = 0; c < 2; c++) {
		int ndocs = split[c][2] ? 3 : 2;
		doc_positions(pos, B, S, split[c], ndocs);
		attention_forward_cpu(out, H * D, lse, scratch, q, k, v, NULL, NULL, pos, B, S, H, G, D);
		attention_backward_cpu(dq, dk, dv, scratch, dout, out, H * D, q, k, v, NULL, NULL, lse, pos, B, S, H,
				       G, D);
		int exact_fwd = 1, exact_bwd = 1, t0 = 0;
		long bad_fwd = 0;
		for (int d = 0; d < ndocs; d++) {
			int n = split[c][d];
			for (int b = 0; b < B; b++) {
				size_t row = (size_t)b * S + t0; /* the document's first token */
				/* the document alone: a batch of one sequence of n tokens */
				attention_forward_cpu(out1, H * D, lse1, scratch, q + row * H * D, k + row * G * D,
						      v + row * G * D, NULL, NULL, NULL, 1, n, H, G, D);
				ref_attention(want, want_lse, bound, q + row * H * D, k + row * G * D,
						    v + row * G * D, 1, n, H, G, D);
				for (int i = 0; i < n * H * D; i++) {
					double a = f32_from_bf16(out[row * H * D + i]), e = f32_from_bf16(out1[i]);
					bad_fwd += !(fabs(a - e) <= 2 * 1.01 / 128 * bound[i] + 1e-6);
				}
				exact_fwd &= memcmp(out + row * H * D, out1, (size_t)n * H * D * sizeof(bf16)) == 0;
				/* the backward alone, fed the packed row's out and lse for the document */
				for (int h = 0; h < H; h++)
					memcpy(lse1 + (size_t)h * n, lse + ((size_t)b * H + h) * S + t0, n * sizeof(float));
				attention_backward_cpu(dq1, dk1, dv1, scratch, dout + row * H * D, out + row * H * D, H * D,
						       q + row * H * D, k + row * G * D, v + row * G * D, NULL, NULL, lse1, NULL, 1, n,
						       H, G, D);
				exact_bwd &= memcmp(dq + row * H * D, dq1, (size_t)n * H * D * 4) == 0 &&
					     memcmp(dk + row * G * D, dk1, (size_t)n * G * D * 4) == 0 &&
					     memcmp(dv + row * G * D, dv1, (size_t)n * G * D * 4) == 0;
			}
			t0 += n;
		}
		int ok_fwd = bad_fwd == 0 && (c != 0 || exact_fwd);
		printf("%s attention_forward packed %d documents (%d+%d%s): each as alone, %s (%ld out of bound)\n",
		       ok_fwd ? "ok  " : "FAIL", ndocs, split[c][0], split[c][1], c ? "+75" : "",
		       exact_fwd ? "bit for bit" : "within rounding", bad_fwd);
		failures += !ok_fwd;
		printf("%s attention_backward packed %d documents: dq, dk, dv bit-identical to each alone\n",
		       exact_bwd ? "ok  " : "FAIL", ndocs);
		failures += !exact_bwd;
	}
	/* pos[t] = t % S is the plain causal mask, bit for bit */
	for (int t = 0; t < T; t++)
		pos[t] = t % S;
	attention_forward_cpu(out, H * D, lse, scratch, q, k, v, NULL, NULL, NULL, B, S, H, G, D);
	attention_forward_cpu(out1, H * D, dq1, scratch, q, k, v, NULL, NULL, pos, B, S, H, G,
			      D); /* dq1: room for lse */
	check_same_bits("attention_forward with pos = t % S against NULL", out1, out, NQ * sizeof(bf16));
	check_same_bits("attention_forward lse with pos = t % S against NULL", dq1, lse, B * H * S * sizeof(float));
	free(q), free(k), free(v), free(dout), free(lse), free(dq), free(dk), free(dv), free(lse1), free(dq1);
	free(dk1), free(dv1), free(out), free(out1), free(want), free(want_lse), free(bound), free(scratch);
}

/* The forward writes out at a pitch; the backward reads it at one, and
 * nothing of the pad (NaN) reaches its gradients. */
static void test_pitched_attention(void)
{
	enum { B = 2, S = 5, H = 4, G = 2, D = 16, T = B * S, HD = H * D, LD = HD + 32 };
	float q[T * HD], k[T * G * D], v[T * G * D], lse[B * H * S], lsep[B * H * S], dout[T * HD];
	float dq[T * HD], dk[T * G * D], dv[T * G * D], dqp[T * HD], dkp[T * G * D], dvp[T * G * D];
	bf16 out[T * HD], outp[T * LD];
	float *scratch = NEW(float, attention_scratch_floats(B, S, H, G, D));

	fill_f32(q, T * HD, -2.0, 2.0);
	fill_f32(k, T * G * D, -2.0, 2.0);
	fill_f32(v, T * G * D, -1.0, 1.0);
	attention_forward_cpu(out, HD, lse, scratch, q, k, v, NULL, NULL, NULL, B, S, H, G, D);
	fill_bf16_bits(outp, T * LD, PAD_BF16);
	attention_forward_cpu(outp, LD, lsep, scratch, q, k, v, NULL, NULL, NULL, B, S, H, G, D);
	check_pitched("attention_forward out at ld_out 96", outp, LD, out, T, HD, sizeof(bf16), &pad_bf16);
	check_same_bits("attention_forward lse with ld_out 96", lsep, lse, sizeof lse);
	fill_f32(dout, T * HD, -1.0, 1.0);
	attention_backward_cpu(dq, dk, dv, scratch, dout, out, HD, q, k, v, NULL, NULL, lse, NULL, B, S, H, G, D);
	attention_backward_cpu(dqp, dkp, dvp, scratch, dout, outp, LD, q, k, v, NULL, NULL, lse, NULL, B, S, H, G, D);
	check_same_bits("attention_backward dq with ld_out 96", dqp, dq, sizeof dq);
	check_same_bits("attention_backward dk with ld_out 96", dkp, dk, sizeof dk);
	check_same_bits("attention_backward dv with ld_out 96", dvp, dv, sizeof dv);
	free(scratch);
}

/* The rotation the ops apply given the RoPE tables is rope_forward's, and
 * the backward's turn of dq and dk is rope_backward's: with the tables,
 * forward and backward give the bits of q and k rotated beforehand, no
 * tables, and dq, dk rotated back after, at document positions (the
 * rotation's angles and the mask read the same pos), D = 6 and 16. */
static void test_attention_rope(void)
{
	enum { B = 2, S = 150, H = 4, G = 2 };
	static const int split[3] = { 70, 5, 75 }, dims[2] = { 6, 16 };
	int32_t pos[B * S];

	doc_positions(pos, B, S, split, 3);
	for (int di = 0; di < 2; di++) {
		int D = dims[di], NQ = B * S * H * D, NK = B * S * G * D;
		float *q = NEW(float, NQ), *k = NEW(float, NK), *v = NEW(float, NK), *dout = NEW(float, NQ);
		float *qr = NEW(float, NQ), *kr = NEW(float, NK), *cs = NEW(float, S * D / 2), *sn = NEW(float, S * D / 2);
		float *lse[2], *dq[2], *dk[2], *dv[2];
		bf16 *out[2];
		float *scratch = NEW(float, attention_scratch_floats(B, S, H, G, D));

		fill_f32(q, NQ, -2.0, 2.0);
		fill_f32(k, NK, -2.0, 2.0);
		fill_f32(v, NK, -1.0, 1.0);
		fill_f32(dout, NQ, -1.0, 1.0);
		ref_rope_tables(cs, sn, S, D, 10000.0);
		memcpy(qr, q, NQ * sizeof(float));
		memcpy(kr, k, NK * sizeof(float));
		rope_forward_cpu(qr, cs, sn, pos, B, S, H, D);
		rope_forward_cpu(kr, cs, sn, pos, B, S, G, D);
		for (int i = 0; i < 2; i++) { /* 0: the op rotates; 1: rotated beforehand */
			const float *qi = i ? qr : q, *ki = i ? kr : k, *ci = i ? NULL : cs, *si = i ? NULL : sn;
			lse[i] = NEW(float, B * H * S), dq[i] = NEW(float, NQ), dk[i] = NEW(float, NK), dv[i] = NEW(float, NK);
			out[i] = NEW(bf16, NQ);
			attention_forward_cpu(out[i], H * D, lse[i], scratch, qi, ki, v, ci, si, pos, B, S, H, G, D);
			attention_backward_cpu(dq[i], dk[i], dv[i], scratch, dout, out[i], H * D, qi, ki, v, ci, si, lse[i],
					       pos, B, S, H, G, D);
			if (i == 1) {
				rope_backward_cpu(dq[i], cs, sn, pos, B, S, H, D);
				rope_backward_cpu(dk[i], cs, sn, pos, B, S, G, D);
			}
		}
		int same = memcmp(out[0], out[1], NQ * sizeof(bf16)) == 0 &&
			   memcmp(lse[0], lse[1], B * H * S * sizeof(float)) == 0 &&
			   memcmp(dq[0], dq[1], NQ * sizeof(float)) == 0 && memcmp(dk[0], dk[1], NK * sizeof(float)) == 0 &&
			   memcmp(dv[0], dv[1], NK * sizeof(float)) == 0;
		printf("%s attention with the RoPE tables (D=%d, documents) = rope_forward first, rope_backward after: "
		       "out, lse, dq, dk, dv bit for bit\n", same ? "ok  " : "FAIL", D);
		failures += !same;
		for (int i = 0; i < 2; i++)
			free(lse[i]), free(dq[i]), free(dk[i]), free(dv[i]), free(out[i]);
		free(q), free(k), free(v), free(dout), free(qr), free(kr), free(cs), free(sn), free(scratch);
	}
}

static void attention_forward_values_check(void)
{
	test_attention_values();
	test_attention_single_token();
	test_attention_scratch();
	test_attention_tiles();
	test_attention_documents();
	test_pitched_attention();
	test_attention_rope();
}
#endif

/* no gradient check here: its gradients are attention_backward's check */
#define attention_forward_grad_check NULL

#ifdef OPS_TEST_CUDA
#include "attention_case.h"

/* Both sides run the same online softmax over the same key tiles of 64
 * and round q, k, v and each tile's p to bf16 at the same places (ops.h),
 * so they differ by the order of fp32 sums: the scores are D-term dots of
 * exact bf16 products (tensor cores vs sequential), the row sums and the
 * p v sums split differently over threads; all near 1e-7 of the largest
 * output.  But an fp32 p that sits near a bf16 rounding boundary can round
 * to neighbouring bf16 values on the two sides: one ulp of p_j (<= 2^-8
 * p_j) times v_j moves the row's output by up to 2^-8 P_j max|v|, and
 * max|out| ~ max|v| (row 0's out is v_0).  Such flips are rare and hit
 * large P (short rows) more rarely still: 1e-3 absolute sits between what
 * they need and what a CPU that skipped the contract's roundings needs
 * (docs/numerics.md, "Tolerances"), and bf16 out adds one ulp (rtol).  lse = m + log(l) sees no bf16 rounding after the
 * products and is good to a few ulps of its terms (|lse| <= ~8 here, ulp
 * 5e-7), and can cancel to near zero: 2e-6 of max|lse| absolute, 1e-5
 * relative.  ld_out > H*D: out pitched, the pads kept.  docs > 0: rows
 * packed with documents (doc_positions), the same pos on both sides. */
static void test_attention_forward(int B, int S, int H, int G, int D, int ld_out, int docs)
{
	struct gpu_case c;
	if (!case_begin(&c, "attention_forward B=%d S=%d H=%d G=%d D=%d ld_out=%d docs=%d", B, S, H, G, D, ld_out,
	                docs))
		return;
	int32_t *pos = doc_positions(B, S, docs);
	size_t T = (size_t)B * S, HD = (size_t)H * D;
	float *q = rand_f32(T * H * D, -1, 1), *k = rand_f32(T * G * D, -1, 1), *v = rand_f32(T * G * D, -1, 1);
	size_t sf = attention_scratch_floats(B, S, H, G, D);
	float *scratch = host_alloc(sf * 4), *ref_lse = host_alloc((size_t)B * H * S * 4);
	bf16 *init = pitched_out_init(T, HD, (size_t)ld_out, 2);
	bf16 *ref = dup_bytes(init, T * ld_out * 2);
	double t0 = now_ms();
	attention_forward_cpu(ref, ld_out, ref_lse, scratch, q, k, v, NULL, NULL, pos, B, S, H, G, D);
	c.cpu_ms = now_ms() - t0;

	struct attention_case a = { 0 };
	attention_case_inputs(&a, q, k, v, pos, B, S, H, G, D);
	a.ld_out = ld_out;
	a.out = case_out(&c, "out", T * ld_out * 2, init, 0);
	a.lse = case_out(&c, "lse", (size_t)B * H * S * 4, NULL, 0);
	a.scratch = case_scratch(&c, attention_scratch_floats_cuda(B, S, H, G, D) * 4);
	case_run(&c, attention_fwd_gpu, &a);
	check_rows(&c, "out", ref, T, HD, (size_t)ld_out, 1, 1e-3, BF16_RTOL);
	check_pads(&c, "out", ref, T, HD, (size_t)ld_out, 2);
	check(&c, "lse", ref_lse, (size_t)B * H * S, 0, 2e-6, 1e-5);
	case_end(&c);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void attention_forward_cuda_check(int realistic)
{
	if (!realistic) {
		/* D < 64 takes the 64-wide kernels with zero columns, S not a multiple
		 * of the tiles leaves partial tiles of rows and keys */
		test_attention_forward(3, 5, 6, 3, 8, 48, 0);
		test_attention_forward(2, 7, 4, 2, 16, 64, 0);
		test_attention_forward(1, 33, 2, 2, 64, 128, 0); /* MHA */
		test_attention_forward(3, 5, 6, 3, 8, 53, 0);    /* pitched out, odd ld */
		test_attention_forward(2, 7, 4, 2, 16, 72, 0);   /* pitched out */
		test_attention_forward(1, 150, 4, 2, 128, 512, 0); /* 128-wide kernels, three key tiles */
		test_attention_forward(2, 150, 4, 2, 16, 64, 3);   /* documents, boundaries inside tiles */
		test_attention_forward(1, 601, 2, 1, 16, 32, 0);
	} else {
		test_attention_forward(1, 512, 32, 8, 128, 4096, 0);
		test_attention_forward(1, 512, 32, 8, 128, 4096 + 160, 0); /* into the o projection's extension-sized buffer */
		test_attention_forward(2, 64, 8, 2, 64, 512, 0);  /* two sequences, one tile each */
		test_attention_forward(2, 300, 8, 2, 64, 512, 0);
		test_attention_forward(1, 1100, 4, 2, 64, 256, 0);
		test_attention_forward(1, 1100, 28, 4, 128, 3584, 0); /* Qwen2.5-7B's heads */
		test_attention_forward(2, 1100, 8, 2, 128, 1024, 5);  /* five documents a row */
	}
}
#endif
