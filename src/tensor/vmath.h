/* Vectorized elementwise math for the forward pass (src/tensor/vmath.c). Accuracy: exp within
 * 2 ulp of the correctly rounded result on [-87, 88]; exp of anything below -87 is 0. */
#ifndef KVPROBE_VMATH_H
#define KVPROBE_VMATH_H

#include <stdint.h>

/* x[i] = exp(x[i]) */
void kvp_vexp(float *x, int64_t n);
/* a[i] = gelu_tanh(a[i]) * b[i]   (gelu_tanh(x) = x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3))) */
void kvp_gelu_mul(float *a, const float *b, int64_t n);
/* a[i] = silu(a[i]) * b[i]        (silu(x) = x * sigmoid(x)) */
void kvp_silu_mul(float *a, const float *b, int64_t n);

#endif
