/* tests/ops/ops_all.h: every op's checks, one file per op of POROS_OPS_LIST
 * (kernels/ops.h), each holding that op's shapes, tolerances and reference.
 *
 * A driver defines one of these, includes its helpers, then this file:
 *   OPS_TEST_VALUES  tests/unit/test_ops_values.c, with ops_check.h: each
 *                    file defines static void <op>_values_check(void), the
 *                    op's values against hand computation or a double
 *                    reference
 *   OPS_TEST_GRAD    tests/unit/test_ops_grad.c, with ops_check.h:
 *                    static void <op>_grad_check(void), the op's gradients
 *                    against finite differences of a double forward
 *   OPS_TEST_CUDA    tests/gpu/test_ops_cuda.c, with cuda_check.h:
 *                    static void <op>_cuda_check(int realistic), the CUDA op
 *                    against the CPU op, at the small shapes (0) or the
 *                    model shapes (1)
 * A file with no check of a kind defines that name as NULL and says where
 * the op is covered, so a driver's table, generated from POROS_OPS_LIST,
 * names every op and a missing file fails to compile.  Each file stands
 * alone (`make test-ops-alone` compiles it so under each define): it
 * includes ops_test.h (the driver's helpers and the double-precision
 * references of kernels/ref/), and a CUDA section that shares its case with
 * a sibling op includes that family's <family>_case.h (rope, swiglu, lora,
 * attention, matmul).  The order below is POROS_OPS_LIST's, for reading. */
#ifndef POROS_OPS_ALL_H
#define POROS_OPS_ALL_H

#include "embedding_forward.c"
#include "rmsnorm_forward.c"
#include "rmsnorm_backward.c"
#include "matmul_forward.c"
#include "matmul_forward_bf16.c"
#include "matmul_backward_input.c"
#include "lora_forward.c"
#include "lora_backward.c"
#include "lora_weight_ext.c"
#include "rope_forward.c"
#include "rope_backward.c"
#include "attention_forward.c"
#include "attention_backward.c"
#include "swiglu_forward.c"
#include "swiglu_backward.c"
#include "crossentropy_forward_backward.c"
#include "add_inplace.c"
#include "cast_f32_to_bf16.c"
#include "nf4_dequantize.c"
#include "sumsq.c"
#include "adamw_update.c"

#endif
