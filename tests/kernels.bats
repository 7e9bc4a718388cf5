#!/usr/bin/env bats
# Source checks of the CUDA kernels that need no GPU (CI has none).

bats_require_minimum_version 1.5.0

setup() {
	load test_helper/common-setup
	_common_setup
}

# Kernels launched on a grid that covers their work by construction: a
# block a row (T blocks), a tile grid, one block.  Every other kernel must
# loop grid-stride, since grid_for (kernels/cuda/common.cuh) caps its grid
# at 65536 blocks: attention_unpack_kernel and attention_expand_kernel
# did not, and left gradients unwritten past 2^24 / 2^27 elements.
EXPLICIT_GRID="attention_dkdv_kernel crossentropy_kernel embedding_forward_kernel lora_din_kernel
lora_weight_ext_rows_kernel rmsnorm_forward_kernel rmsnorm_backward_kernel sumsq_final_kernel"

# kernel_grids FILE...: the check over those sources; prints what is wrong
kernel_grids() {
	awk -f "$POROS_ROOT/tests/lint/kernel_grids.awk" "$@" | awk -v allowed="$EXPLICIT_GRID" '
		BEGIN { n = split(allowed, a, /[ \n]+/); for (i = 1; i <= n; i++) if (a[i] != "") ok[a[i]] = 1 }
		$1 == "kernel" { seen[$2] = 1; if ($3 == "explicit" && !ok[$2]) print "no grid-stride loop: " $2 }
		$1 == "launch" && ok[$2] && $0 ~ /grid_for|flat_grid/ { print "capped grid for an explicit-grid kernel: " $2 }
		END { for (k in ok) if (!seen[k]) print "listed but not found: " k }'
}

@test "every CUDA kernel loops grid-stride or is launched on an explicit grid, never grid_for's" {
	run -0 kernel_grids "$POROS_ROOT"/kernels/cuda/*.cu "$POROS_ROOT"/kernels/cuda/*.cuh
	[ -z "$output" ] || { echo "$output"; false; }
}

@test "the grid check finds a kernel without a grid-stride loop, and a capped grid for a listed one" {
	cat >"$BATS_TEST_TMPDIR/k.cu" <<-'EOC'
	__global__ void one_each_kernel(float *x, long n)
	{
		long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
		if (i >= n)
			return;
		x[i] = 0.0f;
	}
	__global__ void __launch_bounds__(256)
	rmsnorm_forward_kernel(float *x)
	{
		x[blockIdx.x] = 1.0f;
	}
	static void f(float *x, long n)
	{
		one_each_kernel<<<grid_for(n, 256), 256>>>(x, n);
		rmsnorm_forward_kernel<<<grid_for(n, 256), 256>>>(x);
	}
	EOC
	run -0 kernel_grids "$BATS_TEST_TMPDIR/k.cu"
	[[ "$output" == *"no grid-stride loop: one_each_kernel"* ]]
	[[ "$output" == *"capped grid for an explicit-grid kernel: rmsnorm_forward_kernel"* ]]
	[[ "$output" == *"listed but not found: crossentropy_kernel"* ]]
}
