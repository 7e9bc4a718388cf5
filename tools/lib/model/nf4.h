/* tools/lib/model/nf4.h: host-side NF4 quantization (QLoRA NormalFloat4, block
 * 64, fp32 absmax scales), the inverse of the nf4_dequantize op in
 * kernels/ops.h, with the same code book (poros_nf4_code). */
#ifndef POROS_NF4_H
#define POROS_NF4_H

#include <stdint.h>

/* Quantizes n floats (n % 64 == 0) to NF4: per block of 64, absmax = max |x|, each element -> nearest code of
   x/absmax (ties to the lower index), packed two per byte, element 2i in the high nibble; absmax 0 -> all zero codes.
   packed (n/2), absmax (n/64).  "Zero code" is the code whose value is 0.0 (index 7, so a byte 0x77), which
   dequantizes to +0.0; NaN inputs also take it and never become the absmax. */
void nf4_quantize(uint8_t *packed, float *absmax, const float *in, long n);
void nf4_quantize_bf16(uint8_t *packed, float *absmax, const uint16_t *in, long n);
/* Index of the code nearest to x (x already divided by absmax). */
int nf4_nearest_code(float x);

#endif
