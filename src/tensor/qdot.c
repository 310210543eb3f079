/* The fast matmul path: activations quantized to 8-bit blocks, integer block dot products.
 *
 * Activation rows are cut into blocks of 32 and stored as int8 q with one f32 scale d per
 * block (ggml's Q8_0 idea: d = max|x| / 127, q = round-to-nearest-even(x / d)).
 *
 * Every weight type is read as blocks of 32 unsigned 8-bit values u, with a scale and a min
 * per 16-element half h and a per-type integer offset:
 *       w = sc[h] * (u - off) + mn[h]
 * (Q4_0: u = nibble, off 8; Q4_1: u = nibble, mn = m; Q6_K: 6 bits, off 32, sc = d * scale;
 * Q4_K: sc = d * scale, mn = -dmin * min; ...). The dot of a weight block with an activation
 * block is then exact in integers, sum(u * q) - off * sum(q), scaled once per half:
 *       dot += d * (sc[h] * I[h] + mn[h] * S[h]),   S[h] = sum of q over the half.
 *
 * A tile of RM weight rows x RN activation rows is computed at a time: each weight block is
 * unpacked once per tile and reused for RN activations. Every (row, activation) result goes
 * through the same operations in the same order whatever the tile shape, the thread count or
 * the batch size, so batching never changes a bit.
 *
 * ISA: AVX-512 VNNI (vpdpbusd on 256-bit vectors) or AVX-VNNI; AVX2 + FMA (maddubs); a
 * portable C path. Chosen at build time (-march). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvprobe/tensor.h"

#if defined(__AVX2__) && defined(__FMA__) && !defined(KVP_PORTABLE)
#include <immintrin.h>
#define QD_AVX2 1
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define QD_VNNI 1
#define QD_DPBUSD _mm256_dpbusd_epi32
#if defined(__AVX512F__) && defined(__AVX512BW__)
#define QD_512 1 /* tiles take two blocks per 512-bit vector */
#endif
#elif defined(__AVXVNNI__)
#define QD_VNNI 1
#define QD_DPBUSD _mm256_dpbusd_avx_epi32
#endif
#endif

#if defined(__F16C__) && !defined(QD_AVX2)
#include <immintrin.h>
#endif



#define QB 32 /* activation block */
/* Single-activation products stream the weights from memory once: the hardware prefetcher
 * alone leaves the kernel at ~60% of the read bandwidth on big matrices, so each row is also
 * fetched this far ahead (measured: 6.3 -> 10.2 GB/s on a 178 MB Q8_0 LM head). */
#define PF_DIST 16384

static inline float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
#if defined(__F16C__)
    return _cvtsh_ss(h); /* inline: kernels read one scale per block */
#else
    return kvp_fp16_to_f32(h);
#endif
}

int kvp_qdot_supported(enum kvp_type t) {
    switch (t) {
    case KVP_TYPE_Q4_0: case KVP_TYPE_Q4_1: case KVP_TYPE_Q5_0: case KVP_TYPE_Q5_1: case KVP_TYPE_Q8_0:
    case KVP_TYPE_Q2_K: case KVP_TYPE_Q3_K: case KVP_TYPE_Q4_K: case KVP_TYPE_Q5_K: case KVP_TYPE_Q6_K:
        return 1;
    default:
        return 0;
    }
}

const char *kvp_qdot_isa(void) {
#if defined(QD_512)
    return "avx512-vnni";
#elif defined(QD_VNNI) && defined(__AVX512VNNI__)
    return "avx512-vnni-256";
#elif defined(QD_VNNI)
    return "avx-vnni";
#elif defined(QD_AVX2)
    return "avx2";
#else
    return "portable";
#endif
}

/* ---- activations ------------------------------------------------------------------------- */

void kvp_quantize_act_row(const float *x, int64_t n, int8_t *q, float *d) {
    for (int64_t b = 0; b < n / QB; b++, x += QB, q += QB) {
#ifdef QD_AVX2
        const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
        __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16),
               v3 = _mm256_loadu_ps(x + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v0, absmask), _mm256_and_ps(v1, absmask)),
                                 _mm256_max_ps(_mm256_and_ps(v2, absmask), _mm256_and_ps(v3, absmask)));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h);
        float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        __m256 vid = _mm256_set1_ps(id);
        /* cvtps rounds to nearest even, as lrintf below */
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v0, vid)), i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v1, vid)),
                i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v2, vid)), i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v3, vid));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)q, p);
