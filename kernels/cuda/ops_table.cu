// defines: poros_cuda_ops
//
// The CUDA backend's op table: every op of POROS_OPS_LIST bound to its
// <op>_cuda launcher, in the struct's own member order (both come from the
// one list), so a missing op is a link error, not a NULL call.
#include "common.cuh"

#define POROS_CUDA_ENTRY(ret, name, args) name##_cuda,
extern "C" const struct poros_ops poros_cuda_ops = {
	POROS_OPS_LIST(POROS_CUDA_ENTRY)
};
