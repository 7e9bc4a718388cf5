/* tests/ops/embedding_forward.c: embedding_forward's checks: the gather of
 * embedding rows, widened exactly from bf16.
 *
 * Included by the op-test drivers through ops_all.h, which says what each
 * section defines. */

#include "ops_test.h"

#ifdef OPS_TEST_VALUES
static void test_embedding_values(void)
{
	enum { V = 7, C = 5, T = 4 };
	bf16 wte[V * C];
	const int32_t tokens[T] = { 6, 0, 3, 6 };
	float out[T * C];
	double want[T * C];

	fill_bf16(wte, V * C, -3.0, 3.0);
	embedding_forward_cpu(out, tokens, wte, T, C);
	for (int t = 0; t < T; t++)
		for (int c = 0; c < C; c++)
			want[t * C + c] = f32_from_bf16(wte[tokens[t] * C + c]);
	check_close("embedding_forward (an exact gather)", out, want, T * C, 0.0, 0.0);
}

static void embedding_forward_values_check(void)
{
	test_embedding_values();
}
#endif

/* no gradient check here: a frozen table: nothing flows back into it */
#define embedding_forward_grad_check NULL

#ifdef OPS_TEST_CUDA
struct embedding_args {
	float *out;
	const int32_t *tokens;
	const bf16 *wte;
	int T, C;
};

static void embedding_gpu(const void *p)
{
	const struct embedding_args *a = p;
	gpu->ops->embedding_forward(a->out, a->tokens, a->wte, a->T, a->C);
}

/* Widening bf16 to fp32 is exact: the outputs must be identical. */
static void test_embedding(int T, int C, int V)
{
	struct gpu_case c;
	if (!case_begin(&c, "embedding_forward T=%d C=%d V=%d", T, C, V))
		return;
	int32_t *tokens = host_alloc((size_t)T * sizeof *tokens);
	for (int t = 0; t < T; t++)
		tokens[t] = (int32_t)(rand_unit() * V);
	tokens[0] = V - 1; /* the last row too */
	bf16 *wte = rand_bf16((size_t)V * C, -1, 1);
	float *ref = host_alloc((size_t)T * C * sizeof *ref);
	double t0 = now_ms();
	embedding_forward_cpu(ref, tokens, wte, T, C);
	c.cpu_ms = now_ms() - t0;

	struct embedding_args a = { NULL, dev_from(tokens, (size_t)T * 4, 0), dev_from(wte, (size_t)V * C * 2, 0),
	                            T, C };
	a.out = case_out(&c, "out", (size_t)T * C * 4, NULL, 0);
	case_run(&c, embedding_gpu, &a);
	check_exact(&c, "out", ref, (size_t)T * C * 4, 4);
	case_end(&c);
}

/* realistic 0: odd small shapes (scalar, unaligned and fallback paths;
 * quick enough for compute-sanitizer); 1: model shapes */
static void embedding_forward_cuda_check(int realistic)
{
	if (!realistic) {
		test_embedding(7, 67, 11);
	} else {
		test_embedding(512, 4096, 32000);
	}
}
#endif
