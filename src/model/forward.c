/* The transformer forward pass over a batch of rows (token, position, cache).
 *
 * One function per stage, in data-flow order: embed -> per layer [norm, QKV, q/k-norm, RoPE,
 * store K/V, attention, output projection, (post-norm), residual, norm, gated FFN,
 * (post-norm), residual] -> final norm -> logits. Math follows Hugging Face transformers in
 * fp32 (see docs/architecture notes in README); weights are read once per batch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../kv/kv_impl.h"
#include "../tensor/vmath.h"
#include "../util/pool.h"
#include "model_impl.h"

struct kvp_ctx {
    const kvp_model *m;
    kvp_pool *pool;
    int n_threads;
    int max_batch;
    kvp_precision prec;
    int emulate;
    const kvp_qkernels *qk; /* the integer kernels' variant (q8, q8x2) */
    /* the current matmul input: qin.nb rows of qin.n floats, in_ld apart, and (q8, q8x2) the
     * same rows quantized, once for all the matmuls that read them */
    const float *in;
    int64_t in_ld;
    kvp_qact qin;
    float *in_rounded;   /* emulate: the quantized rows dequantized, [max_batch][widest] */
    void *qin_pack;      /* qin packed for the batch kernels (kvp_qact_pack), once per input */
    /* activations, [max_batch][width] */
    float *x, *xn, *q, *k, *v, *att, *ffa, *ffb, *tmp;
    float *rope_inv[2];  /* [n_rot/2] inverse frequencies: [0] global layers, [1] sliding-window */
    float *rope_cs;      /* [max_batch][2][n_rot]: cos (n_rot/2) then sin (n_rot/2) per kind */
    float *scores;       /* [n_threads][n_head][scores_cap] */
    int scores_cap;
    /* rows of caches that keep attention scores: each (row, KV head) task's probabilities
     * summed over its query heads, [max_batch][n_head_kv][obs_cap], from slot obs_s0[..] */
    float *obs;
    int *obs_s0, *obs_n;
    int obs_cap;
    float *kvbuf;        /* [n_threads][max(head_dim, head_dim_v)] f16 -> f32 staging */
    float *dotbuf;       /* [n_threads][max_batch] */
    float **outp;        /* [max_batch] output row pointers for matmul */
    kvp_row *rows;       /* [max_batch] rows built by kvp_decode */
};

/* ---- context ----------------------------------------------------------------------------- */

static float *alloc_f(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static void init_rope(kvp_ctx *c) {
    const kvp_hparams *hp = &c->m->hp;
    int half = hp->n_rot / 2;
    for (int kind = 0; kind < 2; kind++) {
        double base = kind ? hp->rope_base_swa : hp->rope_base;
        float scale = kind ? 1.0f : hp->rope_freq_scale;
        for (int i = 0; i < half; i++) {
            float inv = (float)pow(base, -2.0 * i / hp->n_rot);
            if (c->m->rope_freqs) inv = inv / c->m->rope_freqs[i];
            c->rope_inv[kind][i] = inv * scale;
        }
    }
}

static const char *const PREC_NAMES[] = {"q8", "q8x2", "f32"};

const char *kvp_precision_name(kvp_precision p) { return (unsigned)p < 3 ? PREC_NAMES[p] : "?"; }

int kvp_precision_from_name(const char *name, kvp_precision *out) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, PREC_NAMES[i])) {
            *out = (kvp_precision)i;
            return 0;
        }
    return -1;
}

kvp_ctx *kvp_ctx_new(const kvp_model *m, const kvp_ctx_params *p, kvp_error *err) {
    kvp_ctx_params def = {0, 0, KVP_PREC_Q8, 0, NULL};
    if (!p) p = &def;
    if ((unsigned)p->precision > KVP_PREC_F32) {
        kvp_fail(err, KVP_E_INVALID, "execution context: unknown precision %d", (int)p->precision);
        return NULL;
    }
    kvp_ctx *c = calloc(1, sizeof *c);
    if (!c) goto oom;
    const kvp_hparams *hp = &m->hp;
    c->m = m;
    c->n_threads = p->n_threads > 0 ? p->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (c->n_threads < 1) c->n_threads = 1;
    if (c->n_threads > 256) c->n_threads = 256;
    c->max_batch = p->max_batch > 0 ? p->max_batch : 64;
    c->prec = p->precision;
    c->emulate = c->prec != KVP_PREC_F32 && p->emulate;
    if (!(c->qk = kvp_qkernels_select(p->kernels, err))) {
        free(c);
        return NULL;
    }
    size_t B = (size_t)c->max_batch, T = (size_t)c->n_threads;
    size_t qw = (size_t)hp->n_head * hp->head_dim, kw = (size_t)hp->n_head_kv * hp->head_dim,
           vw = (size_t)hp->n_head_kv * hp->head_dim_v, aw = (size_t)hp->n_head * hp->head_dim_v;
    size_t hd = (size_t)(hp->head_dim > hp->head_dim_v ? hp->head_dim : hp->head_dim_v);
    c->x = alloc_f(B * hp->n_embd);
    c->xn = alloc_f(B * hp->n_embd);
    c->tmp = alloc_f(B * hp->n_embd);
    c->q = alloc_f(B * qw);
    c->k = alloc_f(B * kw);
    c->v = alloc_f(B * vw);
    c->att = alloc_f(B * aw);
    c->ffa = alloc_f(B * hp->n_ff);
    c->ffb = alloc_f(B * hp->n_ff);
    c->rope_inv[0] = alloc_f((size_t)hp->n_rot / 2);
    c->rope_inv[1] = alloc_f((size_t)hp->n_rot / 2);
    c->rope_cs = alloc_f(B * 2 * hp->n_rot);
    c->kvbuf = alloc_f(T * 2 * hd);
    c->dotbuf = alloc_f(T * B);
    c->outp = calloc(B, sizeof *c->outp);
    c->rows = calloc(B, sizeof *c->rows);
    size_t widest = (size_t)hp->n_embd;
    if ((size_t)hp->n_ff > widest) widest = (size_t)hp->n_ff;
    if (aw > widest) widest = aw;
    c->qin.q = malloc(B * widest);
    c->qin.d = alloc_f(B * (widest / 32 + 1));
    if (!c->qin.q || !c->qin.d) goto oom;
    if (c->prec == KVP_PREC_Q8X2 && !(c->qin.lo = malloc(B * widest))) goto oom;
    kvp_qact widest_in = {(int64_t)(widest + 31) / 32 * 32, c->max_batch, NULL, NULL, NULL, NULL};
    size_t pack = c->prec == KVP_PREC_F32 ? 0 : c->qk->pack_bytes(&widest_in);
    if (pack && !(c->qin_pack = aligned_alloc(64, (pack + 63) / 64 * 64))) goto oom;
    if (c->emulate && !(c->in_rounded = alloc_f(B * widest))) goto oom;
    if (!c->x || !c->xn || !c->tmp || !c->q || !c->k || !c->v || !c->att || !c->ffa || !c->ffb ||
        !c->rope_inv[0] || !c->rope_inv[1] || !c->rope_cs || !c->kvbuf || !c->dotbuf || !c->outp || !c->rows)
        goto oom;
    if (!(c->pool = kvp_pool_new(c->n_threads))) goto oom;
    init_rope(c);
    return c;
oom:
    kvp_ctx_free(c);
    kvp_fail(err, KVP_E_NOMEM, "out of memory creating an execution context");
    return NULL;
}