#else
        float amax = 0.0f;
        for (int i = 0; i < QB; i++) amax = fmaxf(amax, fabsf(x[i]));
        float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        for (int i = 0; i < QB; i++) q[i] = (int8_t)lrintf(x[i] * id);
#endif
    }
}

/* q and d as kvp_quantize_act_row computes them (the same amax, the same x * (1 / d) rounded
 * to nearest even), so q8x2's first plane is q8's; the residual of that product is exact in f32. */
void kvp_quantize_act_row2(const float *x, int64_t n, int8_t *q, float *d, int8_t *lo) {
    for (int64_t b = 0; b < n / QB; b++, x += QB, q += QB, lo += QB) {
        float amax = 0.0f;
        for (int i = 0; i < QB; i++) amax = fmaxf(amax, fabsf(x[i]));
        float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        for (int i = 0; i < QB; i++) {
            float t = x[i] * id, r = rintf(t);
            long l = lrintf((t - r) * 256.0f);
            q[i] = (int8_t)r;
            lo[i] = (int8_t)(l > 127 ? 127 : l < -127 ? -127 : l); /* symmetric: AVX2 negates it */
        }
    }
}

/* ---- weights: one 32-element block as (u, sc, mn), portable ------------------------------- */

/* Offset subtracted from u, per type (0: the type has mins instead). */
static inline int type_off(int t) {
    switch (t) {
    case KVP_TYPE_Q4_0: return 8;
    case KVP_TYPE_Q5_0: return 16;
    case KVP_TYPE_Q8_0: return 128;
    case KVP_TYPE_Q3_K: return 4;
    case KVP_TYPE_Q6_K: return 32;
    default: return 0;
    }
}

#ifdef QD_AVX2 /* the portable kernel applies the (zero) mins of every type */
static inline int type_has_min(int t) {
    return t == KVP_TYPE_Q4_1 || t == KVP_TYPE_Q5_1 || t == KVP_TYPE_Q2_K || t == KVP_TYPE_Q4_K || t == KVP_TYPE_Q5_K;
}
#endif

