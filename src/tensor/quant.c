/* Tensor element types: block layouts, exact dequantization and row dot products.
 *
 * Block layouts follow ggml (ggml-common.h); all multi-byte fields are little-endian and
 * read with memcpy since blocks are not aligned in a GGUF mapping. Dequantizers perform the
 * same f32 operations in the same order as ggml's reference code (and gguf-py), so the
 * results are bit-identical; the build uses -ffp-contract=off so no FMA sneaks in. */
#include <math.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define KVP_AVX2 1
#endif
#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "kvprobe/tensor.h"
#include "kquant_layout.h"

#define QK 32   /* elements per block of the legacy quants */
#define QK_K 256 /* elements per K-quant super-block */

/* ---- scalar conversions ----------------------------------------------------------------- */

float kvp_fp16_to_f32(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h); /* exact, like the portable path below */
#endif
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t kvp_f32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* result is subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign; /* < half the smallest subnormal */
        uint32_t e = absx >> 23, man = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = ((absx >> 13) - ((127 - 15) << 10)), rem = absx & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
    return (uint16_t)(sign | half);
}

float kvp_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline float rd_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return kvp_fp16_to_f32(h);
}

/* ---- legacy 32-element quants ----------------------------------------------------------- */

static void deq_q4_0(const uint8_t *b, float *y) { /* d, qs[16] */
    float d = rd_f16(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < QK / 2; j++) {
        y[j] = (float)((qs[j] & 0x0f) - 8) * d;
        y[j + QK / 2] = (float)((qs[j] >> 4) - 8) * d;
    }
}

static void deq_q4_1(const uint8_t *b, float *y) { /* d, m, qs[16] */
    float d = rd_f16(b), m = rd_f16(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < QK / 2; j++) {
        y[j] = (float)(qs[j] & 0x0f) * d + m;
        y[j + QK / 2] = (float)(qs[j] >> 4) * d + m;
    }
}

static void deq_q5_0(const uint8_t *b, float *y) { /* d, qh[4], qs[16] */
    float d = rd_f16(b);
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < QK / 2; j++) {
        int hi0 = (int)((qh >> j) << 4) & 0x10;
        int hi1 = (int)(qh >> (j + 12)) & 0x10;
        y[j] = (float)(((qs[j] & 0x0f) | hi0) - 16) * d;
        y[j + QK / 2] = (float)(((qs[j] >> 4) | hi1) - 16) * d;
    }
}

static void deq_q5_1(const uint8_t *b, float *y) { /* d, m, qh[4], qs[16] */
    float d = rd_f16(b), m = rd_f16(b + 2);
    uint32_t qh;
    memcpy(&qh, b + 4, 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < QK / 2; j++) {
        int hi0 = (int)((qh >> j) << 4) & 0x10;
        int hi1 = (int)(qh >> (j + 12)) & 0x10;
        y[j] = (float)((qs[j] & 0x0f) | hi0) * d + m;
        y[j + QK / 2] = (float)((qs[j] >> 4) | hi1) * d + m;
    }
}

static void deq_q8_0(const uint8_t *b, float *y) { /* d, qs[32] */
    float d = rd_f16(b);
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int j = 0; j < QK; j++) y[j] = (float)qs[j] * d;
}

/* ---- K-quants (256-element super-blocks) ------------------------------------------------ */

static void deq_q2_k(const uint8_t *b, float *y) { /* scales[16], qs[64], d, dmin */
    const uint8_t *scales = b, *q = b + 16;
    float d = rd_f16(b + 80), dmin = rd_f16(b + 82);
    int is = 0;
    for (int half = 0; half < 2; half++, q += 32) {
        for (int shift = 0; shift < 8; shift += 2) {
            for (int g = 0; g < 2; g++) {
                uint8_t sc = scales[is++];
                float dl = d * (float)(sc & 0x0f), ml = dmin * (float)(sc >> 4);
                for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[l + 16 * g] >> shift) & 3) - ml;
            }
        }
    }
}

/* 16 signed 6-bit scales packed in 12 bytes (Q3_K): low nibble from byte k (k<8) or the high
 * nibble of byte k-8, top 2 bits from byte 8 + k%4 at bit 2*(k/4). */