void kvp_ctx_free(kvp_ctx *c) {
    if (!c) return;
    kvp_pool_free(c->pool);
    float *bufs[] = {c->x, c->xn, c->tmp, c->q, c->k, c->v, c->att, c->ffa, c->ffb,
                     c->rope_inv[0], c->rope_inv[1], c->rope_cs, c->scores, c->kvbuf, c->dotbuf, c->in_rounded,
                     c->obs};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(c->outp);
    free(c->rows);
    free(c->obs_s0);
    free(c->obs_n);
    free(c->qin.q);
    free(c->qin.d);
    free(c->qin.lo);
    free(c->qin_pack);
    free(c);
}

int kvp_ctx_threads(const kvp_ctx *c) { return c->n_threads; }
int kvp_ctx_max_batch(const kvp_ctx *c) { return c->max_batch; }
kvp_precision kvp_ctx_precision(const kvp_ctx *c) { return c->prec; }
const char *kvp_ctx_kernels(const kvp_ctx *c) { return c->qk->name; }

/* ---- matrix multiply: out[b][r] = W[r] . in[b] ------------------------------------------- */

/* Make nb rows of n floats (ld apart) the input of the following matmuls. The q8 paths
 * quantize them here, once for every weight that reads them (q, k and v; gate and up). */
static void for_each_row(kvp_ctx *c, const kvp_row *rows, int n, int il, void (*fn)(kvp_ctx *, const kvp_row *, int, int));

static void row_quantize(kvp_ctx *c, const kvp_row *rows, int b, int il) {
    (void)rows, (void)il;
    int64_t n = c->qin.n;
    const float *x = c->in + b * c->in_ld;
    int8_t *q = c->qin.q + (size_t)b * n, *lo = c->qin.lo ? c->qin.lo + (size_t)b * n : NULL;
    float *d = c->qin.d + (size_t)b * (n / 32);
    if (lo) c->qk->quantize_row2(x, n, q, d, lo);
    else c->qk->quantize_row(x, n, q, d);
    if (c->emulate) /* x ~ d * (q + lo / 256) */
        for (int64_t i = 0; i < n; i++)
            c->in_rounded[(size_t)b * n + i] =
                d[i / 32] * (lo ? (float)(256 * q[i] + lo[i]) * (1.0f / 256.0f) : (float)q[i]);
}

static void set_input(kvp_ctx *c, const float *in, int64_t ld, int nb, int64_t n) {
    c->in = in;
    c->in_ld = ld;
    c->qin.n = n;
    c->qin.nb = nb;
    c->qin.pk = NULL;
    if (c->prec == KVP_PREC_F32 || n % 32) return;
    for_each_row(c, NULL, nb, 0, row_quantize);
    if (c->qin_pack && !c->emulate) c->qk->pack(&c->qin, c->qin_pack);
}

/* Quantized weights take the integer kernels unless the context is f32 (or emulates them);
 * float weights dequantize row chunks and dot in f32. */
static int use_qdot(const kvp_ctx *c, const kvp_weight *w) {
    return c->prec != KVP_PREC_F32 && !c->emulate && kvp_qdot_supported(w->type);
}

typedef struct matmul_job {
    kvp_ctx *c;
    const kvp_weight *w;
    float *const *out;
    int64_t rows_per_task;
} matmul_job;