/* Q4_K / Q5_K: 6-bit scale and min of sub-block j from the 12 packed bytes. */
static inline void k4_scale_min(int j, const uint8_t *s, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Q3_K: signed 6-bit scale k (0..15) from the 12 packed bytes. */
static inline int q3k_scale(int k, const uint8_t *s) {
    int lo = k < 8 ? (s[k] & 0x0f) : (s[k - 8] >> 4);
    int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* Block b (of 32 elements) of a row of type t. Layouts as in quant.c (ggml-common.h). */
static void unpack_block(int t, const uint8_t *row, int64_t b, uint8_t u[32], float sc[2], float mn[2]) {
    mn[0] = mn[1] = 0.0f;
    const uint8_t *p;
    switch (t) {
    case KVP_TYPE_Q4_0:
    case KVP_TYPE_Q4_1: {
        p = row + b * (t == KVP_TYPE_Q4_0 ? 18 : 20);
        sc[0] = sc[1] = f16_at(p);
        if (t == KVP_TYPE_Q4_1) mn[0] = mn[1] = f16_at(p + 2);
        const uint8_t *qs = p + (t == KVP_TYPE_Q4_0 ? 2 : 4);
        for (int j = 0; j < 16; j++) u[j] = qs[j] & 15, u[j + 16] = qs[j] >> 4;
        return;
    }
    case KVP_TYPE_Q5_0:
    case KVP_TYPE_Q5_1: {
        int m1 = t == KVP_TYPE_Q5_1;
        p = row + b * (m1 ? 24 : 22);
        sc[0] = sc[1] = f16_at(p);
        if (m1) mn[0] = mn[1] = f16_at(p + 2);
        uint32_t qh;
        memcpy(&qh, p + (m1 ? 4 : 2), 4);
        const uint8_t *qs = p + (m1 ? 8 : 6);
        for (int j = 0; j < 16; j++) {
            u[j] = (uint8_t)((qs[j] & 15) | (((qh >> j) & 1) << 4));
            u[j + 16] = (uint8_t)((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
        }
        return;
    }
    case KVP_TYPE_Q8_0:
        p = row + b * 34;
        sc[0] = sc[1] = f16_at(p);
        for (int j = 0; j < 32; j++) u[j] = (uint8_t)((int8_t)p[2 + j] + 128);
        return;
    }
    /* K-quants: super-blocks of 256 = 8 blocks of 32 */
    int bb = (int)(b % 8);
    switch (t) {
    case KVP_TYPE_Q2_K: { /* scales[16], qs[64], d, dmin */
        p = row + (b / 8) * 84;
        float d = f16_at(p + 80), dmin = f16_at(p + 82);
        const uint8_t *q = p + 16 + 32 * (bb / 4);
        int shift = 2 * (bb % 4);
        for (int l = 0; l < 32; l++) u[l] = (q[l] >> shift) & 3;
        for (int h = 0; h < 2; h++) {
            uint8_t s = p[2 * bb + h];
            sc[h] = d * (float)(s & 15);
            mn[h] = -(dmin * (float)(s >> 4));
        }
        return;
    }
    case KVP_TYPE_Q3_K: { /* hmask[32], qs[64], scales[12], d */
        p = row + (b / 8) * 110;
        float d = f16_at(p + 108);
        const uint8_t *q = p + 32 + 32 * (bb / 4);
        int shift = 2 * (bb % 4), m = 1 << bb;
        for (int l = 0; l < 32; l++) u[l] = (uint8_t)(((q[l] >> shift) & 3) + ((p[l] & m) ? 4 : 0));
        for (int h = 0; h < 2; h++) sc[h] = d * (float)q3k_scale(2 * bb + h, p + 96);
        return;
    }
    case KVP_TYPE_Q4_K: { /* d, dmin, scales[12], qs[128] */
        p = row + (b / 8) * 144;
        int s, mi;
        k4_scale_min(bb, p + 4, &s, &mi);
        sc[0] = sc[1] = f16_at(p) * (float)s;
        mn[0] = mn[1] = -(f16_at(p + 2) * (float)mi);
        const uint8_t *q = p + 16 + 32 * (bb / 2);
        for (int l = 0; l < 32; l++) u[l] = bb % 2 ? q[l] >> 4 : q[l] & 15;
        return;
    }
    case KVP_TYPE_Q5_K: { /* d, dmin, scales[12], qh[32], qs[128] */
        p = row + (b / 8) * 176;
        int s, mi;
        k4_scale_min(bb, p + 4, &s, &mi);
        sc[0] = sc[1] = f16_at(p) * (float)s;
        mn[0] = mn[1] = -(f16_at(p + 2) * (float)mi);
        const uint8_t *qh = p + 16, *ql = p + 48 + 32 * (bb / 2);
        int hb = 1 << bb;
        for (int l = 0; l < 32; l++)
            u[l] = (uint8_t)((bb % 2 ? ql[l] >> 4 : ql[l] & 15) + ((qh[l] & hb) ? 16 : 0));
        return;
    }
    case KVP_TYPE_Q6_K: { /* ql[128], qh[64], scales[16] (i8), d */
        p = row + (b / 8) * 210;
        float d = f16_at(p + 208);
        int half = bb / 4, quarter = bb % 4;
        const uint8_t *ql = p + 64 * half + 32 * (quarter & 1), *qh = p + 128 + 32 * half;
        int ns = 4 * (quarter >> 1), hs = 2 * quarter;
        for (int l = 0; l < 32; l++) u[l] = (uint8_t)(((ql[l] >> ns) & 15) | (((qh[l] >> hs) & 3) << 4));
        for (int h = 0; h < 2; h++) sc[h] = d * (float)(int8_t)p[192 + 2 * bb + h];
        return;
    }
    }
}

/* ---- portable kernel --------------------------------------------------------------------- */

#ifndef QD_AVX2
static void qdot_portable(int t, const uint8_t *w, size_t rb, int64_t n, int64_t r0, int64_t r1, const kvp_qact *a,
                          float *const *out) {
    int64_t nblk = n / QB;
    int off = type_off(t);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = w + r * rb;
        for (int j = 0; j < a->nb; j++) {
            const int8_t *xq = a->q + (size_t)j * a->n, *xl = a->lo ? a->lo + (size_t)j * a->n : NULL;
            const float *xd = a->d + (size_t)j * (a->n / QB);
            float acc = 0.0f;
            for (int64_t b = 0; b < nblk; b++) {
                uint8_t u[32];
                float sc[2], mn[2];
                unpack_block(t, row, b, u, sc, mn);
                float blk = 0.0f;
                for (int h = 0; h < 2; h++) {
                    int32_t dot = 0, s = 0;
                    for (int l = 16 * h; l < 16 * h + 16; l++) {
                        /* q8x2: the activation in units of d / 256 */
                        int32_t v = xl ? 256 * xq[b * QB + l] + xl[b * QB + l] : xq[b * QB + l];
                        dot += (int32_t)u[l] * v, s += v;
                    }
                    blk += sc[h] * (float)(dot - off * s) + mn[h] * (float)s;
                }
                acc += (xl ? xd[b] * (1.0f / 256.0f) : xd[b]) * blk;
            }
            out[j][r] = acc;
        }
    }
}
#endif

/* ---- SIMD kernel ------------------------------------------------------------------------- */

#ifdef QD_AVX2
#define INLINE static inline __attribute__((always_inline))

/* log2 of the offset folded into the integer dot, or -1. Without VNNI, Q8_0 keeps signed
 * weights (maddubs would saturate on u up to 255) and needs no offset. */
INLINE int off_shift(int t) {
    switch (type_off(t)) {
    case 4: return 2;
    case 8: return 3;
    case 16: return 4;
    case 32: return 5;
#ifdef QD_VNNI
    case 128: return 7;
#endif
    default: return -1;
    }
}

INLINE __m256 scale2(float s0, float s1) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(s0)), _mm_set1_ps(s1), 1);
}

