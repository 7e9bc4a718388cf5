/* kernels/cpu/cpu_par.h: when a CPU op is worth spreading over threads.
 * Below this much work (multiply-adds or elements) starting a parallel region
 * costs more than it saves, and on a loaded machine spinning threads make tiny
 * CI runs many times slower.  The split never changes results: each output
 * element is computed by one thread in a fixed order either way. */
#ifndef POROS_CPU_PAR_H
#define POROS_CPU_PAR_H
#define POROS_CPU_PAR_MIN 4194304L
#endif