static void matmul_task(void *arg, int task, int thread) {
    const matmul_job *j = arg;
    kvp_ctx *c = j->c;
    const kvp_weight *w = j->w;
    int64_t r0 = (int64_t)task * j->rows_per_task, r1 = r0 + j->rows_per_task;
    if (r1 > w->n_out) r1 = w->n_out;
    if (use_qdot(c, w)) {
        c->qk->rows(w->type, w->data, w->row_bytes, r0, r1, &c->qin, j->out);
        return;
    }
    int nb = c->qin.nb;
    const float *in = c->in;
    int64_t ld = c->in_ld;
    if (c->emulate && kvp_qdot_supported(w->type)) in = c->in_rounded, ld = c->qin.n;
    float *dots = c->dotbuf + (size_t)thread * c->max_batch;
    for (int64_t r = r0; r < r1; r++) {
        kvp_dot_row_batch(w->type, w->data + r * w->row_bytes, in, ld, nb, w->n_in, dots);
        for (int b = 0; b < nb; b++) j->out[b][r] = dots[b];
    }
}

/* out[b] for b < the input's row count. Threads claim tasks as they free up, so the rows are
 * split into about 8 tasks per thread, and a batch of 16 or more rows into 32: a batch's task is
 * long (hundreds of ms on the LM head), and cores of unequal speed (a guest's second vCPU was
 * seen running AMX at under half the rate of the first) otherwise wait on the slow one's last task.
 * The split never changes a result. */
static void matmul(kvp_ctx *c, const kvp_weight *w, float *const *out) {
    int64_t target = (int64_t)c->n_threads * (c->qin.nb >= 16 ? 32 : 8), mult = c->qk->row_multiple();
    int64_t rpt = (w->n_out + target - 1) / target;
    if (rpt < 4) rpt = 4;
    rpt = (rpt + mult - 1) / mult * mult;
    matmul_job j = {c, w, out, rpt};
    kvp_pool_run(c->pool, matmul_task, &j, (int)((w->n_out + rpt - 1) / rpt));
}

/* Matmul into a dense [nb][n_out] buffer. */
static void matmul_dense(kvp_ctx *c, const kvp_weight *w, float *out) {
    for (int b = 0; b < c->qin.nb; b++) c->outp[b] = out + (size_t)b * w->n_out;
    matmul(c, w, c->outp);
}

/* ---- elementwise pieces ------------------------------------------------------------------ */

/* y = x / sqrt(mean(x^2) + eps) * w (GGUF norm weights already include Gemma's +1). */
static void rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++) y[i] = (x[i] * r) * w[i];
}

/* Rotate one head in place. cs holds cos[half] then sin[half]. */
static void rope_head(float *x, const float *cs, int n_rot, int neox) {
    int half = n_rot / 2;
    const float *cs_cos = cs, *cs_sin = cs + half;
    for (int i = 0; i < half; i++) {
        int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b], co = cs_cos[i], si = cs_sin[i];
        x[a] = x0 * co - x1 * si;
        x[b] = x1 * co + x0 * si;
    }
}


/* ---- attention --------------------------------------------------------------------------- */

/* q_h . k for nh query heads (hd floats each, contiguous) against one key, the key read once.
 * Fixed summation order (deterministic); nh is a compile-time constant in each instance. */
#define MAX_GROUP 8
#if defined(__AVX512F__)
#include <immintrin.h>
#define DOT_W 16
static inline __attribute__((always_inline)) void group_dots_n(int nh, const float *q, int hd, const float *k, float *out) {
    __m512 acc[MAX_GROUP];
    for (int h = 0; h < nh; h++) acc[h] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 16) {
        __m512 kv = _mm512_loadu_ps(k + d);
        for (int h = 0; h < nh; h++) acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)h * hd + d), kv, acc[h]);
    }
    for (int h = 0; h < nh; h++) out[h] = _mm512_reduce_add_ps(acc[h]);
}
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) /* f16 value slots */
#include <immintrin.h>
#define DOT_W 8
static inline __attribute__((always_inline)) void group_dots_n(int nh, const float *q, int hd, const float *k, float *out) {
    __m256 acc[MAX_GROUP];
    for (int h = 0; h < nh; h++) acc[h] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
        __m256 kv = _mm256_loadu_ps(k + d);
        for (int h = 0; h < nh; h++) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + (size_t)h * hd + d), kv, acc[h]);
    }
    for (int h = 0; h < nh; h++) {
        __m128 x = _mm_add_ps(_mm256_castps256_ps128(acc[h]), _mm256_extractf128_ps(acc[h], 1));
        x = _mm_add_ps(x, _mm_movehl_ps(x, x));
        out[h] = _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
    }
}
#endif

#if defined(__AVX512F__)
/* Lane k = _mm512_reduce_add_ps(a[k]) bit for bit: GCC's tree for it (lane i + lane i + 8, then
 * i + 4, i + 2, i + 1) done for 16 vectors at once, by shuffles that pair the same lanes. A
 * reduction per key and head was the larger part of attention's dot products. */
static inline __attribute__((always_inline)) __m512 reduce_add16(const __m512 a[16]) {
    __m512 b[8], c[4], d[2];
    for (int i = 0; i < 8; i++) /* [a[2i] 256-bit halves summed | a[2i + 1]'s] */
        b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++) /* 128-bit chunk j: key 4i + j, its two 128-bit halves summed */
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++) /* chunk j: lanes 0,1 key 8i + j, lanes 2,3 key 8i + 4 + j (t0 + t2, t1 + t3) */
        d[i] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0x44), _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0xEE));
    /* chunk j: keys j, 4 + j, 8 + j, 12 + j; then each key to its own lane */
    __m512 r = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

/* scores[h * ldo + k] = scale * (q_h . key k) for the nk <= 16 keys of one page (f32, hd floats
 * apart), the same floats as group_dots key by key: the same FMAs in the same order, the same
 * reduction tree. Keys past nk repeat the last one (no read past the slots in use). */
