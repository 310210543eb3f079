/* The fast matmul path: quantized activations, integer block dot products.
 *
 * Activation rows are cut into blocks of 32 and stored as int8 q with one f32 scale d per
 * block (ggml's Q8_0 idea: d = max|x| / 127, q = round-to-nearest-even(x / d)); q8x2 adds the
 * rounded residual as a second int8 plane lo, so x ~ d * (q + lo / 256).
 *
 * Every weight type is read as blocks of 32 unsigned 8-bit values u, with a scale and a min
 * per 16-element half h and a per-type integer offset:
 *       w = sc[h] * (u - off) + mn[h]
 * (Q4_0: u = nibble, off 8; Q4_1: u = nibble, mn = m; Q6_K: 6 bits, off 32, sc = d * scale;
 * Q4_K: sc = d * scale, mn = -dmin * min; ...). A block's dot is then exact in integers and
 * scaled once per half or block (the exact recipe: "the arithmetic every path follows" below).
 *
 * Kernels: a few activations (decode) read each weight row in order, 8 blocks per vector
 * (lane = block: the block dots reduced together, the scales decoded as vectors), 8 rows at a
 * time transposed for the per-pair accumulation; batches of 4 or more on AVX-512 VNNI take
 * packed tiles of 16 (row, activation) pairs per vector; other batches (AVX2) take tiles of 4
 * rows unpacked once for all their activations. Every pair goes through the same operations
 * in the same order whatever the kernel, the tile, the thread count or the batch size, so
 * batching never changes a bit.
 *
 * ISA: AVX-512 VNNI or AVX-VNNI; AVX2 + FMA (maddubs); a portable C path. This file is the
 * kernels' body: each src/tensor/qdot_<isa>.c compiles it once for its instruction set (a GCC
 * target pragma) into a table of kernels named QD_TABLE, and qdot.c chooses among the tables at
 * run time (cpuid). QD_NO_512 keeps an AVX-512 build to 256-bit vectors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvprobe/tensor.h"
#include "kquant_layout.h"
#include "qdot_types.h"

#ifndef QD_TABLE
#error "qdot_kernels.h is compiled through src/tensor/qdot_<isa>.c, which name its kernel table"
#endif

#if defined(__AVX2__) && defined(__FMA__) && !defined(KVP_PORTABLE)
#include <immintrin.h>
#define QD_AVX2 1
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define QD_VNNI 1
#define QD_DPBUSD _mm256_dpbusd_epi32
#if defined(__AVX512F__) && defined(__AVX512BW__) && !defined(QD_NO_512)
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
 * fetched this far ahead (measured: 6.3 -> 10.2 GB/s on a 178 MB Q8_0 LM head, Intel, at 16 KB
 * into L1). Decode (qdot_decode) fetches into L2, 32 KB ahead: an L1 fetch holds one of the
 * core's few L1 miss buffers for the whole trip from memory, so only a few KB can be in flight;
 * into L2 the distance can cover the latency. AMD Zen 4, qdot-bench -b 1 on the 1.5B model,
 * medians of 5: 25.4 GMAC/s (L1, 4 KB) -> 33.6 (L2, 16 KB), 34.3 (L2, 32 KB); L1 at 1-8 KB
 * all read 24-25 (performance.md). The batch tiles (compute-bound) keep PF_DIST into L1. */
#ifndef PF_DIST /* -DPF_DIST=N to measure another */
#define PF_DIST 4096
#endif
#ifndef PF_DECODE_DIST
#define PF_DECODE_DIST 32768
#endif

static inline float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
#if defined(__F16C__)
    return _cvtsh_ss(h); /* inline: kernels read one scale per block */
#else
    return kvp_fp16_to_f32(h);
#endif
}

/* What this instance was compiled as: the variant's name in the kernel table. */
#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(QD_512)
#define QD_AMX 1 /* batches of AMX_MIN_ROWS+ on AMX tiles (the rest as avx512-vnni) */
#endif

#if defined(QD_AMX)
#define QD_ISA "amx-int8"
#elif defined(QD_512)
#define QD_ISA "avx512-vnni"
#elif defined(QD_VNNI) && defined(__AVX512VNNI__)
#define QD_ISA "avx512-vnni-256"
#elif defined(QD_VNNI)
#define QD_ISA "avx-vnni"
#elif defined(QD_AVX2)
#define QD_ISA "avx2"
#else
#define QD_ISA "portable"
#endif

/* ---- activations ------------------------------------------------------------------------- */

static void qd_quantize_row(const float *x, int64_t n, int8_t *q, float *d) {
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

/* q and d as qd_quantize_row computes them (the same amax, the same x * (1 / d) rounded
 * to nearest even), so q8x2's first plane is q8's; the residual of that product is exact in f32. */
static void qd_quantize_row2(const float *x, int64_t n, int8_t *q, float *d, int8_t *lo) {
    for (int64_t b = 0; b < n / QB; b++, x += QB, q += QB, lo += QB) {
#ifdef QD_AVX2
        /* the scalar steps below, 8 lanes at a time: rint = round to nearest even, the
         * residual (t - r) * 256 exact, cvtps rounding as lrintf, the clamp before the packs */
        const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
        __m256 v[4];
        for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 8 * k);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(v[0], absmask), _mm256_and_ps(v[1], absmask)),
                                 _mm256_max_ps(_mm256_and_ps(v[2], absmask), _mm256_and_ps(v[3], absmask)));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h);
        float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        const __m256 vid = _mm256_set1_ps(id), k256 = _mm256_set1_ps(256.0f);
        const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);
        __m256i iq[4], il[4];
        for (int k = 0; k < 4; k++) {
            __m256 t = _mm256_mul_ps(v[k], vid), r = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            iq[k] = _mm256_cvtps_epi32(r);
            il[k] = _mm256_max_epi32(nlim, _mm256_min_epi32(lim, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_sub_ps(t, r), k256))));
        }
        const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        __m256i pq = _mm256_packs_epi16(_mm256_packs_epi32(iq[0], iq[1]), _mm256_packs_epi32(iq[2], iq[3]));
        __m256i pl = _mm256_packs_epi16(_mm256_packs_epi32(il[0], il[1]), _mm256_packs_epi32(il[2], il[3]));
        _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(pq, perm));
        _mm256_storeu_si256((__m256i *)lo, _mm256_permutevar8x32_epi32(pl, perm));
#else
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
#endif
    }
}

/* ---- weights: one 32-element block as (u, sc, mn), portable ------------------------------- */

/* The file type whose values a type holds (a lane = block layout's, or the type itself): the
 * recipe below depends only on it. */
static inline int base_type(int t) {
    return t == KVP_TYPE_Q4_K_LB ? KVP_TYPE_Q4_K : t == KVP_TYPE_Q6_K_LB ? KVP_TYPE_Q6_K : t;
}
static inline int is_lb(int t) { return t >= KVP_TYPE_INTERNAL; }
/* Bytes of one super-block of a lane = block type (Q6_K_LB keeps Q6_K's 210). */
static inline size_t lb_sb_bytes(int t) { return t == KVP_TYPE_Q4_K_LB ? KQ4_LB_BYTES : 210; }

/* Offset subtracted from u, per type (0: the type has mins instead). */
static inline int type_off(int t) {
    switch (base_type(t)) {
    case KVP_TYPE_Q4_0: return 8;
    case KVP_TYPE_Q5_0: return 16;
    case KVP_TYPE_Q8_0: return 128;
    case KVP_TYPE_Q3_K: return 4;
    case KVP_TYPE_Q6_K: return 32;
    default: return 0;
    }
}

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

/* Q4_K or Q4_K_LB: the super-block holding block b of a row, and block b's scale and min
 * (6-bit codes, unpacked from the file's 12 bytes or read as the lane = block layout's bytes). */
static inline const uint8_t *q4k_block_scale_min(int t, const uint8_t *row, int64_t b, int *sc, int *mn) {
    int bb = (int)(b % 8);
    if (is_lb(t)) {
        const uint8_t *p = row + (b / 8) * KQ4_LB_BYTES;
        *sc = p[q4k_lb_scale(bb)], *mn = p[q4k_lb_min(bb)];
        return p;
    }
    const uint8_t *p = row + (b / 8) * 144;
    k4_scale_min(bb, p + 4, sc, mn);
    return p;
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
    case KVP_TYPE_Q4_K:
    case KVP_TYPE_Q4_K_LB: { /* d, dmin, scales[12], qs[128] (lane = block: d, dmin, sc[8], mn[8], qs) */
        int s, mi;
        p = q4k_block_scale_min(t, row, b, &s, &mi);
        sc[0] = sc[1] = f16_at(p) * (float)s;
        mn[0] = mn[1] = -(f16_at(p + 2) * (float)mi);
        for (int l = 0; l < 32; l++) {
            kq_pos q = q4k_quant(32 * bb + l, is_lb(t));
            u[l] = (p[q.byte] >> q.shift) & 15;
        }
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
    case KVP_TYPE_Q6_K:
    case KVP_TYPE_Q6_K_LB: { /* ql[128], qh[64], scales[16] (i8), d */
        p = row + (b / 8) * 210;
        float d = f16_at(p + 208);
        for (int l = 0; l < 32; l++) {
            kq_pos lq = q6k_low(32 * bb + l, is_lb(t)), hq = q6k_high(32 * bb + l, is_lb(t));
            u[l] = (uint8_t)(((p[lq.byte] >> lq.shift) & 15) | (((p[hq.byte] >> hq.shift) & 3) << 4));
        }
        for (int h = 0; h < 2; h++) sc[h] = d * (float)(int8_t)p[q6k_scale(bb, h, is_lb(t))];
        return;
    }
    }
}

/* ---- the arithmetic every path follows ------------------------------------------------------
 * For one weight row and one activation row, block by block in order (b = 0, 1, ...):
 *     X     = q, or 256 q + lo with q8x2;   dx = d, or d / 256 with q8x2
 *     I_h   = sum over half h of the block of (u - off) * X   (exact int32; H = 2 halves of 16
 *             for the types with a scale per 16 elements, else H = 1 covering all 32)
 *     S_h   = sum of X over half h                             (exact; types with mins)
 *     t     = sc_0 * I_0;  t = fma(sc_1, I_1, t) if H = 2;  t = fma(mn_h, S_h, t) per half
 *     acc   = fma(dx, t, acc)
 * Every kernel evaluates exactly this for each (row, activation) pair, in whichever vector lane
 * holds the pair, so the bits never depend on the tile, the batch, the thread count or the
 * instruction set. */