/* 32 bits -> 32 bytes: byte k = 0xff if bit k is set. */
INLINE __m256i bits_to_bytes(uint32_t bits) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                          3, 3, 3, 3, 3, 3, 3);
    const __m256i bm = _mm256_set1_epi64x(0x8040201008040201LL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bm), bm);
}

/* 16 packed bytes -> low nibbles in bytes 0..15, high nibbles in bytes 16..31. */
INLINE __m256i nibbles(const uint8_t *qs) {
    __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(15));
}

/* Block b of a row as u (32 bytes), scale vector sv (lanes 0-3: half 0, 4-7: half 1) and, for
 * types with mins, mv. Hot types in registers; the rest through the portable unpacker. */
INLINE void load_block(int t, const uint8_t *row, int64_t b, __m256i *u, __m256 *sv, __m256 *mv) {
    const uint8_t *p;
    switch (t) {
    case KVP_TYPE_Q4_0:
        p = row + b * 18;
        *sv = _mm256_set1_ps(f16_at(p));
        *u = nibbles(p + 2);
        return;
    case KVP_TYPE_Q4_1:
        p = row + b * 20;
        *sv = _mm256_set1_ps(f16_at(p));
        *mv = _mm256_set1_ps(f16_at(p + 2));
        *u = nibbles(p + 4);
        return;
    case KVP_TYPE_Q5_0:
    case KVP_TYPE_Q5_1: {
        int m1 = t == KVP_TYPE_Q5_1;
        p = row + b * (m1 ? 24 : 22);
        *sv = _mm256_set1_ps(f16_at(p));
        if (m1) *mv = _mm256_set1_ps(f16_at(p + 2));
        uint32_t qh;
        memcpy(&qh, p + (m1 ? 4 : 2), 4);
        *u = _mm256_or_si256(nibbles(p + (m1 ? 8 : 6)), _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(16)));
        return;
    }
    case KVP_TYPE_Q8_0:
        p = row + b * 34;
        *sv = _mm256_set1_ps(f16_at(p));
        *u = _mm256_loadu_si256((const __m256i *)(p + 2));
#ifdef QD_VNNI
        *u = _mm256_xor_si256(*u, _mm256_set1_epi8((char)0x80)); /* q + 128 */
#endif
        return;
    case KVP_TYPE_Q4_K: {
        p = row + (b / 8) * 144;
        int bb = (int)(b % 8), s, mi;
        k4_scale_min(bb, p + 4, &s, &mi);
        *sv = _mm256_set1_ps(f16_at(p) * (float)s);
        *mv = _mm256_set1_ps(-(f16_at(p + 2) * (float)mi));
        __m256i q = _mm256_loadu_si256((const __m256i *)(p + 16 + 32 * (bb / 2)));
        if (bb % 2) q = _mm256_srli_epi16(q, 4);
        *u = _mm256_and_si256(q, _mm256_set1_epi8(15));
        return;
    }
    case KVP_TYPE_Q6_K: {
        p = row + (b / 8) * 210;
        int bb = (int)(b % 8), half = bb / 4, quarter = bb % 4;
        float d = f16_at(p + 208);
        *sv = scale2(d * (float)(int8_t)p[192 + 2 * bb], d * (float)(int8_t)p[193 + 2 * bb]);
        __m256i ql = _mm256_loadu_si256((const __m256i *)(p + 64 * half + 32 * (quarter & 1)));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * half));
        ql = _mm256_and_si256(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (quarter >> 1))), _mm256_set1_epi8(15));
        qh = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * quarter)), _mm256_set1_epi8(3));
        *u = _mm256_or_si256(ql, _mm256_slli_epi16(qh, 4));
        return;
    }
    default: {
        uint8_t ub[32];
        float sc[2], mn[2];
        unpack_block(t, row, b, ub, sc, mn);
        *u = _mm256_loadu_si256((const __m256i *)ub);
        *sv = scale2(sc[0], sc[1]);
        *mv = scale2(mn[0], mn[1]);
        return;
    }
    }
}