static void page_dots(const float *q, int nh, int hd, const float *k0, int nk, float scale, float *scores, size_t ldo) {
    const __mmask16 keep = (__mmask16)((1u << nk) - 1);
    const float *kp[16];
    for (int j = 0; j < 16; j++) kp[j] = k0 + (size_t)(j < nk ? j : nk - 1) * hd;
    for (int h = 0; h < nh; h++) {
        const float *qh = q + (size_t)h * hd;
        __m512 acc[16];
        for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
        for (int d = 0; d < hd; d += 16) {
            __m512 qv = _mm512_loadu_ps(qh + d);
            for (int j = 0; j < 16; j++) acc[j] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(kp[j] + d), acc[j]);
        }
        _mm512_mask_storeu_ps(scores + (size_t)h * ldo, keep, _mm512_mul_ps(reduce_add16(acc), _mm512_set1_ps(scale)));
    }
}
#endif

/* 1 if done (else the caller falls back to one kvp_dot_f32 per head). */
static int group_dots(const float *q, int nh, int hd, const float *k, float *out) {
#ifdef DOT_W
    if (hd % DOT_W) return 0;
    switch (nh) {
    case 1: group_dots_n(1, q, hd, k, out); return 1;
    case 2: group_dots_n(2, q, hd, k, out); return 1;
    case 3: group_dots_n(3, q, hd, k, out); return 1;
    case 4: group_dots_n(4, q, hd, k, out); return 1;
    case 5: group_dots_n(5, q, hd, k, out); return 1;
    case 6: group_dots_n(6, q, hd, k, out); return 1;
    case 7: group_dots_n(7, q, hd, k, out); return 1;
    case 8: group_dots_n(8, q, hd, k, out); return 1;
    }
#endif
    (void)q, (void)nh, (void)hd, (void)k, (void)out;
    return 0;
}

/* out_h (+)= sum_p w_h[p] * v_p for nh heads sharing the values (hdv floats per slot, f32 or
 * f16 slots `stride` bytes apart from v0, np slots, weights w[h * ws + p]); out is overwritten,
 * or added to when `acc` (the next page of slots: the sums continue in the same order, so a
 * split into pages gives the same floats). Each value chunk is read once for all heads and the
 * sums stay in registers across slots. Returns 0 where there is no vector path (the caller
 * does it element by element). */
#ifdef DOT_W
#if DOT_W == 16
typedef __m512 vfl;
#define V_ZERO _mm512_setzero_ps
#define V_LOAD_F32(p) _mm512_loadu_ps(p)
#define V_LOAD_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_SET1 _mm512_set1_ps
#define V_ADD _mm512_add_ps
#define V_STORE _mm512_storeu_ps
#else
typedef __m256 vfl;
#define V_ZERO _mm256_setzero_ps
#define V_LOAD_F32(p) _mm256_loadu_ps(p)
#define V_LOAD_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_SET1 _mm256_set1_ps
#define V_ADD _mm256_add_ps
#define V_STORE _mm256_storeu_ps
#endif
/* `regs` vectors of the output per head stay in registers across all positions: one pass over
 * the values when nh * hdv fits, a few otherwise. */
static inline __attribute__((always_inline)) void group_axpy_n(int nh, int regs, int f16, const char *v0, size_t stride,
                                                              int hdv, const float *w, size_t ws, int np, int add,
                                                              float *out) {
    for (int d = 0; d < hdv; d += regs * DOT_W) {
        vfl acc[MAX_GROUP][16];
        for (int h = 0; h < nh; h++)
            for (int k = 0; k < regs; k++) acc[h][k] = add ? V_LOAD_F32(out + (size_t)h * hdv + d + k * DOT_W) : V_ZERO();
        for (int p = 0; p < np; p++) {
            const char *slot = v0 + (size_t)p * stride;
            vfl v[16];
            for (int k = 0; k < regs; k++)
                v[k] = f16 ? V_LOAD_F16((const uint16_t *)slot + d + k * DOT_W) : V_LOAD_F32((const float *)slot + d + k * DOT_W);
            for (int h = 0; h < nh; h++) {
                vfl wh = V_SET1(w[(size_t)h * ws + p]);
                for (int k = 0; k < regs; k++) acc[h][k] = V_FMA(wh, v[k], acc[h][k]);
            }
        }
        for (int h = 0; h < nh; h++)
            for (int k = 0; k < regs; k++) V_STORE(out + (size_t)h * hdv + d + k * DOT_W, acc[h][k]);
    }
}

static inline __attribute__((always_inline)) void group_axpy_r(int nh, int f16, const char *v0, size_t stride, int hdv,
                                                              const float *w, size_t ws, int np, int add, float *out) {
    int regs = 16 / nh; /* at most 16 accumulators (+ 16 values) */
    regs = regs >= 16 ? 16 : regs >= 8 ? 8 : regs >= 4 ? 4 : regs >= 2 ? 2 : 1;
    while (hdv % (regs * DOT_W)) regs /= 2;
    switch (regs) {
    case 16: group_axpy_n(nh, 16, f16, v0, stride, hdv, w, ws, np, add, out); break;
    case 8: group_axpy_n(nh, 8, f16, v0, stride, hdv, w, ws, np, add, out); break;
    case 4: group_axpy_n(nh, 4, f16, v0, stride, hdv, w, ws, np, add, out); break;
    case 2: group_axpy_n(nh, 2, f16, v0, stride, hdv, w, ws, np, add, out); break;
    default: group_axpy_n(nh, 1, f16, v0, stride, hdv, w, ws, np, add, out); break;
    }
}
#endif