static inline int type_halves(int t) {
    t = base_type(t);
    return t == KVP_TYPE_Q6_K || t == KVP_TYPE_Q3_K || t == KVP_TYPE_Q2_K ? 2 : 1;
}
static inline int type_has_min(int t) {
    t = base_type(t);
    return t == KVP_TYPE_Q4_1 || t == KVP_TYPE_Q5_1 || t == KVP_TYPE_Q2_K || t == KVP_TYPE_Q4_K || t == KVP_TYPE_Q5_K;
}

/* ---- portable kernel --------------------------------------------------------------------- */

#ifndef QD_AVX2
static void qdot_portable(int t, const uint8_t *w, size_t rb, int64_t n, int64_t r0, int64_t r1, const kvp_qact *a,
                          float *const *out) {
    enum { GROUP = 64 }; /* activations per pass over a row: each block unpacked once for them */
    int64_t nblk = n / QB;
    int off = type_off(t), H = type_halves(t), mins = type_has_min(t);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = w + r * rb;
        for (int j0 = 0; j0 < a->nb; j0 += GROUP) {
            int jn = a->nb - j0 < GROUP ? a->nb - j0 : GROUP;
            float acc[GROUP] = {0};
            for (int64_t b = 0; b < nblk; b++) {
                uint8_t u[32];
                float sc[2] = {0, 0}, mn[2] = {0, 0};
                unpack_block(t, row, b, u, sc, mn);
                for (int j = j0; j < j0 + jn; j++) {
                    const int8_t *xq = a->q + (size_t)j * a->n + b * QB;
                    const int8_t *xl = a->lo ? a->lo + (size_t)j * a->n + b * QB : NULL;
                    float xd = a->d[(size_t)j * (a->n / QB) + b];
                    int32_t I[2] = {0, 0}, S[2] = {0, 0};
                    for (int l = 0; l < 32; l++) {
                        int32_t X = xl ? 256 * xq[l] + xl[l] : xq[l];
                        int h = H == 2 ? l / 16 : 0;
                        I[h] += ((int32_t)u[l] - off) * X;
                        S[h] += X;
                    }
                    float tt = sc[0] * (float)I[0];
                    if (H == 2) tt = fmaf(sc[1], (float)I[1], tt);
                    if (mins) {
                        tt = fmaf(mn[0], (float)S[0], tt);
                        if (H == 2) tt = fmaf(mn[1], (float)S[1], tt);
                    }
                    acc[j - j0] = fmaf(xl ? xd * (1.0f / 256.0f) : xd, tt, acc[j - j0]);
                }
            }
            for (int j = j0; j < j0 + jn; j++) out[j][r] = acc[j - j0];
        }
    }
}
#endif

/* ---- SIMD kernels ------------------------------------------------------------------------ */

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

/* u of block b of a row (32 bytes): hot types in registers, the rest through unpack_block. */
INLINE __m256i load_u(int t, const uint8_t *row, int64_t b) {
    switch (t) {
    case KVP_TYPE_Q4_0: return nibbles(row + b * 18 + 2);
    case KVP_TYPE_Q4_1: return nibbles(row + b * 20 + 4);
    case KVP_TYPE_Q5_0:
    case KVP_TYPE_Q5_1: {
        int m1 = t == KVP_TYPE_Q5_1;
        const uint8_t *p = row + b * (m1 ? 24 : 22);
        uint32_t qh;
        memcpy(&qh, p + (m1 ? 4 : 2), 4);
        return _mm256_or_si256(nibbles(p + (m1 ? 8 : 6)), _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(16)));
    }
    case KVP_TYPE_Q8_0: {
        __m256i u = _mm256_loadu_si256((const __m256i *)(row + b * 34 + 2));
#ifdef QD_VNNI
        u = _mm256_xor_si256(u, _mm256_set1_epi8((char)0x80)); /* q + 128 */
#endif
        return u;
    }
    case KVP_TYPE_Q4_K: {
        int bb = (int)(b % 8);
        __m256i q = _mm256_loadu_si256((const __m256i *)(row + (b / 8) * 144 + 16 + 32 * (bb / 2)));
        if (bb % 2) q = _mm256_srli_epi16(q, 4);
        return _mm256_and_si256(q, _mm256_set1_epi8(15));
    }
    case KVP_TYPE_Q6_K: {
        const uint8_t *p = row + (b / 8) * 210;
        int bb = (int)(b % 8), half = bb / 4, quarter = bb % 4;
        __m256i ql = _mm256_loadu_si256((const __m256i *)(p + 64 * half + 32 * (quarter & 1)));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * half));
        ql = _mm256_and_si256(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (quarter >> 1))), _mm256_set1_epi8(15));
        qh = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * quarter)), _mm256_set1_epi8(3));
        return _mm256_or_si256(ql, _mm256_slli_epi16(qh, 4));
    }
    /* Lane = block: the block's 4-byte groups are a row of 4-byte lanes apart (kquant_layout.h);
     * one gather fetches them, a shift per lane picks each one's field. Only the batch kernels
     * take blocks one at a time; the decode kernel reads whole super-blocks (row_chunk_lb). */
    case KVP_TYPE_Q4_K_LB: {
        const uint8_t *q = row + (b / 8) * KQ4_LB_BYTES + q4k_quant(0, 1).byte + 4 * (b % 8);
        __m256i v = _mm256_i32gather_epi32((const int *)q, _mm256_setr_epi32(0, 0, 32, 32, 64, 64, 96, 96), 1);
        return _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)), _mm256_set1_epi8(15));
    }
    case KVP_TYPE_Q6_K_LB: {
        const uint8_t *p = row + (b / 8) * 210 + 4 * (b % 8);
        __m256i ql = _mm256_i32gather_epi32((const int *)p, _mm256_setr_epi32(0, 0, 32, 32, 64, 64, 96, 96), 1);
        __m256i qh = _mm256_i32gather_epi32((const int *)(p + 128), _mm256_setr_epi32(0, 0, 0, 0, 32, 32, 32, 32), 1);
        ql = _mm256_and_si256(_mm256_srlv_epi32(ql, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)), _mm256_set1_epi8(15));
        qh = _mm256_and_si256(_mm256_srlv_epi32(qh, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)), _mm256_set1_epi8(3));
        return _mm256_or_si256(ql, _mm256_slli_epi16(qh, 4));
    }
    default: {
        uint8_t ub[32];
        float sc[2], mn[2];
        unpack_block(t, row, b, ub, sc, mn);
        return _mm256_loadu_si256((const __m256i *)ub);
    }
    }
}

/* Block b of a row as u (load_u) and the scale and min of each half (equal halves for the
 * types with one scale per block), as scalars. */
INLINE void load_block(int t, const uint8_t *row, int64_t b, __m256i *u, float sc[2], float mn[2]) {
    const uint8_t *p;
    mn[0] = mn[1] = 0.0f;
    switch (t) {
    case KVP_TYPE_Q4_0:
    case KVP_TYPE_Q5_0:
    case KVP_TYPE_Q8_0:
        sc[0] = sc[1] = f16_at(row + b * (t == KVP_TYPE_Q4_0 ? 18 : t == KVP_TYPE_Q5_0 ? 22 : 34));
        break;
    case KVP_TYPE_Q4_1:
    case KVP_TYPE_Q5_1:
        p = row + b * (t == KVP_TYPE_Q4_1 ? 20 : 24);
        sc[0] = sc[1] = f16_at(p);
        mn[0] = mn[1] = f16_at(p + 2);
        break;
    case KVP_TYPE_Q4_K:
    case KVP_TYPE_Q4_K_LB: {
        int s, mi;
        p = q4k_block_scale_min(t, row, b, &s, &mi);
        sc[0] = sc[1] = f16_at(p) * (float)s;
        mn[0] = mn[1] = -(f16_at(p + 2) * (float)mi);
        break;
    }
    case KVP_TYPE_Q6_K:
    case KVP_TYPE_Q6_K_LB: {
        p = row + (b / 8) * 210;
        int bb = (int)(b % 8);
        float d = f16_at(p + 208);
        sc[0] = d * (float)(int8_t)p[q6k_scale(bb, 0, is_lb(t))];
        sc[1] = d * (float)(int8_t)p[q6k_scale(bb, 1, is_lb(t))];
        break;
    }
    default: { /* u and scales in one pass */
        uint8_t ub[32];
        unpack_block(t, row, b, ub, sc, mn);
        *u = _mm256_loadu_si256((const __m256i *)ub);
        return;
    }
    }
    *u = load_u(t, row, b);
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

/* ---- rows x activations in tiles of 4 rows (batches without the packed tiles) --------------- *
 * RM weight rows (4) against SRN activations: each (row, activation) block dot as 8 lanes of 4
 * bytes, reduced to the block's (or each half's) exact sum for the 4 rows at once, then the
 * float steps on 4 rows per vector. Weight blocks come from the rows themselves, or from wbuf
 * when a batch is wider than one tile (unpacked once for all of them). */
#define RM 4
#if defined(QD_512)
#define SRN 3 /* 32 vector registers */
#else
#define SRN 1
#endif

typedef struct wbuf { /* RM rows x nblk blocks: u, and the scales and mins of both halves */
    __m256i *u;
    float *sc, *mn; /* [row][block][2] */
    int64_t nblk;
} wbuf;

/* Sum of the 8 lanes of each of 4 vectors: whole blocks (half = 0) in one 128-bit vector, or
 * the first (lanes 0-3) and second (lanes 4-7) halves in two. */
INLINE void reduce4(__m256i d0, __m256i d1, __m256i d2, __m256i d3, __m128i *h0, __m128i *h1, __m128i *all) {
    __m256i c = _mm256_hadd_epi32(_mm256_hadd_epi32(d0, d1), _mm256_hadd_epi32(d2, d3));
    *h0 = _mm256_castsi256_si128(c);
    *h1 = _mm256_extracti128_si256(c, 1);
    *all = _mm_add_epi32(*h0, *h1);
}

INLINE int32_t hsum_epi32_128(__m128i v) {
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4e));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xb1));
    return _mm_cvtsi128_si32(v);
}

