/* tests/unit/test_ops_grad.c: every backward op of the CPU backend
 * (tests/ops/<op>.c, OPS_TEST_GRAD sections) against central finite
 * differences of an independent double-precision forward written there
 * (ops_check.h: finite_diff says how, and why its error is far below the
 * tolerances). */
#define OPS_TEST_GRAD
#include "../ops/ops_check.h"
#include "../ops/ops_all.h"

#define GRAD_ENTRY(ret, name, args) { #name, name##_grad_check },
static const struct { const char *op; void (*run)(void); } grad_checks[] = { POROS_OPS_LIST(GRAD_ENTRY) };

int main(void)
{
	int ran = 0;
	for (size_t i = 0; i < sizeof grad_checks / sizeof grad_checks[0]; i++) {
		if (grad_checks[i].run) {
			grad_checks[i].run();
			ran++;
		}
	}
	printf("test_ops_grad: gradient checks of %d of %zu ops (the others have no gradient of their own)\n", ran,
	       sizeof grad_checks / sizeof grad_checks[0]);
	if (failures) {
		printf("test_ops_grad: %d checks failed\n", failures);
		return 1;
	}
	printf("test_ops_grad: all checks passed\n");
	return 0;
}
