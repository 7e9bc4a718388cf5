/* tests/gpu/test_ops_cuda.c: every CUDA op against the CPU reference: the
 * OPS_TEST_CUDA sections of tests/ops/<op>.c, the small shapes of every op
 * first, then the model shapes.
 *
 * For each op and shape: random inputs from a fixed seed; the CPU op
 * (kernels/cpu) gives the reference; the CUDA op runs twice on the same
 * inputs, every output poisoned with NaN (or reset to its initial values,
 * for outputs the op adds into) before each run.  An output passes when
 * every element is within atol + rtol*|ref| of the CPU's, and the op is
 * deterministic when the two runs agree bit for bit.  Scratch buffers are
 * poisoned too, so an op that reads scratch it did not write shows NaN.
 *
 * Tolerances: atol is stated relative to the largest |ref| of the output
 * (a_rel * max|ref|), because the rounding error of a sum scales with the
 * size of its partial sums, which the output's largest values measure.
 * Each op says why its numbers are what they are.  A bf16 output may differ
 * by one bf16 ulp where the two fp32 values straddle a rounding boundary:
 * one ulp is at most 2^-7 of the value, hence BF16_RTOL.
 *
 * Shapes: odd small ones that take the kernels' scalar, unaligned and
 * fallback paths, then realistic ones (T=512, C=4096, H=32, G=8, D=128,
 * V=32000, F=11008, and Qwen2.5-32B's C=5120, F=27648).
 *
 * Row pitches: the ops whose operands may sit in a wider buffer (room for
 * the LoRA extension, ops.h) run with ld > row length too.  A pitched
 * output starts NaN where the op writes and a sentinel in the pad, which
 * both the GPU's result and the CPU's reference must keep; a pitched
 * input (the GEMMs') holds NaN in its pad, which must not reach a result.
 *
 * usage: test_ops_cuda [--list] [--small] [SUBSTRING...]
 *   --list      print the titles of the cases that would run, run none
 *               (no device needed)
 *   --small     only the small shapes (quick enough for compute-sanitizer)
 *   SUBSTRING   only the cases whose title contains one, e.g. lora_backward
 * Prints one block per case and a summary line; exits 0 when every case
 * passed, 1 when any failed, 2 when there is no CUDA device or no case
 * matched. */
#define OPS_TEST_CUDA
#include "../ops/cuda_check.h"
#include "../ops/ops_all.h"

#define CUDA_ENTRY(ret, name, args) { #name, name##_cuda_check },
static const struct { const char *op; void (*run)(int realistic); } cuda_checks[] = { POROS_OPS_LIST(CUDA_ENTRY) };

/* Every op's cases, the small shapes of all first (realistic 0), then the
 * model shapes (1). */
static void run_cases(int small_only)
{
	for (int realistic = 0; realistic <= !small_only; realistic++)
		for (size_t i = 0; i < sizeof cuda_checks / sizeof cuda_checks[0]; i++)
			if (cuda_checks[i].run)
				cuda_checks[i].run(realistic);
}

int main(int argc, char **argv)
{
	int arg = 1, small_only = 0;
	if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		printf("usage: test_ops_cuda [--list] [--small] [SUBSTRING...]\n"
		       "  runs each CUDA op against the CPU reference; --list: print the cases, run none;\n"
		       "  --small: only the odd small shapes; SUBSTRING: only cases whose title contains\n"
		       "  one (e.g. lora attention_backward)\n");
		return 0;
	}
	for (; arg < argc; arg++) {
		if (strcmp(argv[arg], "--list") == 0)
			list_only = 1;
		else if (strcmp(argv[arg], "--small") == 0)
			small_only = 1;
		else
			break;
	}
	filters = argv + arg;
	n_filters = argc - arg;
	if (list_only) {
		run_cases(small_only);
		fprintf(stderr, "test_ops_cuda: %d cases\n", cases_listed);
		return cases_listed ? 0 : 2;
	}

	char err[256] = "";
	gpu = backend_cuda(err, sizeof err);
	if (!gpu) {
		fprintf(stderr, "test_ops_cuda: %s\n", err);
		return 2;
	}
	printf("device: %s, %ld MiB, driver %s, CUDA runtime %s\n\n", gpu->device_name, gpu->device_mem_mb,
	       gpu->driver_version, gpu->runtime_version);
	ev_start = gpu->event_create();
	ev_end = gpu->event_create();
	double t_start = now_ms();
	run_cases(small_only);
	printf("test_ops_cuda: %d passed, %d failed (%.1f s)\n", cases_passed, cases_failed,
	       (now_ms() - t_start) / 1e3);
	gpu->event_destroy(ev_start);
	gpu->event_destroy(ev_end);
	if (cases_passed + cases_failed == 0) {
		fprintf(stderr, "test_ops_cuda: no case matches the filters\n");
		return 2;
	}
	return cases_failed ? 1 : 0;
}