/* out[j0 + j][r0 + i] for i < rm, j < rn (compile-time constants at each call). */
INLINE void tile_rows(int t, int rm, int rn, int lo, const uint8_t *w, size_t rb, int64_t nblk, int64_t r0,
                      const kvp_qact *a, int j0, const wbuf *wb, float *const *out) {
    const int os = off_shift(t), H = type_halves(t), mins = type_has_min(t);
    const int8_t *xq[SRN], *xl[SRN];
    const float *xd[SRN];
    for (int j = 0; j < rn; j++) {
        xq[j] = a->q + (size_t)(j0 + j) * a->n;
        xl[j] = lo ? a->lo + (size_t)(j0 + j) * a->n : NULL;
        xd[j] = a->d + (size_t)(j0 + j) * (a->n / QB);
    }
    const uint8_t *wr[RM];
    for (int i = 0; i < rm; i++) wr[i] = w + (size_t)(r0 + i) * rb;
    size_t bpb = rb / (size_t)nblk; /* weight bytes per 32 elements */
    __m128 acc[SRN];
    for (int j = 0; j < rn; j++) acc[j] = _mm_setzero_ps();
    for (int64_t b = 0; b < nblk; b++) {
        __m256i u[RM];
        float sc[RM][2], mn[RM][2];
        for (int i = 0; i < RM; i++) {
            if (i >= rm) {
                u[i] = _mm256_setzero_si256();
                sc[i][0] = sc[i][1] = mn[i][0] = mn[i][1] = 0.0f;
            } else if (wb) {
                size_t k = (size_t)i * nblk + b;
                u[i] = wb->u[k];
                memcpy(sc[i], wb->sc + 2 * k, sizeof sc[i]);
                memcpy(mn[i], wb->mn + 2 * k, sizeof mn[i]);
            } else {
                if ((b & 1) == 0) _mm_prefetch((const char *)wr[i] + (size_t)b * bpb + PF_DIST, _MM_HINT_T0);
                load_block(t, wr[i], b, &u[i], sc[i], mn[i]);
            }
        }
        __m128 sc0 = _mm_setr_ps(sc[0][0], sc[1][0], sc[2][0], sc[3][0]);
        __m128 sc1 = _mm_setr_ps(sc[0][1], sc[1][1], sc[2][1], sc[3][1]);
        __m128 mn0 = _mm_setr_ps(mn[0][0], mn[1][0], mn[2][0], mn[3][0]);
        __m128 mn1 = _mm_setr_ps(mn[0][1], mn[1][1], mn[2][1], mn[3][1]);
        for (int j = 0; j < rn; j++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(xq[j] + b * QB)), ls = lane_sums(x), xlo, ll;
            __m256i src = os >= 0 ? _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(ls, os)) : _mm256_setzero_si256();
            __m256i srclo = _mm256_setzero_si256();
            if (lo) {
                xlo = _mm256_loadu_si256((const __m256i *)(xl[j] + b * QB));
                ll = lane_sums(xlo);
                if (os >= 0) srclo = _mm256_sub_epi32(srclo, _mm256_slli_epi32(ll, os));
                ls = _mm256_add_epi32(_mm256_slli_epi32(ls, 8), ll); /* sums of X */
            }
            __m256i dd[RM];
            for (int i = 0; i < RM; i++) {
                dd[i] = dot_lanes(t, src, u[i], x);
                if (lo) dd[i] = _mm256_add_epi32(_mm256_slli_epi32(dd[i], 8), dot_lanes(t, srclo, u[i], xlo));
            }
            __m128i h0, h1, all;
            reduce4(dd[0], dd[1], dd[2], dd[3], &h0, &h1, &all);
            __m128 tt;
            if (H == 2) tt = _mm_fmadd_ps(sc1, _mm_cvtepi32_ps(h1), _mm_mul_ps(sc0, _mm_cvtepi32_ps(h0)));
            else tt = _mm_mul_ps(sc0, _mm_cvtepi32_ps(all));
            if (mins) {
                __m128i s0 = _mm256_castsi256_si128(ls), s1 = _mm256_extracti128_si256(ls, 1);
                if (H == 2) {
                    tt = _mm_fmadd_ps(mn0, _mm_set1_ps((float)hsum_epi32_128(s0)), tt);
                    tt = _mm_fmadd_ps(mn1, _mm_set1_ps((float)hsum_epi32_128(s1)), tt);
                } else {
                    tt = _mm_fmadd_ps(mn0, _mm_set1_ps((float)hsum_epi32_128(_mm_add_epi32(s0, s1))), tt);
                }
            }
            float dx = lo ? xd[j][b] * (1.0f / 256.0f) : xd[j][b];
            acc[j] = _mm_fmadd_ps(_mm_set1_ps(dx), tt, acc[j]);
        }
    }
    for (int j = 0; j < rn; j++) {
        float v[4];
        _mm_storeu_ps(v, acc[j]);
        for (int i = 0; i < rm; i++) out[j0 + j][r0 + i] = v[i];
    }
}

INLINE void unpack_rows(int t, const uint8_t *w, size_t rb, int64_t nblk, int64_t r0, int rm, const wbuf *wb) {
    for (int i = 0; i < rm; i++)
        for (int64_t b = 0; b < nblk; b++) {
            size_t k = (size_t)i * nblk + b;
            load_block(t, w + (size_t)(r0 + i) * rb, b, &wb->u[k], wb->sc + 2 * k, wb->mn + 2 * k);
        }
}

/* Rows [r, r + rm) against every activation: tiles of SRN, then one of the rest. */
INLINE void row_tile(int t, int rm, int lo, const uint8_t *w, size_t rb, int64_t nblk, int64_t r, const kvp_qact *a,
                     const wbuf *wb, float *const *out) {
    if (wb) unpack_rows(t, w, rb, nblk, r, rm, wb);
    int j = 0;
    for (; j + SRN <= a->nb; j += SRN) tile_rows(t, rm, SRN, lo, w, rb, nblk, r, a, j, wb, out);
#if SRN > 2
    if (a->nb - j == 2) tile_rows(t, rm, 2, lo, w, rb, nblk, r, a, j, wb, out);
#endif
#if SRN > 1
    if (a->nb - j == 1) tile_rows(t, rm, 1, lo, w, rb, nblk, r, a, j, wb, out);
#endif
}

INLINE void qdot_small(int t, int lo, const uint8_t *w, size_t rb, int64_t n, int64_t r0, int64_t r1, const kvp_qact *a,
                       const wbuf *wb, float *const *out) {
    int64_t nblk = n / QB, r = r0;
    for (; r + RM <= r1; r += RM) row_tile(t, RM, lo, w, rb, nblk, r, a, wb, out);
    switch (r1 - r) { /* the edge: the same per-pair arithmetic, fewer rows */
    case 3: row_tile(t, 3, lo, w, rb, nblk, r, a, wb, out); break;
    case 2: row_tile(t, 2, lo, w, rb, nblk, r, a, wb, out); break;
    case 1: row_tile(t, 1, lo, w, rb, nblk, r, a, wb, out); break;
    }
}

/* ---- one to SRN activations (decode): rows one after another -------------------------------- *
 * The 4-row tiles above spend most of their time outside the integer dots: per block and row
 * they decode the scales in scalar code and reduce the block dot across the 4 rows. Here each
 * row is read on its own, in order (a tile of DR rows is one sequential stream), in chunks of
 * DC blocks with lane = block: the DC block dots reduce to one vector of per-block sums, the
 * scales decode as vectors (a K-quant's super-block at once), and t = sc*I (+ mn*S) is formed
 * for DC blocks in one pass. The tile's rows of t are then transposed to lane = row for
 * acc = fma(dx, t, acc), block after block: the recipe above, pair by pair, bit for bit. */
#define DR 8    /* rows per tile */
#define DC 8    /* blocks per chunk (lanes of one vector); a K-quant super-block */
#define DBAND 32 /* chunks whose t a tile keeps (8 KB per activation) before the fma pass */

/* Blocks in chunk c of a row of nblk blocks (DC but at the row's end). */
INLINE int chunk_blocks(int64_t nblk, int64_t c) { return nblk - c * DC < DC ? (int)(nblk - c * DC) : DC; }

/* Per activation and block, what the float steps and the offset need (lane = block). */
typedef struct dact {
    float *dx;        /* d, or d / 256 with q8x2 */
    float *sf[2];     /* (float) sums of X over each half (H = 2) or the block (sf[0], H = 1) */
    int32_t *corr[2]; /* those sums << log2(offset): off * S, taken from the dots */
    int8_t *xq, *xl;  /* lane = block weights: q and lo regrouped as the weights are (lb_acts) */
} dact;

/* d[k] = per-block sums over halves 0 and 1 of 8 vectors of 8 lanes (lane = 4 bytes), lane k. */
INLINE void reduce8(const __m256i d[DC], __m256i *h0, __m256i *h1) {
    __m256i a0 = _mm256_hadd_epi32(d[0], d[1]), a1 = _mm256_hadd_epi32(d[2], d[3]);
    __m256i a2 = _mm256_hadd_epi32(d[4], d[5]), a3 = _mm256_hadd_epi32(d[6], d[7]);
    __m256i b0 = _mm256_hadd_epi32(a0, a1), b1 = _mm256_hadd_epi32(a2, a3);
    *h0 = _mm256_permute2x128_si256(b0, b1, 0x20);
    *h1 = _mm256_permute2x128_si256(b0, b1, 0x31);
}

INLINE __m256 f16x8(__m128i h) {
#if defined(__F16C__)
    return _mm256_cvtph_ps(h);
#else /* AVX2 + FMA without F16C (an -mavx2 -mfma build): the same values, one at a time */
    uint16_t v[8];
    float f[8];
    _mm_storeu_si128((__m128i *)v, h);
    for (int k = 0; k < 8; k++) f[k] = kvp_fp16_to_f32(v[k]);
    return _mm256_loadu_ps(f);
#endif
}

/* 8 f16 values at p + k * stride (k < nc; the rest 0). */
INLINE __m128i gather_f16(const uint8_t *p, size_t stride, int nc) {
    /* in a register: 8 small stores and one wide load would stall store forwarding */
    uint16_t h[8];
    for (int k = 0; k < 8; k++) {
        h[k] = 0;
        if (k < nc) memcpy(&h[k], p + (size_t)k * stride, 2);
    }
    __m128i v = _mm_cvtsi32_si128(h[0]);
    v = _mm_insert_epi16(v, h[1], 1), v = _mm_insert_epi16(v, h[2], 2), v = _mm_insert_epi16(v, h[3], 3);
    v = _mm_insert_epi16(v, h[4], 4), v = _mm_insert_epi16(v, h[5], 5), v = _mm_insert_epi16(v, h[6], 6);
    return _mm_insert_epi16(v, h[7], 7);
}

