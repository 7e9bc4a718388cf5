// defines: cast_f32_to_bf16_cuda, cast_f32_to_bf16_kernel, cast_f32_to_bf16_rows_kernel
//
// out (rows,cols) = bf16(in (rows,cols)), round to nearest even with ops.h's
// bit recipe, so the bits equal the CPU's for every input, NaN included.
// in is contiguous; rows of out are ld_out apart.  Contiguous out (ld_out ==
// cols) is one flat run: float4 loads and 8-byte stores when aligned, then
// the scalar tail.  A pitched out goes row by row, four elements at a time
// when every row starts aligned, and never writes past a row's cols.
#include "common.cuh"

#define CAST_THREADS 256

// out (n) = bf16(in (n)), both contiguous.
__global__ void cast_f32_to_bf16_kernel(bf16 *out, const float *in, long n, bool vec4)
{
	flat_elementwise(
		n, vec4,
		[&](long i) {
			float4 x = ((const float4 *)in)[i];
			((uint2 *)out)[i] = make_uint2(pack_bf16x2(x.x, x.y), pack_bf16x2(x.z, x.w));
		},
		[&](long i) { out[i] = f32_to_bf16(in[i]); });
}

// out (rows,cols), rows ld_out apart, = bf16(in (rows,cols)).  vec4: cols
// and ld_out multiples of 4, in 16-byte and out 8-byte aligned, so each
// group of four (never straddling a row) is one load and one store.
__global__ void cast_f32_to_bf16_rows_kernel(bf16 *out, long ld_out, const float *in, long rows, long cols,
                                             bool vec4)
{
	rows_elementwise(rows, cols, vec4, [&](long r, long c) {
		const float *x = in + r * cols + c;
		bf16 *y = out + r * ld_out + c;
		if (vec4) {
			float4 v = *(const float4 *)x;
			*(uint2 *)y = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
		} else {
			*y = f32_to_bf16(*x);
		}
	});
}

extern "C" void cast_f32_to_bf16_cuda(bf16 *out, int ld_out, const float *in, long rows, int cols)
{
	if (rows <= 0 || cols <= 0)
		return;
	check_pitch("cast_f32_to_bf16_cuda", "ld_out", ld_out, cols);
	cudaStream_t stream = poros_cuda_compute_stream();
	if (ld_out == cols) {
		long n = rows * cols;
		bool vec4 = aligned16(in) && ((uintptr_t)out & 7u) == 0;
		cast_f32_to_bf16_kernel<<<flat_grid(n, vec4, CAST_THREADS), CAST_THREADS, 0, stream>>>(out, in, n, vec4);
	} else {
		bool vec4 = cols % 4 == 0 && ld_out % 4 == 0 && aligned16(in) && ((uintptr_t)out & 7u) == 0;
		long items = rows * (vec4 ? cols / 4 : cols);
		cast_f32_to_bf16_rows_kernel<<<grid_for(items, CAST_THREADS), CAST_THREADS, 0, stream>>>(
			out, ld_out, in, rows, cols, vec4);
	}
	launchCheck();
}