/* Sums of each group of 4 activation bytes, as 8 int32 lanes. */
INLINE __m256i lane_sums(__m256i x) {
#ifdef QD_VNNI
    return QD_DPBUSD(_mm256_setzero_si256(), _mm256_set1_epi8(1), x);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), x), _mm256_set1_epi16(1));
#endif
}

/* src + sum(u * x) per lane of 4 bytes (u unsigned, x signed). */
INLINE __m256i dot_lanes(int t, __m256i src, __m256i u, __m256i x) {
#ifdef QD_VNNI
    (void)t;
    return QD_DPBUSD(src, u, x);
#else
    const __m256i ones = _mm256_set1_epi16(1);
    if (t == KVP_TYPE_Q8_0) /* u is signed here: |u| * sign(x, u) */
        return _mm256_add_epi32(src, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(u, u), _mm256_sign_epi8(x, u)), ones));
    return _mm256_add_epi32(src, _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), ones));
#endif
}

INLINE float hsum(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

#ifdef QD_VNNI
#define RM 4
#define RN 3
#else
#define RM 2
#define RN 2
#endif

/* Weight rows unpacked once for all activation tiles (batches wider than one tile): per row
 * and block, u (32 bytes), sv and mv (8 floats each). */
typedef struct wbuf {
    __m256i *u;
    __m256 *sv, *mv;
    int64_t nblk;
} wbuf;

INLINE void unpack_rows(int t, const uint8_t *w, size_t rb, int64_t nblk, int64_t r0, int rm, const wbuf *wb) {
    for (int i = 0; i < rm; i++)
        for (int64_t b = 0; b < nblk; b++) {
            size_t k = (size_t)i * nblk + b;
            wb->mv[k] = _mm256_setzero_ps();
            load_block(t, w + (size_t)(r0 + i) * rb, b, &wb->u[k], &wb->sv[k], &wb->mv[k]);
        }
}

/* One block of a tile: acc[i][j] += dx_j * (sv_i * dot(u_i, x_j) (+ mv_i * sum(x_j))). With
 * lo (q8x2) the activation is X = 256 x + x_lo in units of dx / 256, and both integer terms
 * are combined before the conversion: dot(u, X) = 256 dot(u, x) + dot(u, x_lo). */
INLINE void tile_block(int t, int rm, int rn, int lo, const uint8_t *const *wr, int64_t nblk, int64_t b,
                       const int8_t *const *xq, const int8_t *const *xl, const float *const *xd, const wbuf *wb,
                       __m256 acc[RM][RN]) {
    const int os = off_shift(t), has_min = type_has_min(t);
    __m256i x[RN], src[RN], xlo[RN], srclo[RN];
    __m256 dx[RN], xs[RN];
    for (int j = 0; j < rn; j++) {
        x[j] = _mm256_loadu_si256((const __m256i *)(xq[j] + b * QB));
        dx[j] = _mm256_broadcast_ss(xd[j] + b);
        src[j] = _mm256_setzero_si256();
        __m256i ls = lane_sums(x[j]);
        if (os >= 0) src[j] = _mm256_sub_epi32(src[j], _mm256_slli_epi32(ls, os));
        if (lo) {
            xlo[j] = _mm256_loadu_si256((const __m256i *)(xl[j] + b * QB));
            dx[j] = _mm256_mul_ps(dx[j], _mm256_set1_ps(1.0f / 256.0f));
            __m256i ll = lane_sums(xlo[j]);
            srclo[j] = os >= 0 ? _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(ll, os)) : _mm256_setzero_si256();
            ls = _mm256_add_epi32(_mm256_slli_epi32(ls, 8), ll); /* sums of X, for the mins */
        }
        if (has_min) xs[j] = _mm256_cvtepi32_ps(ls);
    }
    for (int i = 0; i < rm; i++) {
        __m256i u;
        __m256 sv, mv = _mm256_setzero_ps();
        if (wb) {
            size_t k = (size_t)i * nblk + b;
            u = wb->u[k];
            sv = wb->sv[k];
            if (has_min) mv = wb->mv[k];
        } else {
            load_block(t, wr[i], b, &u, &sv, &mv);
        }
        for (int j = 0; j < rn; j++) {
            __m256i di = dot_lanes(t, src[j], u, x[j]);
            if (lo) di = _mm256_add_epi32(_mm256_slli_epi32(di, 8), dot_lanes(t, srclo[j], u, xlo[j]));
            __m256 f = _mm256_cvtepi32_ps(di);
            __m256 s = has_min ? _mm256_fmadd_ps(sv, f, _mm256_mul_ps(mv, xs[j])) : _mm256_mul_ps(sv, f);
            acc[i][j] = _mm256_fmadd_ps(dx[j], s, acc[i][j]);
        }
    }
}