/* Scales and mins of blocks b0 .. b0 + nc - 1 of a row, lane k = block b0 + k: the same floats
 * load_block makes (products of the same factors, the same negation). */
INLINE void load_scales(int t, const uint8_t *row, int64_t b0, int nc, __m256 sc[2], __m256 mn[2]) {
    const __m256 neg = _mm256_set1_ps(-0.0f);
    sc[1] = mn[0] = mn[1] = _mm256_setzero_ps();
    switch (t) {
    case KVP_TYPE_Q4_0: sc[0] = f16x8(gather_f16(row + b0 * 18, 18, nc)); return;
    case KVP_TYPE_Q5_0: sc[0] = f16x8(gather_f16(row + b0 * 22, 22, nc)); return;
    case KVP_TYPE_Q8_0: sc[0] = f16x8(gather_f16(row + b0 * 34, 34, nc)); return;
    case KVP_TYPE_Q4_1:
        sc[0] = f16x8(gather_f16(row + b0 * 20, 20, nc));
        mn[0] = f16x8(gather_f16(row + b0 * 20 + 2, 20, nc));
        return;
    case KVP_TYPE_Q5_1:
        sc[0] = f16x8(gather_f16(row + b0 * 24, 24, nc));
        mn[0] = f16x8(gather_f16(row + b0 * 24 + 2, 24, nc));
        return;
    case KVP_TYPE_Q4_K_LB: { /* a whole super-block: the 8 scales and 8 mins as bytes */
        const uint8_t *p = row + (b0 / 8) * KQ4_LB_BYTES;
        __m256 s = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + q4k_lb_scale(0)))));
        __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + q4k_lb_min(0)))));
        sc[0] = _mm256_mul_ps(_mm256_set1_ps(f16_at(p)), s);
        mn[0] = _mm256_xor_ps(neg, _mm256_mul_ps(_mm256_set1_ps(f16_at(p + 2)), m));
        return;
    }
    case KVP_TYPE_Q4_K:
    case KVP_TYPE_Q5_K: { /* a whole super-block: 6-bit scale and min of each of the 8 blocks */
        const uint8_t *p = row + (b0 / 8) * (t == KVP_TYPE_Q5_K ? 176 : 144);
        uint32_t w0, w1, w2;
        memcpy(&w0, p + 4, 4), memcpy(&w1, p + 8, 4), memcpy(&w2, p + 12, 4);
        uint32_t s_lo = w0 & 0x3f3f3f3f, m_lo = w1 & 0x3f3f3f3f;
        uint32_t s_hi = (w2 & 0x0f0f0f0f) | (((w0 >> 6) & 0x03030303) << 4);
        uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0f) | (((w1 >> 6) & 0x03030303) << 4);
        __m256 s = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32((int)s_lo, (int)s_hi, 0, 0)));
        __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32((int)m_lo, (int)m_hi, 0, 0)));
        sc[0] = _mm256_mul_ps(_mm256_set1_ps(f16_at(p)), s);
        mn[0] = _mm256_xor_ps(neg, _mm256_mul_ps(_mm256_set1_ps(f16_at(p + 2)), m));
        return;
    }
    case KVP_TYPE_Q6_K:
    case KVP_TYPE_Q6_K_LB: { /* 16 signed 8-bit scales: half 0 of each block at even bytes (file) */
        const uint8_t *p = row + (b0 / 8) * 210;
        __m128i s = _mm_loadu_si128((const __m128i *)(p + 192));
        if (!is_lb(t)) s = _mm_shuffle_epi8(s, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
        __m256 d = _mm256_set1_ps(f16_at(p + 208));
        sc[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s)));
        sc[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(s, 8))));
        return;
    }
    default: { /* the rest block by block */
        float s[2][8] = {{0}}, m[2][8] = {{0}};
        for (int k = 0; k < nc; k++) {
            uint8_t u[32];
            float bs[2], bm[2];
            unpack_block(t, row, b0 + k, u, bs, bm);
            s[0][k] = bs[0], s[1][k] = bs[1], m[0][k] = bm[0], m[1][k] = bm[1];
        }
        for (int h = 0; h < 2; h++) sc[h] = _mm256_loadu_ps(s[h]), mn[h] = _mm256_loadu_ps(m[h]);
        return;
    }
    }
}

/* The per-block sums of activation row j (blocks padded to whole chunks with zeros). */
INLINE void prep_act(int t, int lo, const kvp_qact *a, int j, int64_t nblk, dact *da) {
    const int os = off_shift(t), H = type_halves(t);
    const int8_t *q = a->q + (size_t)j * a->n, *l = lo ? a->lo + (size_t)j * a->n : NULL;
    const float *d = a->d + (size_t)j * nblk;
    for (int64_t b0 = 0; b0 < nblk; b0 += DC) {
        int nc = chunk_blocks(nblk, b0 / DC);
        __m256i sq[DC], sl[DC], h0, h1, l0, l1;
        for (int k = 0; k < DC; k++) {
            sq[k] = k < nc ? lane_sums(_mm256_loadu_si256((const __m256i *)(q + (b0 + k) * QB))) : _mm256_setzero_si256();
            if (lo) sl[k] = k < nc ? lane_sums(_mm256_loadu_si256((const __m256i *)(l + (b0 + k) * QB))) : _mm256_setzero_si256();
        }
        reduce8(sq, &h0, &h1);
        if (lo) {
            reduce8(sl, &l0, &l1);
            h0 = _mm256_add_epi32(_mm256_slli_epi32(h0, 8), l0);
            h1 = _mm256_add_epi32(_mm256_slli_epi32(h1, 8), l1);
        }
        if (H == 1) h0 = _mm256_add_epi32(h0, h1);
        __m256i hs[2] = {h0, h1};
        for (int h = 0; h < H; h++) {
            _mm256_storeu_ps(da->sf[h] + b0, _mm256_cvtepi32_ps(hs[h]));
            _mm256_storeu_si256((__m256i *)(da->corr[h] + b0), os >= 0 ? _mm256_slli_epi32(hs[h], os) : _mm256_setzero_si256());
        }
        for (int k = 0; k < DC; k++) da->dx[b0 + k] = k < nc ? (lo ? d[b0 + k] * (1.0f / 256.0f) : d[b0 + k]) : 0.0f;
    }
}

/* c[k] = column k of the 8 x 8 matrix whose rows are r[0..7]. */
INLINE void transpose8(const __m256 r[8], __m256 c[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    c[0] = _mm256_permute2f128_ps(s0, s4, 0x20), c[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    c[2] = _mm256_permute2f128_ps(s2, s6, 0x20), c[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    c[4] = _mm256_permute2f128_ps(s0, s4, 0x31), c[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    c[6] = _mm256_permute2f128_ps(s2, s6, 0x31), c[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* The recipe's float steps for DC blocks (lane = block) from their exact integer sums over
 * half 0 (or the whole block, H = 1) and half 1. */
INLINE __m256 chunk_t(int t, __m256i I0, __m256i I1, const __m256 sc[2], const __m256 mn[2], const dact *da, int64_t b0) {
    const int os = off_shift(t), H = type_halves(t), mins = type_has_min(t);
    if (os >= 0) {
        I0 = _mm256_sub_epi32(I0, _mm256_loadu_si256((const __m256i *)(da->corr[0] + b0)));
        if (H == 2) I1 = _mm256_sub_epi32(I1, _mm256_loadu_si256((const __m256i *)(da->corr[1] + b0)));
    }
    __m256 tt = _mm256_mul_ps(sc[0], _mm256_cvtepi32_ps(I0));
    if (H == 2) tt = _mm256_fmadd_ps(sc[1], _mm256_cvtepi32_ps(I1), tt);
    if (mins) {
        tt = _mm256_fmadd_ps(mn[0], _mm256_loadu_ps(da->sf[0] + b0), tt);
        if (H == 2) tt = _mm256_fmadd_ps(mn[1], _mm256_loadu_ps(da->sf[1] + b0), tt);
    }
    return tt;
}

/* t (lane = block) of DC blocks from b0 of one row, for each of the rn activations. */
INLINE void row_chunk(int t, int lo, const uint8_t *row, int64_t b0, int nc, const kvp_qact *a, int rn, const dact *da,
                      __m256 *tout, size_t tstride) {
    const int H = type_halves(t);
    __m256i u[DC];
    __m256 sc[2], mn[2];
    for (int k = 0; k < DC; k++) u[k] = k < nc ? load_u(t, row, b0 + k) : _mm256_setzero_si256();
    load_scales(t, row, b0, nc, sc, mn);
    for (int j = 0; j < rn; j++) {
        const int8_t *xq = a->q + (size_t)j * a->n + b0 * QB, *xl = lo ? a->lo + (size_t)j * a->n + b0 * QB : NULL;
        __m256i dd[DC], I0, I1;
        for (int k = 0; k < DC; k++) {
            if (k >= nc) {
                dd[k] = _mm256_setzero_si256();
                continue;
            }
            dd[k] = dot_lanes(t, _mm256_setzero_si256(), u[k], _mm256_loadu_si256((const __m256i *)(xq + k * QB)));
            if (lo)
                dd[k] = dot_lanes(t, _mm256_slli_epi32(dd[k], 8), u[k], _mm256_loadu_si256((const __m256i *)(xl + k * QB)));
        }
        reduce8(dd, &I0, &I1);
        if (H == 1) I0 = _mm256_add_epi32(I0, I1);
        tout[(size_t)j * tstride] = chunk_t(t, I0, I1, sc, mn, &da[j], b0);
    }
}

/* Activation blocks regrouped as lane = block weights are: vector i of the chunk from block b0
 * holds in lane k the 4-byte group i of block b0 + k (an 8 x 8 transpose of 4-byte groups). */
INLINE void lb_acts(const int8_t *x, int8_t *xt, int64_t nblk) {
    for (int64_t b0 = 0; b0 < nblk; b0 += DC) {
        __m256 r[DC], c[DC];
        for (int k = 0; k < DC; k++) r[k] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(x + (b0 + k) * QB)));
        transpose8(r, c);
        for (int i = 0; i < DC; i++) _mm256_storeu_si256((__m256i *)(xt + (b0 + i) * QB), _mm256_castps_si256(c[i]));
    }
}

/* The super-block's quants as vectors i = 0..7, lane k = group i of block k (kquant_layout.h). */
INLINE void lb_unpack(int t, const uint8_t *sb, __m256i u[DC]) {
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    const uint8_t *ql = sb + (base_type(t) == KVP_TYPE_Q4_K ? q4k_quant(0, 1).byte : 0);
    for (int v = 0; v < 4; v++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(ql + 32 * v));
        u[2 * v] = _mm256_and_si256(q, m4);
        u[2 * v + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    }
    if (base_type(t) == KVP_TYPE_Q6_K)
        for (int h = 0; h < 2; h++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(sb + 128 + 32 * h));
            for (int m = 0; m < 4; m++)
                u[4 * h + m] = _mm256_or_si256(u[4 * h + m], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 2 * m), m2), 4));
        }
}

