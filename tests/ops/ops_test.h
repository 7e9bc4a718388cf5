/* tests/ops/ops_test.h: what every tests/ops/<op>.c includes first, so each
 * file compiles alone under any one driver's define (ops_all.h names them):
 * that driver's helpers (cuda_check.h under OPS_TEST_CUDA, ops_check.h
 * otherwise) and the reference tier, kernels/ref/ref.h. */
#ifndef POROS_OPS_TEST_H
#define POROS_OPS_TEST_H

#ifdef OPS_TEST_CUDA
#include "cuda_check.h"
#else
#include "ops_check.h"
#endif
#include "ref/ref.h"

#endif