static void unpack_q3_k_scales(const uint8_t *s, int8_t out[16]) {
    for (int k = 0; k < 16; k++) {
        int lo = k < 8 ? (s[k] & 0x0f) : (s[k - 8] >> 4);
        int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
        out[k] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

static void deq_q3_k(const uint8_t *b, float *y) { /* hmask[32], qs[64], scales[12], d */
    const uint8_t *hm = b, *q = b + 32;
    float d = rd_f16(b + 108);
    int8_t sc[16];
    unpack_q3_k_scales(b + 96, sc);
    int is = 0;
    uint8_t m = 1;
    for (int half = 0; half < 2; half++, q += 32) {
        for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
            for (int g = 0; g < 2; g++) {
                float dl = d * (float)sc[is++];
                for (int l = 16 * g; l < 16 * g + 16; l++)
                    *y++ = dl * (float)(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
            }
        }
    }
}

/* Scale and min of sub-block j from the 12-byte packed array of Q4_K/Q5_K. */
static void scale_min_k4(int j, const uint8_t *s, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
        *mn = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

static void deq_q4_k(const uint8_t *b, float *y) { /* d, dmin, scales[12], qs[128] */
    float d = rd_f16(b), dmin = rd_f16(b + 2);
    const uint8_t *scales = b + 4, *q = b + 16;
    for (int c = 0; c < 4; c++, q += 32) {
        uint8_t sc, mn;
        scale_min_k4(2 * c, scales, &sc, &mn);
        float d1 = d * (float)sc, m1 = dmin * (float)mn;
        scale_min_k4(2 * c + 1, scales, &sc, &mn);
        float d2 = d * (float)sc, m2 = dmin * (float)mn;
        for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0x0f) - m1;
        for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
    }
}

static void deq_q5_k(const uint8_t *b, float *y) { /* d, dmin, scales[12], qh[32], qs[128] */
    float d = rd_f16(b), dmin = rd_f16(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
    uint8_t u1 = 1, u2 = 2;
    for (int c = 0; c < 4; c++, ql += 32, u1 <<= 2, u2 <<= 2) {
        uint8_t sc, mn;
        scale_min_k4(2 * c, scales, &sc, &mn);
        float d1 = d * (float)sc, m1 = dmin * (float)mn;
        scale_min_k4(2 * c + 1, scales, &sc, &mn);
        float d2 = d * (float)sc, m2 = dmin * (float)mn;
        for (int l = 0; l < 32; l++) *y++ = d1 * (float)((ql[l] & 0x0f) + ((qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++) *y++ = d2 * (float)((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
}

static void deq_q6_k(const uint8_t *b, float *y) { /* ql[128], qh[64], scales[16] (i8), d */
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = rd_f16(b + 208);
    for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
    }
}

/* ---- lane = block K-quants (kquant_layout.h) ---------------------------------------------- */

/* The file's dequantizers (deq_q4_k, deq_q6_k) reading the quants from their lane = block
 * places: the same float operations on the same values, so the same floats. */
static void deq_q4_k_lb(const uint8_t *b, float *y) {
    float d = rd_f16(b), dmin = rd_f16(b + 2);
    for (int k = 0; k < 8; k++) {
        float d1 = d * (float)b[q4k_lb_scale(k)], m1 = dmin * (float)b[q4k_lb_min(k)];
        for (int l = 0; l < 32; l++) {
            kq_pos q = q4k_quant(32 * k + l, 1);
            *y++ = d1 * (float)((b[q.byte] >> q.shift) & 15) - m1;
        }
    }
}

static void deq_q6_k_lb(const uint8_t *b, float *y) {
    float d = rd_f16(b + 208);
    for (int e = 0; e < QK_K; e++) {
        kq_pos lq = q6k_low(e, 1), hq = q6k_high(e, 1);
        int q = (((b[lq.byte] >> lq.shift) & 15) | (((b[hq.byte] >> hq.shift) & 3) << 4)) - 32;
        y[e] = d * (float)(int8_t)b[q6k_scale(e >> 5, (e >> 4) & 1, 1)] * (float)q;
    }
}

enum kvp_type kvp_repack_type(enum kvp_type type) {
    switch (type) {
    case KVP_TYPE_Q4_K: return KVP_TYPE_Q4_K_LB;
    case KVP_TYPE_Q6_K: return KVP_TYPE_Q6_K_LB;
    default: return type;
    }
}

/* The load-time repack, file -> lane = block (kquant_layout.h), a byte at a time (field by
 * field through kq_pos it took seconds on a 1.5B model): the super-block's quants unpacked to
 * q[block][element], then each byte of the new layout assembled from its elements. test_qdot
 * checks it against the layout's definition: the repacked rows dequantize (deq_*_lb, through
 * kq_pos) to the file's floats. */
static void q4k_to_lb(const uint8_t *src, uint8_t *dst) {
    uint8_t q[8][32];
    for (int k = 0; k < 8; k++)
        for (int l = 0; l < 32; l++) q[k][l] = (src[16 + 32 * (k >> 1) + l] >> (4 * (k & 1))) & 15;
    memcpy(dst, src, 4); /* d, dmin */
    for (int k = 0; k < 8; k++) scale_min_k4(k, src + 4, &dst[q4k_lb_scale(k)], &dst[q4k_lb_min(k)]);
    for (int v = 0; v < 4; v++) /* group 2v low, 2v + 1 high */
        for (int k = 0; k < 8; k++)
            for (int c = 0; c < 4; c++) {
                kq_pos p = q4k_quant(32 * k + 8 * v + c, 1);
                dst[p.byte] = (uint8_t)(q[k][8 * v + c] | (q[k][8 * v + 4 + c] << 4));
            }
}

static void q6k_to_lb(const uint8_t *src, uint8_t *dst) {
    uint8_t q[8][32];
    for (int k = 0; k < 8; k++)
        for (int l = 0; l < 32; l++)
            q[k][l] = (uint8_t)(((src[64 * (k >> 2) + 32 * (k & 1) + l] >> (4 * ((k >> 1) & 1))) & 15) |
                                (((src[128 + 32 * (k >> 2) + l] >> (2 * (k & 3))) & 3) << 4));
    for (int v = 0; v < 4; v++)
        for (int k = 0; k < 8; k++)
            for (int c = 0; c < 4; c++)
                dst[32 * v + 4 * k + c] = (uint8_t)((q[k][8 * v + c] & 15) | ((q[k][8 * v + 4 + c] & 15) << 4));
    for (int h = 0; h < 2; h++) /* group 4h + m in bits 2m */
        for (int k = 0; k < 8; k++)
            for (int c = 0; c < 4; c++) {
                int b = 0;
                for (int m = 0; m < 4; m++) b |= (q[k][4 * (4 * h + m) + c] >> 4) << (2 * m);
                dst[128 + 32 * h + 4 * k + c] = (uint8_t)b;
            }
    for (int k = 0; k < 8; k++)
        for (int h = 0; h < 2; h++) dst[q6k_scale(k, h, 1)] = src[q6k_scale(k, h, 0)];
    memcpy(dst + 208, src + 208, 2);
}

void kvp_repack_rows(enum kvp_type type, const void *src, void *dst, int64_t nrows, int64_t n) {
    size_t bytes = (size_t)nrows * kvp_row_bytes(type, n);
    const uint8_t *s = src;
    uint8_t *d = dst;
    switch (type) {
    case KVP_TYPE_Q4_K:
        for (size_t o = 0; o < bytes; o += 144, d += KQ4_LB_BYTES) q4k_to_lb(s + o, d);
        return;
    case KVP_TYPE_Q6_K:
        for (size_t o = 0; o < bytes; o += 210) q6k_to_lb(s + o, d + o);
        return;
    default:
        memcpy(dst, src, bytes);
        return;
    }
}

/* ---- plain float types (one "block" = one element; handled row-wise) -------------------- */

static void deq_f32(const uint8_t *b, float *y) { memcpy(y, b, 4); }
static void deq_f16(const uint8_t *b, float *y) { *y = rd_f16(b); }
static void deq_bf16(const uint8_t *b, float *y) {
    uint16_t h;
    memcpy(&h, b, 2);
    *y = kvp_bf16_to_f32(h);
}

/* ---- trait table ------------------------------------------------------------------------ */

typedef void (*deq_block_fn)(const uint8_t *block, float *out);

typedef struct type_traits {
    kvp_type_info info;
    deq_block_fn deq;
} type_traits;

static const type_traits TRAITS[KVP_TYPE_COUNT] = {
    [KVP_TYPE_F32] = {{"F32", 1, 4, 1}, deq_f32},
    [KVP_TYPE_F16] = {{"F16", 1, 2, 1}, deq_f16},
    [KVP_TYPE_BF16] = {{"BF16", 1, 2, 1}, deq_bf16},
    [KVP_TYPE_Q4_0] = {{"Q4_0", QK, 18, 1}, deq_q4_0},
    [KVP_TYPE_Q4_1] = {{"Q4_1", QK, 20, 1}, deq_q4_1},
    [KVP_TYPE_Q5_0] = {{"Q5_0", QK, 22, 1}, deq_q5_0},
    [KVP_TYPE_Q5_1] = {{"Q5_1", QK, 24, 1}, deq_q5_1},
    [KVP_TYPE_Q8_0] = {{"Q8_0", QK, 34, 1}, deq_q8_0},
    [KVP_TYPE_Q2_K] = {{"Q2_K", QK_K, 84, 1}, deq_q2_k},
    [KVP_TYPE_Q3_K] = {{"Q3_K", QK_K, 110, 1}, deq_q3_k},
    [KVP_TYPE_Q4_K] = {{"Q4_K", QK_K, 144, 1}, deq_q4_k},
    [KVP_TYPE_Q5_K] = {{"Q5_K", QK_K, 176, 1}, deq_q5_k},
    [KVP_TYPE_Q6_K] = {{"Q6_K", QK_K, 210, 1}, deq_q6_k},
    [KVP_TYPE_Q4_K_LB] = {{"Q4_K_LB", QK_K, KQ4_LB_BYTES, 1}, deq_q4_k_lb},
    [KVP_TYPE_Q6_K_LB] = {{"Q6_K_LB", QK_K, 210, 1}, deq_q6_k_lb},
    /* Known layouts we can size (inspect, skip) but not compute with. */
    [KVP_TYPE_Q8_1] = {{"Q8_1", QK, 36, 0}, NULL},
    [KVP_TYPE_Q8_K] = {{"Q8_K", QK_K, 292, 0}, NULL},
    [KVP_TYPE_I8] = {{"I8", 1, 1, 0}, NULL},
    [KVP_TYPE_I16] = {{"I16", 1, 2, 0}, NULL},
    [KVP_TYPE_I32] = {{"I32", 1, 4, 0}, NULL},
    [KVP_TYPE_I64] = {{"I64", 1, 8, 0}, NULL},
    [KVP_TYPE_F64] = {{"F64", 1, 8, 0}, NULL},
};

const kvp_type_info *kvp_type_get(uint32_t type) {
    if (type >= KVP_TYPE_COUNT || !TRAITS[type].info.name) return NULL;
    return &TRAITS[type].info;
}

const char *kvp_type_name(uint32_t type) {
    const kvp_type_info *ti = kvp_type_get(type);
    return ti ? ti->name : "unknown";
}

size_t kvp_row_bytes(enum kvp_type type, int64_t n) {
    const kvp_type_info *ti = kvp_type_get(type);
    return (size_t)(n / ti->block_elems) * ti->block_bytes;
}

void kvp_dequantize_row(enum kvp_type type, const void *src, float *dst, int64_t n) {
    const type_traits *tt = &TRAITS[type];
    const uint8_t *b = src;
    if (type == KVP_TYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    int64_t bs = tt->info.block_elems;
    for (int64_t i = 0; i < n; i += bs, b += tt->info.block_bytes) tt->deq(b, dst + i);
}

/* Dot of f32 vectors with a fixed summation order, so results are deterministic for a given
 * n and build regardless of threading or batching. AVX2+FMA: 4 x 8 fused accumulators;
 * portable: 8 scalar accumulators. */
float kvp_dot_f32(const float *a, const float *b, int64_t n) {
    int64_t i = 0;
#ifdef KVP_AVX2
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float sum = _mm_cvtss_f32(h);
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
#else
    float acc[8] = {0};
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    for (; i < n; i++) acc[0] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
#endif
}

/* Rows are dequantized in chunks of this many elements (a multiple of every block size) into
 * a stack buffer, then dotted with each input vector: one pass over the weights per batch. */
#define DOT_CHUNK 4096

float kvp_dot_row(enum kvp_type type, const void *row, const float *x, int64_t n) {
    float out;
    kvp_dot_row_batch(type, row, x, n, 1, n, &out);
    return out;
}

void kvp_dot_row_batch(enum kvp_type type, const void *row, const float *x, int64_t ldx, int nb, int64_t n,
                       float *out) {
    if (type == KVP_TYPE_F32) {
        for (int b = 0; b < nb; b++) out[b] = kvp_dot_f32(row, x + b * ldx, n);
        return;
    }
    const type_traits *tt = &TRAITS[type];
    const uint8_t *p = row;
    float buf[DOT_CHUNK];
    for (int b = 0; b < nb; b++) out[b] = 0.0f;
    for (int64_t i = 0; i < n; i += DOT_CHUNK) {
        int64_t m = n - i < DOT_CHUNK ? n - i : DOT_CHUNK;
        kvp_dequantize_row(type, p + i / tt->info.block_elems * tt->info.block_bytes, buf, m);
        for (int b = 0; b < nb; b++) out[b] += kvp_dot_f32(buf, x + b * ldx + i, m);
    }
}
