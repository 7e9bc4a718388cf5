// defines: poros_cpu_ops
/* The CPU backend's op table: every op of POROS_OPS_LIST bound to its
 * <op>_cpu function, so a missing one is a link error, not a NULL call. */
#include "ops.h"

#define POROS_CPU_ENTRY(ret, name, args) .name = name##_cpu,
const struct poros_ops poros_cpu_ops = {
	POROS_OPS_LIST(POROS_CPU_ENTRY)
};