static int group_axpy(int nh, int f16, const char *v0, size_t stride, int hdv, const float *w, size_t ws, int np,
                      int add, float *out) {
#ifdef DOT_W
    if (hdv % DOT_W || nh > MAX_GROUP) return 0;
#if !defined(__F16C__)
    if (f16) return 0;
#endif
#define AXPY_CASE(N)                                                                                                   \
    case N: {                                                                                                          \
        if (f16) group_axpy_r(N, 1, v0, stride, hdv, w, ws, np, add, out);                                             \
        else group_axpy_r(N, 0, v0, stride, hdv, w, ws, np, add, out);                                                 \
        return 1;                                                                                                      \
    }
    switch (nh) {
    AXPY_CASE(1) AXPY_CASE(2) AXPY_CASE(3) AXPY_CASE(4) AXPY_CASE(5) AXPY_CASE(6) AXPY_CASE(7) AXPY_CASE(8)
    }
#undef AXPY_CASE
#endif
    (void)nh, (void)f16, (void)v0, (void)stride, (void)hdv, (void)w, (void)ws, (void)np, (void)add, (void)out;
    return 0;
}

/* A task is one row, one KV head and a range of the query heads that share it (GQA): each key
 * and value is loaded (and converted, for an f16 cache) once for all of them. */
typedef struct attn_job {
    kvp_ctx *c;
    const kvp_row *rows;
    int layer;
    int split;  /* query heads of a group per task (group size, or 1 when tasks would be few) */
} attn_job;

static void attn_task(void *arg, int task, int thread) {
    const attn_job *j = arg;
    kvp_ctx *c = j->c;
    const kvp_hparams *hp = &c->m->hp;
    int group = hp->n_head / hp->n_head_kv, per_row = hp->n_head / j->split;
    int r = task / per_row, h0 = (task % per_row) * j->split, nh = j->split, kvh = h0 / group, l = j->layer;
    const kvp_row *row = &j->rows[r];
    const kvp_kv *kv = row->kv;
    const kv_list *li = kv_list_at(kv, l, kvh);
    int hd = hp->head_dim, hdv = hp->head_dim_v;
    const float *q = c->q + (size_t)r * hp->n_head * hd + (size_t)h0 * hd;
    float *out = c->att + (size_t)r * hp->n_head * hdv + (size_t)h0 * hdv;
    float *kbuf = c->kvbuf + (size_t)thread * 2 * (hd > hdv ? hd : hdv);
    int p1 = row->pos + 1, p0 = 0;
    if (hp->layer_is_swa[l] && hp->sliding_window > 0 && p1 > hp->sliding_window) p0 = p1 - hp->sliding_window;
    /* the slots holding positions [p0, p1): evicted positions have none */
    int s0 = kv_lower(li, p0), s1 = kv_lower(li, p1), np = s1 - s0, f16 = kv->type != KVP_KV_F32;
    float *scores = c->scores + (size_t)thread * c->scores_cap * hp->n_head; /* [nh][np] */
    size_t es = kv_elem_size(kv);

    memset(out, 0, (size_t)nh * hdv * sizeof(float));
    if (np <= 0) return; /* every visible position evicted: attention contributes nothing */
    int s = s0;
#if defined(__AVX512F__)
    if (!f16 && hd % 16 == 0 && nh <= MAX_GROUP) /* a page of keys at a time: slots are contiguous in a page */
        for (; s < s1; s = (s / KV_PAGE + 1) * KV_PAGE) {
            int e = (s / KV_PAGE + 1) * KV_PAGE < s1 ? (s / KV_PAGE + 1) * KV_PAGE : s1;
            page_dots(q, nh, hd, kv_slot_k(kv, li, s), e - s, hp->attn_scale, scores + (s - s0), (size_t)np);
        }
#endif
    for (; s < s1; s++) {
        const void *ks = kv_slot_k(kv, li, s);
        const float *kp = ks;
        if (f16) {
            kv_load(kv, ks, kbuf, hd);
            kp = kbuf;
        }
        float dots[MAX_GROUP];
        if (group_dots(q, nh, hd, kp, dots)) {
            for (int h = 0; h < nh; h++) scores[(size_t)h * np + s - s0] = dots[h] * hp->attn_scale;
        } else {
            for (int h = 0; h < nh; h++)
                scores[(size_t)h * np + s - s0] = kvp_dot_f32(q + (size_t)h * hd, kp, hd) * hp->attn_scale;
        }
    }
    /* softmax per head; the sums run position by position for all heads together: each head's
     * sum keeps its order (the same floats), the heads' add chains overlap instead of waiting
     * on each other */
    float sum[MAX_GROUP] = {0};
    for (int h = 0; h < nh; h++) {
        float *sc = scores + (size_t)h * np, mx = -INFINITY;
        for (int i = 0; i < np; i++) mx = sc[i] > mx ? sc[i] : mx;
        for (int i = 0; i < np; i++) sc[i] -= mx;
        kvp_vexp(sc, np);
        if (nh > MAX_GROUP) {
            float t = 0.0f;
            for (int i = 0; i < np; i++) t += sc[i];
            float inv = 1.0f / t;
            for (int i = 0; i < np; i++) sc[i] *= inv;
        }
    }
    if (nh <= MAX_GROUP) {
        for (int i = 0; i < np; i++)
            for (int h = 0; h < nh; h++) sum[h] += scores[(size_t)h * np + i];
        for (int h = 0; h < nh; h++) {
            float *sc = scores + (size_t)h * np, inv = 1.0f / sum[h];
            for (int i = 0; i < np; i++) sc[i] *= inv;
        }
    }
    if (kv->scoring) { /* whole GQA groups per task here (attention_block), so one writer per (row, KV head) */
        size_t o = (size_t)r * hp->n_head_kv + kvh;
        float *dst = c->obs + o * c->obs_cap;
        for (int i = 0; i < np; i++) {
            float t = 0.0f;
            for (int h = 0; h < nh; h++) t += scores[(size_t)h * np + i];
            dst[i] = t;
        }
        c->obs_s0[o] = s0;
        c->obs_n[o] = np;
    }
    /* values, one page of slots at a time (slots are contiguous within a page) */
    for (int s = s0; s < s1;) {
        int e = (s / KV_PAGE + 1) * KV_PAGE < s1 ? (s / KV_PAGE + 1) * KV_PAGE : s1;
        const float *w = scores + (s - s0);
        if (!group_axpy(nh, f16, kv_slot_v(kv, li, s), (size_t)hdv * es, hdv, w, (size_t)np, e - s, s > s0, out)) {
            for (int t = s; t < e; t++) {
                const void *vs = kv_slot_v(kv, li, t);
                const float *vp = vs;
                if (f16) {
                    kv_load(kv, vs, kbuf, hdv);
                    vp = kbuf;
                }
                for (int h = 0; h < nh; h++) {
                    float wt = w[(size_t)h * np + t - s], *o = out + (size_t)h * hdv;
                    for (int d = 0; d < hdv; d++) o[d] += wt * vp[d];
                }
            }
        }
        s = e;
    }
}