/* Quants, residual planes (q8x2) and scales of activation rows j0 .. j0 + rn - 1. */
INLINE void act_rows(const kvp_qact *a, int j0, int rn, const int8_t **xq, const int8_t **xl, const float **xd) {
    for (int j = 0; j < rn; j++) {
        xq[j] = a->q + (size_t)(j0 + j) * a->n;
        xl[j] = a->lo ? a->lo + (size_t)(j0 + j) * a->n : NULL;
        xd[j] = a->d + (size_t)(j0 + j) * (a->n / QB);
    }
}

/* out[j0 + j][r0 + i] for i < rm, j < rn; rm, rn, t are compile-time constants at each call.
 * Weight blocks come from the rows themselves (wb NULL) or from wb: the same values either
 * way, so the same bits. Even and odd blocks accumulate apart and meet at the end, which is
 * exactly what the 512-bit tile computes (two blocks per vector): all paths agree bit for bit. */
INLINE void tile(int t, int rm, int rn, int lo, const uint8_t *w, size_t rb, int64_t nblk, int64_t r0, const kvp_qact *a,
                 int j0, const wbuf *wb, float *const *out) {
    const int8_t *xq[RN], *xl[RN];
    const float *xd[RN];
    act_rows(a, j0, rn, xq, xl, xd);
    const uint8_t *wr[RM];
    for (int i = 0; i < rm; i++) wr[i] = w + (size_t)(r0 + i) * rb;
    __m256 even[RM][RN], odd[RM][RN];
    for (int i = 0; i < rm; i++)
        for (int j = 0; j < rn; j++) even[i][j] = odd[i][j] = _mm256_setzero_ps();
    size_t bpb = rb / (size_t)nblk; /* weight bytes per 32 elements */
    for (int64_t b = 0; b < nblk; b += 2) {
        if (!wb)
            for (int i = 0; i < rm; i++) _mm_prefetch((const char *)wr[i] + (size_t)b * bpb + PF_DIST, _MM_HINT_T0);
        tile_block(t, rm, rn, lo, wr, nblk, b, xq, xl, xd, wb, even);
        if (b + 1 < nblk) tile_block(t, rm, rn, lo, wr, nblk, b + 1, xq, xl, xd, wb, odd);
    }
    for (int i = 0; i < rm; i++)
        for (int j = 0; j < rn; j++) out[j0 + j][r0 + i] = hsum(_mm256_add_ps(even[i][j], odd[i][j]));
}

#ifdef QD_512
/* The same tile on 512-bit vectors, for unpacked row tiles (batches): blocks b and b + 1 side
 * by side (b + 1 zero past the end), folded to 256 bits at the end. Every (row, activation) pair still goes through one fixed
 * sequence of operations, whatever the tile or batch. */