/* row_chunk on a lane = block super-block: each block's integer sums build up in its own lane
 * (the same integers, so the same bits), with no reduction across lanes. */
INLINE void row_chunk_lb(int t, int lo, const uint8_t *row, size_t sb_bytes, int64_t b0, int rn, const dact *da,
                         __m256 *tout, size_t tstride) {
    const int H = type_halves(t);
    __m256i u[DC];
    __m256 sc[2], mn[2];
    lb_unpack(t, row + (size_t)(b0 / DC) * sb_bytes, u); /* a chunk is one super-block */
    load_scales(t, row, b0, DC, sc, mn);
    for (int j = 0; j < rn; j++) {
        const int8_t *xq = da[j].xq + b0 * QB, *xl = lo ? da[j].xl + b0 * QB : NULL;
        /* Four chains of dots (two per half), added at the end: one chain of 8 dependent dots
         * made their latency the kernel's bound (integers: the same sums, the same bits). */
        __m256i A[4], B[4];
        for (int c = 0; c < 4; c++) A[c] = B[c] = _mm256_setzero_si256();
        for (int i = 0; i < DC; i++) {
            int c = H == 2 ? 2 * (i >= DC / 2) + (i & 1) : i & 3; /* groups 0-3: a block's first 16 */
            A[c] = dot_lanes(t, A[c], u[i], _mm256_loadu_si256((const __m256i *)(xq + i * QB)));
            if (lo) B[c] = dot_lanes(t, B[c], u[i], _mm256_loadu_si256((const __m256i *)(xl + i * QB)));
        }
        __m256i I[2], L[2];
        I[0] = _mm256_add_epi32(A[0], A[1]), I[1] = _mm256_add_epi32(A[2], A[3]);
        L[0] = _mm256_add_epi32(B[0], B[1]), L[1] = _mm256_add_epi32(B[2], B[3]);
        if (H == 1) I[0] = _mm256_add_epi32(I[0], I[1]), L[0] = _mm256_add_epi32(L[0], L[1]);
        if (lo)
            for (int h = 0; h < H; h++) I[h] = _mm256_add_epi32(_mm256_slli_epi32(I[h], 8), L[h]);
        tout[(size_t)j * tstride] = chunk_t(t, I[0], I[1], sc, mn, &da[j], b0);
    }
}

/* Rows [r0, r1) against a->nb <= SRN activations. one_act: a->nb is 1, as a compile-time
 * constant: the per-activation loops vanish and their pointers stay in registers (GCC kept
 * them in vector registers, moved back per use: +29% on a cache-resident Q4_K tensor, AMD). */
INLINE void qdot_decode(int t, int lo, int one_act, const uint8_t *w, size_t rb, int64_t n, int64_t r0, int64_t r1,
                        const kvp_qact *a, float *const *out) {
    const int64_t nblk = n / QB, nchunk = (nblk + DC - 1) / DC, padded = nchunk * DC;
    const int rn = one_act ? 1 : a->nb;
    /* exact for both: a 32-block type's row is nblk equal blocks, a K-quant row whole super-blocks
     * of DC blocks (Q6_K: 210 bytes, not a multiple of DC); a constant for lane = block types
     * (the prefetch loop below unrolls) */
    const size_t chunk_bytes = is_lb(t) ? lb_sb_bytes(t) : rb * DC / (size_t)nblk;
    /* per activation: dx, sf[2], corr[2] over the padded blocks (and q, lo regrouped for lane =
     * block weights); then t [rn][DBAND][DR] */
    size_t act_bytes = (size_t)padded * (5 * sizeof(float) + (is_lb(t) ? 2 * QB : 0)),
           t_bytes = (size_t)rn * DBAND * DR * sizeof(__m256);
    uint8_t *mem = aligned_alloc(32, (size_t)rn * act_bytes + t_bytes);
    if (!mem) { /* no memory: the 4-row tiles give the same bits */
        qdot_small(t, lo, w, rb, n, r0, r1, a, NULL, out);
        return;
    }
    __m256 *tb = (__m256 *)mem;
    dact da[SRN] = {{0}}; /* rn <= SRN are set below */
    for (int j = 0; j < rn; j++) {
        float *f = (float *)(mem + t_bytes + (size_t)j * act_bytes);
        int8_t *x = (int8_t *)(f + 5 * padded);
        da[j] = (dact){f, {f + padded, f + 2 * padded}, {(int32_t *)(f + 3 * padded), (int32_t *)(f + 4 * padded)}, x,
                       x + padded * QB};
        prep_act(t, lo, a, j, nblk, &da[j]);
        if (is_lb(t)) { /* K-quant rows: whole chunks */
            lb_acts(a->q + (size_t)j * a->n, da[j].xq, nblk);
            if (lo) lb_acts(a->lo + (size_t)j * a->n, da[j].xl, nblk);
        }
    }
    const size_t tstride = (size_t)DBAND * DR; /* between activations */
    for (int64_t r = r0; r < r1; r += DR) {
        const int rm = r1 - r < DR ? (int)(r1 - r) : DR;
        __m256 acc[SRN];
        for (int j = 0; j < rn; j++) acc[j] = _mm256_setzero_ps();
        for (int64_t c0 = 0; c0 < nchunk; c0 += DBAND) {
            const int64_t c1 = nchunk - c0 < DBAND ? nchunk : c0 + DBAND;
            for (int i = 0; i < DR; i++) {
                if (i >= rm) {
                    for (int j = 0; j < rn; j++)
                        for (int64_t c = c0; c < c1; c++) tb[(size_t)j * tstride + (size_t)(c - c0) * DR + i] = _mm256_setzero_ps();
                    continue;
                }
                const uint8_t *row = w + (size_t)(r + i) * rb;
                for (int64_t c = c0; c < c1; c++) {
                    const uint8_t *pf = row + (size_t)c * chunk_bytes + PF_DECODE_DIST;
                    for (size_t o = 0; o < chunk_bytes; o += 64) _mm_prefetch((const char *)pf + o, _MM_HINT_T1);
                    int nc = chunk_blocks(nblk, c);
                    if (is_lb(t)) row_chunk_lb(t, lo, row, chunk_bytes, c * DC, rn, da, &tb[(size_t)(c - c0) * DR + i], tstride);
                    else if (nc == DC) row_chunk(t, lo, row, c * DC, DC, a, rn, da, &tb[(size_t)(c - c0) * DR + i], tstride);
                    else row_chunk(t, lo, row, c * DC, nc, a, rn, da, &tb[(size_t)(c - c0) * DR + i], tstride);
                }
            }
            for (int j = 0; j < rn; j++)
                for (int64_t c = c0; c < c1; c++) {
                    __m256 col[DC];
                    transpose8(&tb[(size_t)j * tstride + (size_t)(c - c0) * DR], col);
                    int nc = chunk_blocks(nblk, c);
                    const float *dx = da[j].dx + c * DC;
                    if (nc == DC)
                        for (int k = 0; k < DC; k++) acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dx[k]), col[k], acc[j]);
                    else
                        for (int k = 0; k < nc; k++) acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(dx[k]), col[k], acc[j]);
                }
        }
        for (int j = 0; j < rn; j++) {
            float v[DR];
            _mm256_storeu_ps(v, acc[j]);
            for (int i = 0; i < rm; i++) out[j][r + i] = v[i];
        }
    }
    free(mem);
}

/* ---- batches on AVX-512: 16 rows per vector (lane = row) ------------------------------------ *
 * A tile of 16 weight rows is unpacked once per call into lane = row vectors: vector c of block
 * b holds in lane i bytes 4c .. 4c + 3 of row i's block b (u), and the rows' scales and mins
 * per half likewise. Every activation then meets the tile 4 bytes at a time, broadcast from its
 * own row (its bytes are never regrouped): one vpdpbusd adds 4 products
 * to each of 16 (row, activation) pairs, the float steps run once per 16 pairs with nothing to
 * reduce or transpose, and the 16 results are 16 consecutive outputs. A weight byte is stored
 * once (the tiles of 4 rows x 4 activations before stored it 4 times), so a tile of 16 rows of
 * 4864 is 117 KB, within L2. The recipe per pair is the one-row kernel's: the same integers
 * (the offset's correction is taken once, from the activation's sums), the same float steps in
 * the same order. */
#ifdef QD_512
#define LR 16 /* rows per tile: the lanes of a vector */
#ifndef PACK_MIN_ROWS
#define PACK_MIN_ROWS 4 /* batches from this many activation rows take these tiles */
#endif

typedef struct lr_act { /* activation j x block b: what the float steps need besides its bytes */
    float dx;      /* d, or d / 256 with q8x2 */
    float sf[3];   /* the sums of X (q, or q * 256 + lo with q8x2) over half 0, half 1, the block */
    int32_t sx[3]; /* the same sums as integers (for the offset's correction) */
    int32_t pad;
} lr_act;

typedef struct lr_wblock { /* 16 rows x one block (768 bytes: 64-byte aligned in an aligned array) */
    uint8_t u[8][64];          /* chunk c: row i's bytes 4c .. 4c + 3 in lane i */
    float sc[2][LR], mn[2][LR]; /* row i's half-h scale / min in lane i */
} lr_wblock;

/* Per activation and block: its scale and the sums of its bytes (row-major, a->nb x nblk). */
static void pack_acts(const kvp_qact *a, lr_act *pk) {
    int64_t nblk = a->n / QB;
    for (int j = 0; j < a->nb; j++) {
        const int8_t *q = a->q + (size_t)j * a->n, *l = a->lo ? a->lo + (size_t)j * a->n : NULL;
        const float *d = a->d + (size_t)j * nblk;
        for (int64_t b = 0; b < nblk; b++) {
            int32_t s[2] = {0, 0}, sl[2] = {0, 0};
            for (int k = 0; k < QB; k++) {
                s[k / 16] += q[b * QB + k];
                if (l) sl[k / 16] += l[b * QB + k];
            }
            lr_act *p = &pk[(size_t)j * nblk + b];
            p->dx = l ? d[b] * (1.0f / 256.0f) : d[b];
            for (int h = 0; h < 2; h++) p->sx[h] = l ? s[h] * 256 + sl[h] : s[h];
            p->sx[2] = p->sx[0] + p->sx[1];
            for (int h = 0; h < 3; h++) p->sf[h] = (float)p->sx[h];
            p->pad = 0;
        }
    }
}