/* ---- the pass ---------------------------------------------------------------------------- */

static int validate_rows(kvp_ctx *c, const kvp_row *rows, int n, kvp_error *err) {
    const kvp_hparams *hp = &c->m->hp;
    if (n < 0 || n > c->max_batch)
        return kvp_fail(err, KVP_E_INVALID, "forward: %d rows exceeds the context's batch size %d", n, c->max_batch);
    int need = 0;
    for (int i = 0; i < n; i++) {
        const kvp_row *r = &rows[i];
        if (!r->kv || r->kv->n_layer != hp->n_layer || r->kv->k_row != hp->n_head_kv * hp->head_dim ||
            r->kv->v_row != hp->n_head_kv * hp->head_dim_v)
            return kvp_fail(err, KVP_E_INVALID, "forward: row %d has no KV cache or one shaped for another model", i);
        if (r->token < 0 || r->token >= hp->n_vocab)
            return kvp_fail(err, KVP_E_INVALID, "forward: token id %d out of range [0, %d)", r->token, hp->n_vocab);
        /* A row may write any slot up to the cache length, counting earlier rows of this batch. */
        int len = r->kv->len;
        for (int j = 0; j < i; j++)
            if (rows[j].kv == r->kv && rows[j].pos + 1 > len) len = rows[j].pos + 1;
        if (r->pos < 0 || r->pos > len || r->pos >= r->kv->n_ctx)
            return kvp_fail(err, KVP_E_INVALID, "forward: row %d position %d invalid (cache holds %d of %d slots)", i,
                            r->pos, len, r->kv->n_ctx);
        if (r->pos + 1 > need) need = r->pos + 1;
    }
    if (need > c->scores_cap) {
        float *s = realloc(c->scores, (size_t)c->n_threads * hp->n_head * need * sizeof(float));
        if (!s) return kvp_fail(err, KVP_E_NOMEM, "out of memory for attention scores");
        c->scores = s;
        c->scores_cap = need;
    }
    int scoring = 0;
    for (int i = 0; i < n; i++) scoring |= rows[i].kv->scoring;
    if (scoring && (need > c->obs_cap || !c->obs_s0)) {
        size_t nkv = (size_t)hp->n_head_kv, mb = (size_t)c->max_batch;
        float *o = realloc(c->obs, mb * nkv * (size_t)need * sizeof(float));
        if (o) c->obs = o;
        if (!c->obs_s0) c->obs_s0 = calloc(mb * nkv, sizeof(int)), c->obs_n = calloc(mb * nkv, sizeof(int));
        if (!o || !c->obs_s0 || !c->obs_n) return kvp_fail(err, KVP_E_NOMEM, "out of memory for attention scores");
        c->obs_cap = need;
    }
    return 0;
}

static void embed(kvp_ctx *c, const kvp_row *rows, int n) {
    const kvp_model *m = c->m;
    int d = m->hp.n_embd;
    for (int r = 0; r < n; r++) {
        float *x = c->x + (size_t)r * d;
        kvp_dequantize_row(m->tok_embd.type, m->tok_embd.data + (size_t)rows[r].token * m->tok_embd.row_bytes, x, d);
        if (m->hp.embed_scale != 1.0f)
            for (int i = 0; i < d; i++) x[i] *= m->hp.embed_scale;
    }
}

static void rope_tables(kvp_ctx *c, const kvp_row *rows, int n) {
    int nr = c->m->hp.n_rot, half = nr / 2;
    for (int r = 0; r < n; r++)
        for (int kind = 0; kind < 2; kind++) {
            float *cs = c->rope_cs + ((size_t)r * 2 + kind) * nr;
            for (int i = 0; i < half; i++) {
                float a = (float)rows[r].pos * c->rope_inv[kind][i];
                cs[i] = (float)cos((double)a);
                cs[half + i] = (float)sin((double)a);
            }
        }
}

/* ---- per-row stages, run over the batch in parallel (rows are independent) ----------------- */

typedef struct rows_job {
    kvp_ctx *c;
    const kvp_row *rows;
    int n, il, per_task;
    void (*fn)(kvp_ctx *, const kvp_row *, int, int);
} rows_job;