INLINE __m512 pair_ps(__m256 lo, __m256 hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1); }

INLINE void tile512(int t, int rm, int rn, int lo, int64_t nblk, int64_t r0, const kvp_qact *a, int j0, const wbuf *wb,
                    float *const *out) {
    const int os = off_shift(t), has_min = type_has_min(t);
    const int8_t *xq[RN], *xl[RN];
    const float *xd[RN];
    act_rows(a, j0, rn, xq, xl, xd);
    const __m512i pair_idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m512 acc[RM][RN];
    for (int i = 0; i < rm; i++)
        for (int j = 0; j < rn; j++) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nblk; b += 2) {
        int two = b + 1 < nblk;
        __m512i x[RN], src[RN], xlo[RN], srclo[RN];
        __m512 dx[RN], xs[RN];
        const __m512i ones = _mm512_set1_epi8(1);
        for (int j = 0; j < rn; j++) {
            x[j] = two ? _mm512_loadu_si512(xq[j] + b * QB) : _mm512_maskz_loadu_epi8(0xffffffffULL, xq[j] + b * QB);
            __m128 d2 = two ? _mm_castpd_ps(_mm_load_sd((const double *)(xd[j] + b))) : _mm_load_ss(xd[j] + b);
            dx[j] = _mm512_permutexvar_ps(pair_idx, _mm512_castps128_ps512(d2));
            src[j] = _mm512_setzero_si512();
            __m512i ls = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, x[j]);
            if (os >= 0) src[j] = _mm512_sub_epi32(src[j], _mm512_slli_epi32(ls, (unsigned)os));
            if (lo) { /* as tile_block */
                xlo[j] = two ? _mm512_loadu_si512(xl[j] + b * QB) : _mm512_maskz_loadu_epi8(0xffffffffULL, xl[j] + b * QB);
                dx[j] = _mm512_mul_ps(dx[j], _mm512_set1_ps(1.0f / 256.0f));
                __m512i ll = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xlo[j]);
                srclo[j] = os >= 0 ? _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(ll, (unsigned)os))
                                   : _mm512_setzero_si512();
                ls = _mm512_add_epi32(_mm512_slli_epi32(ls, 8), ll);
            }
            if (has_min) xs[j] = _mm512_cvtepi32_ps(ls);
        }
        for (int i = 0; i < rm; i++) {
            __m512i u;
            __m512 sv, mv = _mm512_setzero_ps();
            size_t k = (size_t)i * nblk + b;
            if (two) {
                u = _mm512_loadu_si512(&wb->u[k]);
                sv = _mm512_loadu_ps(&wb->sv[k]);
                if (has_min) mv = _mm512_loadu_ps(&wb->mv[k]);
            } else {
                u = _mm512_inserti64x4(_mm512_castsi256_si512(wb->u[k]), _mm256_setzero_si256(), 1);
                sv = pair_ps(wb->sv[k], _mm256_setzero_ps());
                if (has_min) mv = pair_ps(wb->mv[k], _mm256_setzero_ps());
            }
            for (int j = 0; j < rn; j++) {
                __m512i di = _mm512_dpbusd_epi32(src[j], u, x[j]);
                if (lo) di = _mm512_add_epi32(_mm512_slli_epi32(di, 8), _mm512_dpbusd_epi32(srclo[j], u, xlo[j]));
                __m512 f = _mm512_cvtepi32_ps(di);
                __m512 s = has_min ? _mm512_fmadd_ps(sv, f, _mm512_mul_ps(mv, xs[j])) : _mm512_mul_ps(sv, f);
                acc[i][j] = _mm512_fmadd_ps(dx[j], s, acc[i][j]);
            }
        }
    }
    for (int i = 0; i < rm; i++)
        for (int j = 0; j < rn; j++)
            out[j0 + j][r0 + i] = hsum(_mm256_add_ps(_mm512_castps512_ps256(acc[i][j]), _mm512_extractf32x8_ps(acc[i][j], 1)));
}
#endif

/* All activation tiles for rows [r, r + rm): full tiles of RN, then one tile of the rest
 * (so two activations, q8x2's planes of one row, read each weight block once). */