/* 16 rows of 8 four-byte lanes (row i at rows + 32 i, 32-byte aligned) turned into 8 vectors
 * of 16: out[k] lane i = lane k of row i. */
INLINE void transpose16x8(const uint8_t *rows, __m512 out[8]) {
    __m256 u[LR], c0[8], c1[8];
    for (int i = 0; i < LR; i++) u[i] = _mm256_load_ps((const float *)(rows + 32 * i));
    transpose8(u, c0);
    transpose8(u + 8, c1);
    for (int k = 0; k < 8; k++) out[k] = _mm512_insertf32x8(_mm512_castps256_ps512(c0[k]), c1[k], 1);
}

/* Lane = block super-blocks (K-quants repacked at load): each row's super-block unpacks whole
 * (vector c: chunk c of its 8 blocks, lane = block), row after row (one sequential stream, as
 * below), parked as 16 rows of 32 bytes in the u of block b0 + c; then an 8 x 8 transpose per
 * chunk and half tile turns lane = block into lane = row. (One gather per row and block did it
 * before, and made the pack the batch kernel's cost on these types.) */
INLINE void pack_rows_lb(int t, const uint8_t *w, size_t rb, int64_t nblk, int64_t r0, int64_t r1, lr_wblock *wp) {
    const size_t sb_bytes = rb / (size_t)(nblk / DC);
    for (int i = 0; i < LR; i++) {
        const uint8_t *row = r0 + i < r1 ? w + (size_t)(r0 + i) * rb : NULL;
        for (int64_t b0 = 0; b0 < nblk; b0 += DC) {
            __m256i ui[DC];
            __m256 s2[2], m2[2];
            if (row) {
                const uint8_t *sb = row + (size_t)(b0 / DC) * sb_bytes;
                for (size_t o = 0; o < sb_bytes; o += 64) _mm_prefetch((const char *)sb + PF_DIST + o, _MM_HINT_T0);
                lb_unpack(t, sb, ui);
                load_scales(t, row, b0, DC, s2, m2);
            } else {
                for (int c = 0; c < DC; c++) ui[c] = _mm256_setzero_si256();
                s2[0] = s2[1] = m2[0] = m2[1] = _mm256_setzero_ps();
            }
            for (int c = 0; c < DC; c++) _mm256_store_si256((__m256i *)(wp[b0 + c].u[0] + 32 * i), ui[c]);
            float sv[2][DC], mv[2][DC];
            for (int h = 0; h < 2; h++) _mm256_storeu_ps(sv[h], s2[h]), _mm256_storeu_ps(mv[h], m2[h]);
            for (int k = 0; k < DC; k++)
                for (int h = 0; h < 2; h++) wp[b0 + k].sc[h][i] = sv[h][k], wp[b0 + k].mn[h][i] = mv[h][k];
        }
    }
    for (int64_t b0 = 0; b0 < nblk; b0 += DC) {
        __m512 out[DC][DC]; /* [block k][chunk c] */
        for (int c = 0; c < DC; c++) {
            __m512 col[DC]; /* col[k] lane i: row i's chunk c of block b0 + k */
            transpose16x8(wp[b0 + c].u[0], col);
            for (int k = 0; k < DC; k++) out[k][c] = col[k];
        }
        for (int k = 0; k < DC; k++)
            for (int c = 0; c < DC; c++) _mm512_store_ps(wp[b0 + k].u[c], out[k][c]);
    }
}

/* Rows [r0, r0 + LR) as lane = row blocks (rows past r1 get zero weights, never written out).
 * Row by row first — the tile's rows are one sequential stream from memory, where reading
 * block b of 16 rows at once made 16 — into each block's u as 16 rows of 32 bytes, then one
 * transpose per block turns those into lane = row chunks in place. */
INLINE void pack_rows(int t, const uint8_t *w, size_t rb, int64_t nblk, int64_t r0, int64_t r1, lr_wblock *wp) {
    if (is_lb(t)) {
        pack_rows_lb(t, w, rb, nblk, r0, r1, wp);
        return;
    }
    const size_t bpb = rb / (size_t)nblk; /* weight bytes per 32 elements */
    for (int i = 0; i < LR; i++) {
        const uint8_t *row = r0 + i < r1 ? w + (size_t)(r0 + i) * rb : NULL;
        for (int64_t b = 0; b < nblk; b++) {
            __m256i ui = _mm256_setzero_si256();
            float s2[2] = {0.0f, 0.0f}, m2[2] = {0.0f, 0.0f};
            if (row) {
                if ((b & 1) == 0) _mm_prefetch((const char *)row + (size_t)b * bpb + PF_DIST, _MM_HINT_T0);
                load_block(t, row, b, &ui, s2, m2);
            }
            lr_wblock *p = &wp[b];
            _mm256_store_si256((__m256i *)(p->u[0] + 32 * i), ui);
            p->sc[0][i] = s2[0], p->sc[1][i] = s2[1], p->mn[0][i] = m2[0], p->mn[1][i] = m2[1];
        }
    }
    for (int64_t b = 0; b < nblk; b++) {
        lr_wblock *p = &wp[b];
        __m512 chunk[8]; /* chunk[c] lane i: row i's bytes 4c .. 4c + 3 */
        transpose16x8(p->u[0], chunk);
        for (int c = 0; c < 8; c++) _mm512_store_ps(p->u[c], chunk[c]);
    }
}

INLINE __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* The packed tile against activations j0 .. j0 + na - 1 (na compile-time): acc[j], lane i =
 * the output of row i for activation j0 + j. */
INLINE void tile_lr(int t, int na, int lo, int64_t nblk, const lr_wblock *wp, const kvp_qact *a, const lr_act *pk,
                    int j0, __m512 *acc) {
    const int os = off_shift(t), H = type_halves(t), mins = type_has_min(t);
    const int8_t *xq[8], *xl[8];
    const lr_act *pa[8];
    for (int j = 0; j < na; j++) {
        xq[j] = a->q + (size_t)(j0 + j) * a->n;
        xl[j] = lo ? a->lo + (size_t)(j0 + j) * a->n : NULL;
        pa[j] = pk + (size_t)(j0 + j) * nblk;
        acc[j] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nblk; b++) {
        const lr_wblock *p = &wp[b];
        __m512 tt[8];
        for (int h = 0; h < H; h++) {
            const int c0 = H == 2 ? 4 * h : 0, c1 = H == 2 ? c0 + 4 : 8;
            __m512i I[8], IL[8];
            for (int j = 0; j < na; j++) I[j] = IL[j] = _mm512_setzero_si512();
#pragma GCC unroll 8 /* rolled, GCC rotated the accumulators through copies each chunk */
            for (int c = c0; c < c1; c++) {
                const __m512i wv = _mm512_load_si512(p->u[c]);
                for (int j = 0; j < na; j++) {
                    I[j] = _mm512_dpbusd_epi32(I[j], wv, bcast4(xq[j] + b * QB + 4 * c));
                    if (lo) IL[j] = _mm512_dpbusd_epi32(IL[j], wv, bcast4(xl[j] + b * QB + 4 * c));
                }
            }
            const __m512 scv = _mm512_load_ps(p->sc[h]);
            for (int j = 0; j < na; j++) {
                __m512i Iv = lo ? _mm512_add_epi32(_mm512_slli_epi32(I[j], 8), IL[j]) : I[j];
                if (os >= 0) Iv = _mm512_sub_epi32(Iv, _mm512_set1_epi32((int32_t)((uint32_t)pa[j][b].sx[H == 2 ? h : 2] << os)));
                __m512 f = _mm512_cvtepi32_ps(Iv);
                tt[j] = h == 0 ? _mm512_mul_ps(scv, f) : _mm512_fmadd_ps(scv, f, tt[j]);
            }
        }
        for (int j = 0; j < na; j++) {
            if (mins)
                for (int h = 0; h < H; h++)
                    tt[j] = _mm512_fmadd_ps(_mm512_load_ps(p->mn[h]), _mm512_set1_ps(pa[j][b].sf[H == 2 ? h : 2]), tt[j]);
            acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(pa[j][b].dx), tt[j], acc[j]);
        }
    }
}

/* Activations per tile: every accumulator in a register (32 of them). */
INLINE int tile_acts(int t, int lo) { return lo ? (type_halves(t) == 2 ? 4 : 6) : 8; }

INLINE void qdot_gemm(int t, int lo, const uint8_t *w, size_t rb, int64_t n, int64_t r0, int64_t r1, const kvp_qact *a,
                      const lr_act *pk, lr_wblock *wp, float *const *out) {
    const int64_t nblk = n / QB;
    const int NA = tile_acts(t, lo);
    for (int64_t r = r0; r < r1; r += LR) {
        pack_rows(t, w, rb, nblk, r, r1, wp);
        const __mmask16 m = r1 - r >= LR ? (__mmask16)0xffff : (__mmask16)((1u << (r1 - r)) - 1);
        for (int j0 = 0; j0 < a->nb;) {
            const int left = a->nb - j0, k = left >= NA ? NA : left >= 4 ? 4 : left >= 2 ? 2 : 1;
            __m512 acc[8];
            if (k == NA) tile_lr(t, NA, lo, nblk, wp, a, pk, j0, acc);
            else if (k == 4) tile_lr(t, 4, lo, nblk, wp, a, pk, j0, acc);
            else if (k == 2) tile_lr(t, 2, lo, nblk, wp, a, pk, j0, acc);
            else tile_lr(t, 1, lo, nblk, wp, a, pk, j0, acc);
            for (int j = 0; j < k; j++) _mm512_mask_storeu_ps(out[j0 + j] + r, m, acc[j]);
            j0 += k;
        }
    }
}
#endif /* QD_512 */