static void rows_task(void *arg, int task, int thread) {
    (void)thread;
    const rows_job *j = arg;
    int r1 = (task + 1) * j->per_task < j->n ? (task + 1) * j->per_task : j->n;
    for (int r = task * j->per_task; r < r1; r++) j->fn(j->c, j->rows, r, j->il);
}

/* fn(c, rows, r, il) for every r < n; a batch of one or two stays on this thread. */
static void for_each_row(kvp_ctx *c, const kvp_row *rows, int n, int il, void (*fn)(kvp_ctx *, const kvp_row *, int, int)) {
    if (n <= 2 || c->n_threads == 1) {
        for (int r = 0; r < n; r++) fn(c, rows, r, il);
        return;
    }
    int tasks = 4 * c->n_threads < n ? 4 * c->n_threads : n;
    rows_job j = {c, rows, n, il, (n + tasks - 1) / tasks, fn};
    kvp_pool_run(c->pool, rows_task, &j, (n + j.per_task - 1) / j.per_task);
}

static void row_attn_norm(kvp_ctx *c, const kvp_row *rows, int r, int il) {
    (void)rows;
    const kvp_hparams *hp = &c->m->hp;
    int d = hp->n_embd;
    rmsnorm(c->xn + (size_t)r * d, c->x + (size_t)r * d, c->m->layers[il].attn_norm, d, hp->rms_eps);
}

static void row_ffn_norm(kvp_ctx *c, const kvp_row *rows, int r, int il) {
    (void)rows;
    const kvp_hparams *hp = &c->m->hp;
    int d = hp->n_embd;
    rmsnorm(c->xn + (size_t)r * d, c->x + (size_t)r * d, c->m->layers[il].ffn_norm, d, hp->rms_eps);
}

static void add_bias(float *x, const float *b, int n) {
    if (b)
        for (int i = 0; i < n; i++) x[i] += b[i];
}

/* q/k/v biases, q/k head norms, RoPE, and the store of this row's K/V into its cache slot. */
static void row_qk_store(kvp_ctx *c, const kvp_row *rows, int r, int il) {
    const kvp_hparams *hp = &c->m->hp;
    const kvp_layer *L = &c->m->layers[il];
    int hd = hp->head_dim, qw = hp->n_head * hd, kw = hp->n_head_kv * hd, vw = hp->n_head_kv * hp->head_dim_v;
    add_bias(c->q + (size_t)r * qw, L->bq, qw);
    add_bias(c->k + (size_t)r * kw, L->bk, kw);
    add_bias(c->v + (size_t)r * vw, L->bv, vw);
    const float *cs = c->rope_cs + ((size_t)r * 2 + (hp->layer_is_swa[il] ? 1 : 0)) * hp->n_rot;
    for (int h = 0; h < hp->n_head; h++) {
        float *qh = c->q + (size_t)r * qw + (size_t)h * hd;
        if (L->q_norm) rmsnorm(qh, qh, L->q_norm, hd, hp->rms_eps);
        rope_head(qh, cs, hp->n_rot, hp->rope_neox);
    }
    for (int h = 0; h < hp->n_head_kv; h++) {
        float *kh = c->k + (size_t)r * kw + (size_t)h * hd;
        if (L->k_norm) rmsnorm(kh, kh, L->k_norm, hd, hp->rms_eps);
        rope_head(kh, cs, hp->n_rot, hp->rope_neox);
    }
    /* distinct rows write distinct slots, each in a page of its own cache (kv_reserve) */
    kvp_kv *kv = rows[r].kv;
    for (int h = 0; h < hp->n_head_kv; h++) {
        kv_list *li = kv_list_at(kv, il, h);
        int s = kv_find(li, rows[r].pos);
        kv_store(kv, kv_slot_k(kv, li, s), c->k + (size_t)r * kw + (size_t)h * hd, hd);
        kv_store(kv, kv_slot_v(kv, li, s), c->v + (size_t)r * vw + (size_t)h * hp->head_dim_v, hp->head_dim_v);
    }
}

/* x += post_norm(tmp) (the norm only where the family has one). */
static void residual(kvp_ctx *c, int r, const float *post_norm) {
    const kvp_hparams *hp = &c->m->hp;
    int d = hp->n_embd;
    float *t = c->tmp + (size_t)r * d, *x = c->x + (size_t)r * d;
    if (post_norm) rmsnorm(t, t, post_norm, d, hp->rms_eps);
    for (int i = 0; i < d; i++) x[i] += t[i];
}
static void row_attn_residual(kvp_ctx *c, const kvp_row *rows, int r, int il) {
    (void)rows;
    residual(c, r, c->m->layers[il].post_attn_norm);
}
static void row_ffn_residual(kvp_ctx *c, const kvp_row *rows, int r, int il) {
    (void)rows;
    residual(c, r, c->m->layers[il].post_ffw_norm);
}

static void row_gate(kvp_ctx *c, const kvp_row *rows, int r, int il) {
    (void)rows, (void)il;
    const kvp_hparams *hp = &c->m->hp;
    float *a = c->ffa + (size_t)r * hp->n_ff, *b = c->ffb + (size_t)r * hp->n_ff;
    if (hp->arch == KVP_ARCH_GEMMA3) kvp_gelu_mul(a, b, hp->n_ff);
    else kvp_silu_mul(a, b, hp->n_ff);
}

/* ---- blocks -------------------------------------------------------------------------------- */

/* Scoring caches: add each row's attention (recorded by its tasks) to the slots' scores, in
 * row order, so the sums do not depend on threads. */