INLINE void row_tile(int t, int rm, int lo, const uint8_t *w, size_t rb, int64_t nblk, int64_t r, const kvp_qact *a,
                     const wbuf *wb, float *const *out) {
    if (wb) unpack_rows(t, w, rb, nblk, r, rm, wb);
    /* q8x2 holds twice the activation registers: narrower tiles keep them all in registers */
    const int rn = lo && RN > 2 ? 2 : RN;
    int j = 0;
#ifdef QD_512
    if (wb) { /* batched: two blocks per vector */
        for (; j + rn <= a->nb; j += rn) tile512(t, rm, rn, lo, nblk, r, a, j, wb, out);
#if RN > 2
        if (a->nb - j == 2) tile512(t, rm, 2, lo, nblk, r, a, j, wb, out);
#endif
        if (a->nb - j == 1) tile512(t, rm, 1, lo, nblk, r, a, j, wb, out);
        return;
    }
#endif
    for (; j + rn <= a->nb; j += rn) tile(t, rm, rn, lo, w, rb, nblk, r, a, j, wb, out);
#if RN > 2
    if (a->nb - j == 2) tile(t, rm, 2, lo, w, rb, nblk, r, a, j, wb, out);
#endif
    if (a->nb - j == 1) tile(t, rm, 1, lo, w, rb, nblk, r, a, j, wb, out);
}

/* Full row tiles, then single rows at the edge (the same per-element arithmetic, so the edges
 * give the bits a full tile would). */
INLINE void qdot_type(int t, int lo, const uint8_t *w, size_t rb, int64_t n, int64_t r0, int64_t r1, const kvp_qact *a,
                      const wbuf *wb, float *const *out) {
    int64_t nblk = n / QB, r = r0;
    for (; r + RM <= r1; r += RM) row_tile(t, RM, lo, w, rb, nblk, r, a, wb, out);
    for (; r < r1; r++) row_tile(t, 1, lo, w, rb, nblk, r, a, wb, out);
}

/* One instance per (type, unpacked or fused, q8 or q8x2): all compile-time constants. */
#define QDOT_CASE(T)                                                                                                   \
    case T:                                                                                                            \
        if (a->lo) {                                                                                                   \
            if (wb) qdot_type(T, 1, w, row_bytes, n, r0, r1, a, wb, out);                                              \
            else qdot_type(T, 1, w, row_bytes, n, r0, r1, a, NULL, out);                                               \
        } else {                                                                                                       \
            if (wb) qdot_type(T, 0, w, row_bytes, n, r0, r1, a, wb, out);                                              \
            else qdot_type(T, 0, w, row_bytes, n, r0, r1, a, NULL, out);                                               \
        }                                                                                                              \
        break;
#endif /* QD_AVX2 */

int kvp_qdot_row_multiple(void) {
#ifdef QD_AVX2
    return RM;
#else
    return 1;
#endif
}

void kvp_qdot_rows(enum kvp_type type, const void *weights, size_t row_bytes, int64_t r0, int64_t r1,
                   const kvp_qact *a, float *const *out) {
    const uint8_t *w = weights;
    int64_t n = a->n;
#ifdef QD_AVX2
    /* Batches wider than one tile unpack each row tile once (for all of them) instead of once
     * per activation tile. Without memory for that, the fused path gives the same bits. */
    wbuf buf = {0}, *wb = NULL;
    void *mem = NULL;
    int64_t nblk = n / QB;
    if (a->nb > RN && (mem = aligned_alloc(32, (size_t)RM * nblk * 3 * 32))) {
        buf = (wbuf){(__m256i *)mem, (__m256 *)mem + RM * nblk, (__m256 *)mem + 2 * RM * nblk, nblk};
        wb = &buf;
    }
    switch (type) {
        QDOT_CASE(KVP_TYPE_Q4_0)
        QDOT_CASE(KVP_TYPE_Q4_1)
        QDOT_CASE(KVP_TYPE_Q5_0)
        QDOT_CASE(KVP_TYPE_Q5_1)
        QDOT_CASE(KVP_TYPE_Q8_0)
        QDOT_CASE(KVP_TYPE_Q2_K)
        QDOT_CASE(KVP_TYPE_Q3_K)
        QDOT_CASE(KVP_TYPE_Q4_K)
        QDOT_CASE(KVP_TYPE_Q5_K)
        QDOT_CASE(KVP_TYPE_Q6_K)
    default:
        break;
    }
    free(mem);
#else
    qdot_portable(type, w, row_bytes, n, r0, r1, a, out);
#endif
}