/* ---- batches on AMX-INT8: 16 rows x 16 activations per tile ----------------------------------- *
 * One TDPBSSD gives a block's integer dots for 16 weight rows x 16 activations: A = the rows'
 * weights as signed bytes u - off (16 x 32; the pack subtracts the type's offset once per
 * weight, so the sums need no correction by the activations' sums: a shift, a subtraction and
 * their set-up per 16 sums fewer in the float steps), B = the activations' bytes in the VNNI
 * layout (k-quad r: activation j's bytes 4r..4r+3 at 4j; 8 x 64), C[row][act] the exact sums
 * I. Types with a scale per half take two K = 16 products per block. C is stored and read back
 * one row per vector (lane = activation) for the float steps, which follow the recipe pair by
 * pair, blocks in order. (bf16 tiles, TDPBF16PS, give the same sums as floats and save the
 * conversion too, but their tiles are twice the bytes: 20% slower at batch 64-128, Intel SPR.) */
#ifdef QD_AMX
#define AMX_MIN_ROWS 16 /* batches from this many activation rows take the AMX tiles */
typedef struct amx_act { /* 16 activations x one block */
    uint8_t x[8][64], xl[8][64];
    float dx[16];               /* d, or d / 256 with q8x2 */
    int32_t s[2][16], sl[2][16]; /* sums of q (and lo) over each half: types with mins */
} amx_act;

typedef struct amx_w { /* 16 rows x one block */
    int8_t w[16][32]; /* u - off */
    float sc[2][16], mn[2][16];
} amx_w;

typedef struct amx_cfg { /* LDTILECFG's 64-byte operand (palette 1) */
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

/* Sum of 16 signed bytes: unsigned sums of the bytes biased by 128 (psadbw), less 16 * 128. */
static inline int32_t sum16_i8(const int8_t *p) {
    __m128i v = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_set1_epi8((char)0x80));
    __m128i s = _mm_sad_epu8(v, _mm_setzero_si128());
    return _mm_cvtsi128_si32(s) + _mm_extract_epi16(s, 4) - 16 * 128;
}

static void pack_acts_amx(const kvp_qact *a, amx_act *pk) {
    int64_t nblk = a->n / QB;
    int ng = (a->nb + 15) / 16;
    memset(pk, 0, (size_t)ng * nblk * sizeof *pk);
    for (int j = 0; j < a->nb; j++) {
        const int8_t *q = a->q + (size_t)j * a->n, *l = a->lo ? a->lo + (size_t)j * a->n : NULL;
        const float *d = a->d + (size_t)j * nblk;
        int lane = j % 16;
        for (int64_t b = 0; b < nblk; b++) {
            amx_act *p = &pk[(size_t)(j / 16) * nblk + b];
            p->dx[lane] = l ? d[b] * (1.0f / 256.0f) : d[b];
            for (int r = 0; r < 8; r++) memcpy(&p->x[r][4 * lane], q + b * QB + 4 * r, 4); /* k-quad r */
            p->s[0][lane] = sum16_i8(q + b * QB), p->s[1][lane] = sum16_i8(q + b * QB + 16);
            if (l) {
                for (int r = 0; r < 8; r++) memcpy(&p->xl[r][4 * lane], l + b * QB + 4 * r, 4);
                p->sl[0][lane] = sum16_i8(l + b * QB), p->sl[1][lane] = sum16_i8(l + b * QB + 16);
            }
        }
    }
}

/* Row i's scales and mins of a block, only those the float steps read (amx_tile): storing all
 * four was a tenth of the kernel's time. */
INLINE void put_scales(amx_w *b, int i, int H, int mins, float sc0, float sc1, float mn0, float mn1) {
    b->sc[0][i] = sc0;
    if (H == 2) b->sc[1][i] = sc1;
    if (mins) {
        b->mn[0][i] = mn0;
        if (H == 2) b->mn[1][i] = mn1;
    }
}

/* pack_rows_amx for lane = block rows, a super-block at a time: vector i of lb_unpack holds
 * group i of every block, so its transpose holds each block's 32 quants in order; the scales
 * come as vectors (load_scales: load_block's floats). One gather and one scalar scale decode per
 * block were half the AMX kernel's time at batch 64. */
INLINE void pack_rows_amx_lb(int t, const uint8_t *w, size_t rb, int64_t nblk, int64_t r0, int64_t r1, amx_w *wp) {
    const size_t sb_bytes = lb_sb_bytes(t);
    const int H = type_halves(t), mins = type_has_min(t);
    const __m256i offv = _mm256_set1_epi8((char)type_off(t));
    for (int i = 0; i < 16; i++) {
        const int64_t r = r0 + i;
        for (int64_t b0 = 0; b0 < nblk; b0 += DC) {
            __m256i u[DC];
            __m256 c[DC], sc[2], mn[2];
            if (r < r1) {
                const uint8_t *row = w + (size_t)r * rb;
                lb_unpack(t, row + (size_t)(b0 / DC) * sb_bytes, u);
                load_scales(t, row, b0, DC, sc, mn); /* (H = 1: half 1's lanes unread) */
            } else {
                for (int k = 0; k < DC; k++) u[k] = offv; /* zero weights */
                sc[0] = sc[1] = mn[0] = mn[1] = _mm256_setzero_ps();
            }
            for (int k = 0; k < DC; k++) c[k] = _mm256_castsi256_ps(u[k]);
            __m256 cols[DC];
            transpose8(c, cols);
            _Alignas(32) float fs[4][DC];
            _mm256_store_ps(fs[0], sc[0]), _mm256_store_ps(fs[1], sc[1]);
            _mm256_store_ps(fs[2], mn[0]), _mm256_store_ps(fs[3], mn[1]);
            for (int k = 0; k < DC; k++) {
                amx_w *b = &wp[b0 + k];
                _mm256_storeu_si256((__m256i *)b->w[i], _mm256_sub_epi8(_mm256_castps_si256(cols[k]), offv));
                put_scales(b, i, H, mins, fs[0][k], fs[1][k], fs[2][k], fs[3][k]);
            }
        }
    }
}

/* Rows [r0, r0 + 16) (rows past r1 get zero weights, never written out). */
INLINE void pack_rows_amx(int t, const uint8_t *w, size_t rb, int64_t nblk, int64_t r0, int64_t r1, amx_w *wp) {
    if (is_lb(t)) {
        pack_rows_amx_lb(t, w, rb, nblk, r0, r1, wp);
        return;
    }
    const int H = type_halves(t), mins = type_has_min(t);
    const __m256i offv = _mm256_set1_epi8((char)type_off(t));
    for (int i = 0; i < 16; i++) {
        int64_t r = r0 + i;
        for (int64_t b = 0; b < nblk; b++) {
            __m256i u = offv; /* zero weights */
            float sc[2] = {0, 0}, mn[2] = {0, 0};
            if (r < r1) load_block(t, w + (size_t)r * rb, b, &u, sc, mn);
            _mm256_storeu_si256((__m256i *)wp[b].w[i], _mm256_sub_epi8(u, offv));
            put_scales(&wp[b], i, H, mins, sc[0], sc[1], mn[0], mn[1]);
        }
    }
}

/* The integer sums of half h (or of the whole block, H = 1), lane = activation: (I << 8) + IL
 * with q8x2, I with q8 - the same integers the other kernels form. */
INLINE __m512i amx_int(int lo, const int32_t *c, const int32_t *cl) {
    __m512i I = _mm512_load_si512(c);
    return lo ? _mm512_add_epi32(_mm512_slli_epi32(I, 8), _mm512_load_si512(cl)) : I;
}

/* The integer dots of a block for the tile, into tile registers: H = 1 into C tile 0 (and 1,
 * the lo plane), H = 2 the halves into 0 / 2 (lo: 1 / 3). */
INLINE void amx_block_issue(int H, int lo, const amx_w *W, const amx_act *P) {
    if (H == 1) {
        _tile_loadd(4, W->w, 32);
        _tile_loadd(6, P->x, 64);
        _tile_zero(0);
        _tile_dpbssd(0, 4, 6);
        if (lo) {
            _tile_loadd(7, P->xl, 64);
            _tile_zero(1);
            _tile_dpbssd(1, 4, 7);
        }
        return;
    }
    _tile_loadd(4, &W->w[0][0], 32); /* A: w[16h..16h+15] of each row; B: k-quads 4h..4h+3 */
    _tile_loadd(5, &W->w[0][16], 32);
    _tile_loadd(6, P->x[0], 64);
    _tile_loadd(7, P->x[4], 64);
    _tile_zero(0);
    _tile_zero(2);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(2, 5, 7);
    if (lo) {
        _tile_loadd(6, P->xl[0], 64);
        _tile_loadd(7, P->xl[4], 64);
        _tile_zero(1);
        _tile_zero(3);
        _tile_dpbssd(1, 4, 6);
        _tile_dpbssd(3, 5, 7);
    }
}

/* ... and from the tile registers into c (c[k] = C tile k). */
INLINE void amx_block_store(int H, int lo, int32_t c[4][16][16]) {
    _tile_stored(0, c[0], 64);
    if (lo) _tile_stored(1, c[1], 64);
    if (H == 2) {
        _tile_stored(2, c[2], 64);
        if (lo) _tile_stored(3, c[3], 64);
    }
}

/* One row group (16 rows) x one activation group (16) over every block, into acc[row]. The
 * tile products run two blocks ahead of the float steps: block b + 2's while block b's float
 * steps read the sums block b + 1's iteration stored (a vector load of a tile store just made
 * waits for it to reach the cache). */