static void add_scores(kvp_ctx *c, const kvp_row *rows, int n, int il) {
    int nkv = c->m->hp.n_head_kv;
    for (int r = 0; r < n; r++) {
        if (!rows[r].kv->scoring) continue;
        for (int h = 0; h < nkv; h++) {
            size_t o = (size_t)r * nkv + h;
            kv_list *li = kv_list_at(rows[r].kv, il, h);
            const float *src = c->obs + o * c->obs_cap;
            for (int i = 0; i < c->obs_n[o]; i++) li->score[c->obs_s0[o] + i] += src[i];
        }
    }
}

static void attention_block(kvp_ctx *c, const kvp_row *rows, int n, int il) {
    const kvp_hparams *hp = &c->m->hp;
    const kvp_layer *L = &c->m->layers[il];
    int d = hp->n_embd;
    for_each_row(c, rows, n, il, row_attn_norm);
    set_input(c, c->xn, d, n, d);
    matmul_dense(c, &L->wq, c->q);
    matmul_dense(c, &L->wk, c->k);
    matmul_dense(c, &L->wv, c->v);
    /* Every row's K/V is stored before any row attends, so rows of one cache see each other
     * causally. */
    for_each_row(c, rows, n, il, row_qk_store);
    /* whole GQA groups per task, unless that leaves threads idle (decode with few KV heads) */
    int group = hp->n_head / hp->n_head_kv, split = n * hp->n_head_kv >= 2 * c->n_threads ? group : 1, scoring = 0;
    for (int r = 0; r < n; r++) scoring |= rows[r].kv->scoring;
    if (scoring) split = group;
    attn_job aj = {c, rows, il, split};
    kvp_pool_run(c->pool, attn_task, &aj, n * (hp->n_head / split));
    if (scoring) add_scores(c, rows, n, il);
    set_input(c, c->att, (int64_t)hp->n_head * hp->head_dim_v, n, (int64_t)hp->n_head * hp->head_dim_v);
    matmul_dense(c, &L->wo, c->tmp);
    for_each_row(c, rows, n, il, row_attn_residual);
}

static void ffn_block(kvp_ctx *c, const kvp_row *rows, int n, int il) {
    const kvp_hparams *hp = &c->m->hp;
    const kvp_layer *L = &c->m->layers[il];
    int d = hp->n_embd, ff = hp->n_ff;
    for_each_row(c, rows, n, il, row_ffn_norm);
    set_input(c, c->xn, d, n, d);
    matmul_dense(c, &L->gate, c->ffa);
    matmul_dense(c, &L->up, c->ffb);
    for_each_row(c, rows, n, il, row_gate);
    set_input(c, c->ffa, ff, n, ff);
    matmul_dense(c, &L->down, c->tmp);
    for_each_row(c, rows, n, il, row_ffn_residual);
}

static void logits_block(kvp_ctx *c, const kvp_row *rows, int n) {
    const kvp_model *m = c->m;
    const kvp_hparams *hp = &m->hp;
    int d = hp->n_embd, nl = 0;
    for (int r = 0; r < n; r++) {
        if (!rows[r].logits) continue;
        rmsnorm(c->xn + (size_t)nl * d, c->x + (size_t)r * d, m->output_norm, d, hp->rms_eps);
        c->outp[nl++] = rows[r].logits;
    }
    if (!nl) return;
    set_input(c, c->xn, d, nl, d);
    matmul(c, &m->output, c->outp);
    if (hp->final_softcap > 0.0f)
        for (int b = 0; b < nl; b++)
            for (int i = 0; i < hp->n_vocab; i++)
                c->outp[b][i] = hp->final_softcap * tanhf(c->outp[b][i] / hp->final_softcap);
}

int kvp_forward(kvp_ctx *c, const kvp_row *rows, int n, kvp_error *err) {
    if (validate_rows(c, rows, n, err)) return err->code;
    if (n == 0) return KVP_OK;
    for (int r = 0; r < n; r++)
        if (kv_reserve(rows[r].kv, rows[r].pos, err)) {
            for (int q = 0; q <= r; q++) kvp_kv_truncate(rows[q].kv, rows[q].kv->len, NULL);
            return err->code;
        }
    embed(c, rows, n);
    rope_tables(c, rows, n);
    for (int il = 0; il < c->m->hp.n_layer; il++) {
        attention_block(c, rows, n, il);
        ffn_block(c, rows, n, il);
    }
    for (int r = 0; r < n; r++)
        if (rows[r].pos + 1 > rows[r].kv->len) rows[r].kv->len = rows[r].pos + 1;
    logits_block(c, rows, n);
    return KVP_OK;
}

int kvp_decode(kvp_ctx *c, kvp_kv *kv, const int32_t *tokens, int n, float *logits_all, float *logits_last,
               kvp_error *err) {
    kvp_row *rows = c->rows;
    int V = c->m->hp.n_vocab, rc = KVP_OK;
    if (kv->len + n > kv->n_ctx) {
        rc = kvp_fail(err, KVP_E_INVALID, "decode: %d tokens do not fit: cache holds %d of %d positions", n, kv->len,
                      kv->n_ctx);
        n = 0;
    }
    for (int i0 = 0; i0 < n && rc == KVP_OK; i0 += c->max_batch) {
        int nb = n - i0 < c->max_batch ? n - i0 : c->max_batch;
        int base = kv->len;
        for (int b = 0; b < nb; b++) {
            int i = i0 + b;
            rows[b] = (kvp_row){.token = tokens[i], .pos = base + b, .kv = kv, .logits = NULL};
            if (logits_all) rows[b].logits = logits_all + (size_t)i * V;
            else if (logits_last && i == n - 1) rows[b].logits = logits_last;
        }
        rc = kvp_forward(c, rows, nb, err);
    }
    return rc;
}
