/* tests/unit/test_ops_grad.c: every backward op of the CPU backend
 * (tests/ops/<op>.c, OPS_TEST_GRAD sections) against central finite
 * differences of an independent double-precision forward written there
 * (ops_check.h: finite_diff says how, and why its error is far below the
 * tolerances). */
#define OPS_TEST_GRAD
#include "../ops/ops_check.h"
#include "../ops/ops_all.h"

#define GRAD_ENTRY(ret, name, args) { #name, name##_grad_check },
static const struct op_check grad_checks[] = { POROS_OPS_LIST(GRAD_ENTRY) };

/* usage: test_ops_grad [OP...]: the named ops' gradient checks alone, or
 * every op's */
int main(int argc, char **argv)
{
	run_op_checks("test_ops_grad", "gradient", grad_checks, sizeof grad_checks / sizeof grad_checks[0],
	              "the others have no gradient of their own", argc, argv);
	return op_checks_verdict("test_ops_grad");
}