INLINE void amx_tile(int t, int lo, int64_t nblk, const amx_w *wp, const amx_act *pk, __m512 acc[16]) {
    const int H = type_halves(t), mins = type_has_min(t);
    _Alignas(64) int32_t c2[2][4][16][16];
    __m512 ac[16];
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) ac[m] = _mm512_setzero_ps();
    if (nblk > 0) amx_block_issue(H, lo, &wp[0], &pk[0]), amx_block_store(H, lo, c2[0]);
    if (nblk > 1) amx_block_issue(H, lo, &wp[1], &pk[1]);
    for (int64_t b = 0; b < nblk; b++) {
        const amx_w *W = &wp[b];
        const amx_act *P = &pk[b];
        if (b + 1 < nblk) amx_block_store(H, lo, c2[(b + 1) & 1]); /* read a block later: loads of */
        if (b + 2 < nblk) amx_block_issue(H, lo, &wp[b + 2], &pk[b + 2]); /* fresh tile stores stall */
        int32_t(*cb)[16][16] = c2[b & 1];
        /* types with mins: the activations' sums S per half (whole block, H = 1) as floats */
        __m512 sv[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int h = 0; h < H && mins; h++) {
            __m512i sx = _mm512_loadu_si512(P->s[h]), sl = _mm512_loadu_si512(P->sl[h]);
            if (H == 1) {
                sx = _mm512_add_epi32(sx, _mm512_loadu_si512(P->s[1]));
                sl = _mm512_add_epi32(sl, _mm512_loadu_si512(P->sl[1]));
            }
            sv[h] = _mm512_cvtepi32_ps(lo ? _mm512_add_epi32(_mm512_slli_epi32(sx, 8), sl) : sx);
        }
        const __m512 dxv = _mm512_loadu_ps(P->dx);
#pragma GCC unroll 16
        for (int m = 0; m < 16; m++) {
            __m512 tt = _mm512_mul_ps(_mm512_set1_ps(W->sc[0][m]), _mm512_cvtepi32_ps(amx_int(lo, cb[0][m], cb[1][m])));
            if (H == 2) tt = _mm512_fmadd_ps(_mm512_set1_ps(W->sc[1][m]), _mm512_cvtepi32_ps(amx_int(lo, cb[2][m], cb[3][m])), tt);
            if (mins) {
                tt = _mm512_fmadd_ps(_mm512_set1_ps(W->mn[0][m]), sv[0], tt);
                if (H == 2) tt = _mm512_fmadd_ps(_mm512_set1_ps(W->mn[1][m]), sv[1], tt);
            }
            ac[m] = _mm512_fmadd_ps(dxv, tt, ac[m]);
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < 16; m++) acc[m] = ac[m];
}

INLINE void qdot_amx(int t, int lo, const uint8_t *w, size_t rb, int64_t n, int64_t r0, int64_t r1, const kvp_qact *a,
                     const amx_act *pk, amx_w *wp, float *const *out) {
    int64_t nblk = n / QB;
    int ng = (a->nb + 15) / 16, H = type_halves(t);
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 4; i++) cfg.rows[i] = 16, cfg.colsb[i] = 64;         /* C: 16 rows x 16 int32 */
    for (int i = 4; i < 6; i++) cfg.rows[i] = 16, cfg.colsb[i] = H == 2 ? 16 : 32; /* A: 16 rows x K bytes */
    for (int i = 6; i < 8; i++) cfg.rows[i] = H == 2 ? 4 : 8, cfg.colsb[i] = 64;    /* B: K/4 rows x 64 bytes */
    _tile_loadconfig(&cfg);
    for (int64_t r = r0; r < r1; r += 16) {
        pack_rows_amx(t, w, rb, nblk, r, r1, wp);
        /* The next row group's weights into L2 while this one's tiles run, a share per
         * activation group: its 16 rows are 16 streams from memory, which the pack otherwise
         * waits for (6% at batch 128, Intel SPR). */
        const int64_t next_rows = r1 - (r + 16) < 16 ? r1 - (r + 16) : 16;
        const size_t lines = next_rows > 0 ? ((size_t)next_rows * rb + 63) / 64 : 0;
        const char *next = lines ? (const char *)(w + (size_t)(r + 16) * rb) : NULL;
        for (int g = 0; g < ng; g++) {
            for (size_t l = lines * g / ng; l < lines * (g + 1) / ng; l++) _mm_prefetch(next + 64 * l, _MM_HINT_T1);
            __m512 acc[16];
            amx_tile(t, lo, nblk, wp, pk + (size_t)g * nblk, acc);
            for (int m = 0; m < 16 && r + m < r1; m++) {
                float v[16];
                _mm512_storeu_ps(v, acc[m]);
                for (int j = 0; j < 16 && 16 * g + j < a->nb; j++) out[16 * g + j][r + m] = v[j];
            }
        }
    }
    _tile_release();
}
#define QDOT_AMX(T, LO) qdot_amx(T, LO, w, row_bytes, n, r0, r1, a, apk, awp, out)
#define AMX_FN(T, S)                                                                                                   \
    static __attribute__((noinline)) void amx_rows_##S(const uint8_t *w, size_t row_bytes, int64_t n, int64_t r0,     \
                                                       int64_t r1, const kvp_qact *a, const amx_act *apk, amx_w *awp,  \
                                                       float *const *out) {                                            \
        if (a->lo) QDOT_AMX(T, 1);                                                                                     \
        else QDOT_AMX(T, 0);                                                                                           \
    }
#define AMX_CALL(T, S)                                                                                                 \
    case T: amx_rows_##S(w, row_bytes, n, r0, r1, a, apk, awp, out); break;
#endif /* QD_AMX */

/* One instance per (type, q8 or q8x2): compile-time constants throughout, and one function per
 * type (noinline): inlined all into qd_rows they made a function too large for GCC's variable
 * tracking (-g), and one sanitizer build of one kernel file took over ten minutes. */
#ifdef QD_512
#define QDOT_GEMM(T, LO) qdot_gemm(T, LO, w, row_bytes, n, r0, r1, a, pk, wp, out)
#else
#define QDOT_GEMM(T, LO) (void)0
#endif
#define QDOT_FN(T, S)                                                                                                  \
    static __attribute__((noinline)) void qdot_rows_##S(const uint8_t *w, size_t row_bytes, int64_t n, int64_t r0,    \
                                                        int64_t r1, const kvp_qact *a, const void *pk, void *wp,       \
                                                        const wbuf *wb, float *const *out) {                           \
        (void)wp;                                                                                                      \
        if (pk) {                                                                                                      \
            if (a->lo) QDOT_GEMM(T, 1);                                                                                \
            else QDOT_GEMM(T, 0);                                                                                      \
        } else if (a->lo) { /* wide batches without a wbuf (no memory): qdot_small reads the rows */                \
            if (wb || a->nb > SRN) qdot_small(T, 1, w, row_bytes, n, r0, r1, a, wb, out);                              \
            else if (a->nb == 1) qdot_decode(T, 1, 1, w, row_bytes, n, r0, r1, a, out);                                   \
            else qdot_decode(T, 1, 0, w, row_bytes, n, r0, r1, a, out);                                                   \
        } else {                                                                                                       \
            if (wb || a->nb > SRN) qdot_small(T, 0, w, row_bytes, n, r0, r1, a, wb, out);                              \
            else if (a->nb == 1) qdot_decode(T, 0, 1, w, row_bytes, n, r0, r1, a, out);                                   \
            else qdot_decode(T, 0, 0, w, row_bytes, n, r0, r1, a, out);                                                   \
        }                                                                                                              \
    }
#define QDOT_CALL(T, S)                                                                                                \
    case T: qdot_rows_##S(w, row_bytes, n, r0, r1, a, pk, wp, wb, out); break;
QDOT_TYPES(QDOT_FN)
#ifdef QD_AMX
QDOT_TYPES(AMX_FN)
#endif
#endif /* QD_AVX2 */

static int qd_row_multiple(void) {
#if defined(QD_AMX)
    return 16; /* AMX row groups */
#elif defined(QD_AVX2)
    return DR;
#else
    return 1;
#endif
}

static size_t qd_pack_bytes(const kvp_qact *a) {
#ifdef QD_AMX
    if (a->nb >= AMX_MIN_ROWS) return (size_t)((a->nb + 15) / 16) * (size_t)(a->n / QB) * sizeof(amx_act);
#endif
#ifdef QD_512
    return a->nb >= PACK_MIN_ROWS ? (size_t)a->nb * (size_t)(a->n / QB) * sizeof(lr_act) : 0;
#else
    (void)a;
    return 0;
#endif
}

static void qd_pack(kvp_qact *a, void *buf) {
#ifdef QD_AMX
    if (a->nb >= AMX_MIN_ROWS) {
        pack_acts_amx(a, buf);
        a->pk = buf;
        return;
    }
#endif
#ifdef QD_512
    if (qd_pack_bytes(a)) {
        pack_acts(a, buf);
        a->pk = buf;
        return;
    }
#endif
    (void)buf;
    a->pk = NULL;
}

static void qd_rows(enum kvp_type type, const void *weights, size_t row_bytes, int64_t r0, int64_t r1,
                   const kvp_qact *a, float *const *out) {
    const uint8_t *w = weights;
    int64_t n = a->n;
#ifdef QD_AVX2
    int64_t nblk = n / QB;
    void *mem = NULL, *amem = NULL;
    wbuf buf = {0}, *wb = NULL;
    const void *pk = NULL;
    void *wp = NULL;
#ifdef QD_AMX
    kvp_qact unpacked;
    /* Wide batches take the AMX tiles (activations packed by the caller, or here); without
     * memory for them, the lane = row tiles below give the same bits. */
    if (a->nb >= AMX_MIN_ROWS) {
        const amx_act *apk = a->pk;
        amx_w *awp = aligned_alloc(64, (size_t)nblk * sizeof(amx_w));
        if (awp && !apk && (amem = malloc(qd_pack_bytes(a)))) pack_acts_amx(a, amem), apk = amem;
        if (awp && apk) {
            switch (type) {
                QDOT_TYPES(AMX_CALL)
            default:
                break;
            }
            free(awp);
            free(amem);
            return;
        }
        free(awp);
        free(amem);
        amem = NULL;
        unpacked = *a; /* its packing is the AMX one */
        unpacked.pk = NULL;
        a = &unpacked;
    }
#endif
#ifdef QD_512
    /* Batches take the lane = row tiles (activations packed by the caller, or here). */
    size_t pb = qd_pack_bytes(a);
    if (pb && (wp = mem = aligned_alloc(64, (size_t)nblk * sizeof(lr_wblock)))) {
        if (!(pk = a->pk) && (amem = malloc(pb))) pack_acts(a, amem), pk = amem;
        if (!pk) wp = NULL;
    }
#endif
    /* Otherwise batches wider than one tile unpack each row tile once for all of them. Without
     * memory for either, the same tiles read the rows directly: the same bits. */
    if (!pk && a->nb > SRN) {
        free(mem);
        if ((mem = aligned_alloc(32, (size_t)RM * nblk * (32 + 16)))) {
            buf = (wbuf){(__m256i *)mem, (float *)((__m256i *)mem + RM * nblk), (float *)((__m256i *)mem + RM * nblk) + 2 * RM * nblk, nblk};
            wb = &buf;
        }
    }
    (void)wp;
    switch (type) {
        QDOT_TYPES(QDOT_CALL)
    default:
        break;
    }
    free(mem);
    free(amem);
#else
    qdot_portable(type, w, row_bytes, n, r0, r1, a, out);
#endif
}

const kvp_qkernels QD_TABLE = {QD_ISA, qd_quantize_row, qd_quantize_row2, qd_pack_bytes, qd_pack, qd_rows, qd_row_multiple};
