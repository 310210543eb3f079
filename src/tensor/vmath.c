/* Vectorized exp and the gated activations built on it. One polynomial (Cephes' expf) in
 * every code path, so vector lanes and scalar tails compute the same function:
 *   exp(x) = 2^n * p(r),  n = round(x / ln 2),  r = x - n ln 2 (ln 2 split in two parts). */
#include "vmath.h"

#include <math.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#define VM_W 16
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VM_W 8
#endif

#define EXP_HI 88.3762626647949f
#define EXP_LO -87.0f /* below: 0 (keeps 2^n a normal number) */
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define P0 1.9875691500e-4f
#define P1 1.3981999507e-3f
#define P2 8.3334519073e-3f
#define P3 4.1665795894e-2f
#define P4 1.6666665459e-1f
#define P5 5.0000001201e-1f

static inline float exp_scalar(float x) {
    if (isnan(x)) return x; /* (int32_t)NaN is undefined; the vector lanes propagate it too */
    if (x < EXP_LO) return 0.0f;
    if (x > EXP_HI) x = EXP_HI;
    float n = nearbyintf(x * LOG2E);
    float r = fmaf(n, -LN2_HI, x);
    r = fmaf(n, -LN2_LO, r);
    float p = fmaf(fmaf(fmaf(fmaf(fmaf(P0, r, P1), r, P2), r, P3), r, P4), r, P5);
    float y = fmaf(p, r * r, r) + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &bits, 4);
    return y * s;
}

#if VM_W == 16
typedef __m512 vf;
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
#define VSET1 _mm512_set1_ps
#define VMUL _mm512_mul_ps
#define VADD _mm512_add_ps
#define VDIV _mm512_div_ps
#define VFMA _mm512_fmadd_ps
#define VMIN _mm512_min_ps
#define VMAX _mm512_max_ps
#define VROUND(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VPOW2(n) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23))
#define VZERO_BELOW(x, lo, r) _mm512_maskz_mov_ps((__mmask16)~_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), r)
#elif VM_W == 8
typedef __m256 vf;
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VSET1 _mm256_set1_ps
#define VMUL _mm256_mul_ps
#define VADD _mm256_add_ps
#define VDIV _mm256_div_ps
#define VFMA _mm256_fmadd_ps
#define VMIN _mm256_min_ps
#define VMAX _mm256_max_ps
#define VROUND(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define VPOW2(n) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23))
#define VZERO_BELOW(x, lo, r) _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), r)
#endif

#ifdef VM_W
/* exp_scalar, lane by lane */
static inline vf exp_vec(vf x0) {
    /* min/max return their second operand when either is NaN: x0 last, so NaN propagates */
    vf lo = VSET1(EXP_LO), x = VMAX(lo, VMIN(VSET1(EXP_HI), x0));
    vf n = VROUND(VMUL(x, VSET1(LOG2E)));
    vf r = VFMA(n, VSET1(-LN2_HI), x);
    r = VFMA(n, VSET1(-LN2_LO), r);
    vf p = VFMA(VSET1(P0), r, VSET1(P1));
    p = VFMA(p, r, VSET1(P2));
    p = VFMA(p, r, VSET1(P3));
    p = VFMA(p, r, VSET1(P4));
    p = VFMA(p, r, VSET1(P5));
    vf y = VADD(VFMA(p, VMUL(r, r), r), VSET1(1.0f));
    return VZERO_BELOW(x0, lo, VMUL(y, VPOW2(n)));
}
#endif

void kvp_vexp(float *x, int64_t n) {
    int64_t i = 0;
#ifdef VM_W
    for (; i + VM_W <= n; i += VM_W) VSTORE(x + i, exp_vec(VLOAD(x + i)));
#endif
    for (; i < n; i++) x[i] = exp_scalar(x[i]);
}

/* x * sigmoid(k * x * (1 + c x^2)): gelu_tanh with k = 2 sqrt(2/pi), c = 0.044715 (since
 * 0.5 (1 + tanh(u)) = sigmoid(2u)); silu is k = 1, c = 0. */
#define GELU_K 1.5957691216057308f
#define GELU_C 0.044715f

static inline float gate_scalar(float x, float k, float c) {
    float u = (k * x) * fmaf(c * x, x, 1.0f);
    return x / (1.0f + exp_scalar(-u));
}

static void gate_mul(float *a, const float *b, int64_t n, float k, float c) {
    int64_t i = 0;
#ifdef VM_W
    vf vk = VSET1(k), vc = VSET1(c), one = VSET1(1.0f), neg = VSET1(-1.0f);
    for (; i + VM_W <= n; i += VM_W) {
        vf x = VLOAD(a + i);
        vf u = VMUL(VMUL(vk, x), VFMA(VMUL(vc, x), x, one));
        vf g = VDIV(x, VADD(one, exp_vec(VMUL(neg, u))));
        VSTORE(a + i, VMUL(g, VLOAD(b + i)));
    }
#endif
    for (; i < n; i++) a[i] = gate_scalar(a[i], k, c) * b[i];
}

void kvp_gelu_mul(float *a, const float *b, int64_t n) { gate_mul(a, b, n, GELU_K, GELU_C); }
void kvp_silu_mul(float *a, const float *b, int64_t n) { gate_mul(a, b, n, 1.0f, 0.0f); }
