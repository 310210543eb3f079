/* The fast path's integer kernels (src/tensor/qdot.c) against the exact dequantized weights
 * of the quant goldens (tests/golden/quant, from the gguf package), for q8 activations and
 * for q8x2 (x ~ d * (q + lo / 256)):
 *   - against the same quantized activations, the kernel equals sum(w * x_hat) computed in
 *     double to within 2e-6 x sum|w * x_hat| (only f32 rounding differs);
 *   - against the f32 activations, the error stays within the activation rounding bound
 *     sum over blocks of e * sum|w| (plus f32 rounding), e = d/2 for q8 and d/256 for q8x2;
 *   - q8x2's first plane is q8's, and tiling, batch size and row splits never change a bit. */
#include <stdint.h>

#include "harness.h"
#include "kvprobe/kvprobe.h"
#include "../../src/tensor/vmath.h"

static const char *TYPES[] = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"};

#define NB 37 /* activation rows: two AMX groups of 16 and a part, not a multiple of 3 or 4 either */

/* Check the kernel on `rows` weight rows of n elements (W: their exact dequantization) with
 * NB activation rows cycled from Y[yrows][n]. */
static void check_kernel(const char *title, enum kvp_type type, const void *data, int64_t rows, int64_t n, const float *W,
                         const float *Y, int64_t yrows, int two_planes) {
    TEST(title) {
        CHECK(kvp_qdot_supported(type), "type has no integer kernel");
        int64_t nblk = n / 32;
        size_t rb = kvp_row_bytes(type, n);
        kvp_qact a = {n, NB, malloc((size_t)NB * n), malloc((size_t)NB * nblk * sizeof(float)),
                      two_planes ? malloc((size_t)NB * n) : NULL, NULL};
        for (int j = 0; j < NB; j++) kvp_quantize_act_row(Y + (j % yrows) * n, n, a.q + j * n, a.d + j * nblk);
        if (two_planes) {
            int8_t *q1 = malloc((size_t)NB * n);
            float *d1 = malloc((size_t)NB * nblk * sizeof(float));
            memcpy(q1, a.q, (size_t)NB * n);
            memcpy(d1, a.d, (size_t)NB * nblk * sizeof(float));
            for (int j = 0; j < NB; j++)
                kvp_quantize_act_row2(Y + (j % yrows) * n, n, a.q + j * n, a.d + j * nblk, a.lo + j * n);
            CHECK(!memcmp(q1, a.q, (size_t)NB * n) && !memcmp(d1, a.d, (size_t)NB * nblk * sizeof(float)),
                  "q8x2's first plane differs from q8");
            free(q1);
            free(d1);
        }
        float *res = malloc((size_t)NB * rows * sizeof(float)), *res2 = malloc((size_t)NB * rows * sizeof(float));
        float *outp[NB], *outp2[NB];
        for (int j = 0; j < NB; j++) outp[j] = res + j * rows, outp2[j] = res2 + j * rows;
        kvp_qdot_rows(type, data, rb, 0, rows, &a, outp);

        double worst_int = 0, worst_bound = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int j = 0; j < NB; j++) {
                const float *w = W + r * n, *x = Y + (j % yrows) * n;
                double want = 0, scale = 0, exact = 0, bound = 0;
                for (int64_t b = 0; b < nblk; b++) {
                    double d = a.d[j * nblk + b], wabs = 0;
                    for (int i = 0; i < 32; i++) {
                        int64_t k = b * 32 + i;
                        double xq = d * (a.q[j * n + k] + (a.lo ? a.lo[j * n + k] / 256.0 : 0.0));
                        want += (double)w[k] * xq;
                        scale += fabs((double)w[k] * xq);
                        exact += (double)w[k] * x[k];
                        wabs += fabs((double)w[k]);
                    }
                    bound += (a.lo ? d / 256 : d / 2) * wabs;
                }
                double got = res[j * rows + r];
                double e = fabs(got - want) / (scale > 0 ? scale : 1);
                if (e > worst_int) worst_int = e;
                double eb = fabs(got - exact) / (bound + 2e-6 * scale + 1e-30);
                if (eb > worst_bound) worst_bound = eb;
            }
        CHECK(worst_int <= 2e-6, "kernel vs sum(w * x_hat): %.3g x sum|w * x_hat|", worst_int);
        CHECK(worst_bound <= 1.0, "error vs f32 activations is %.3g x the rounding bound", worst_bound);

        /* One activation at a time, one row at a time, and odd row splits: identical bits. */
        int same = 1;
        for (int j = 0; j < NB; j++) {
            kvp_qact one = {n, 1, a.q + j * n, a.d + j * nblk, a.lo ? a.lo + j * n : NULL, NULL};
            for (int64_t r = 0; r < rows; r++) kvp_qdot_rows(type, data, rb, r, r + 1, &one, &outp2[j]);
        }
        same &= memcmp(res, res2, (size_t)NB * rows * sizeof(float)) == 0;
        memset(res2, 0, (size_t)NB * rows * sizeof(float));
        for (int64_t r0 = 0; r0 < rows; r0 += 3) kvp_qdot_rows(type, data, rb, r0, r0 + 3 < rows ? r0 + 3 : rows, &a, outp2);
        same &= memcmp(res, res2, (size_t)NB * rows * sizeof(float)) == 0;
        /* Activations packed by the caller (as the engine does), odd row splits. */
        size_t pb = kvp_qact_pack_bytes(&a);
        void *pbuf = pb ? malloc(pb) : NULL;
        kvp_qact packed = a;
        kvp_qact_pack(&packed, pbuf);
        memset(res2, 0, (size_t)NB * rows * sizeof(float));
        for (int64_t r0 = 0; r0 < rows; r0 += 7) kvp_qdot_rows(type, data, rb, r0, r0 + 7 < rows ? r0 + 7 : rows, &packed, outp2);
        same &= memcmp(res, res2, (size_t)NB * rows * sizeof(float)) == 0;
        free(pbuf);
        /* Batches of 2 and 3 (the decode kernel's multi-activation tiles), 5, 7 and 8 (the lane =
         * row tiles of 8, 6 or 4 activations and their remainders of 4, 2 and 1) and 17 (one AMX
         * group and one row), odd row splits. */
        static const int nbs[] = {2, 3, 5, 7, 8, 17};
        for (int ni = 0, nb; ni < 6 && (nb = nbs[ni]); ni++)
            for (int j0 = 0; j0 + nb <= NB; j0 += nb) {
                kvp_qact part = {n, nb, a.q + j0 * n, a.d + j0 * nblk, a.lo ? a.lo + j0 * n : NULL, NULL};
                memset(res2, 0, (size_t)NB * rows * sizeof(float));
                for (int64_t r0 = 0; r0 < rows; r0 += 5) kvp_qdot_rows(type, data, rb, r0, r0 + 5 < rows ? r0 + 5 : rows, &part, outp2);
                same &= memcmp(res + j0 * rows, res2, (size_t)nb * rows * sizeof(float)) == 0;
            }
        CHECK(same, "tiling or batching changed the results");
        NOTE("%s %s: %lld rows x %d activations, kernel error %.2g, worst %.2f of the rounding bound", kvp_type_name(type),
             two_planes ? "q8x2" : "q8", (long long)rows, NB, worst_int, worst_bound);
        free(res);
        free(res2);
        free(a.q);
        free(a.d);
        free(a.lo);
    }
}

/* The engine's load-time repack (kvp_repack_type: K-quants lane = block): the repacked rows
 * dequantize to the same floats, and the kernels give the same bits on them as on the file's
 * layout (one activation, and batches through every tile kind), then the checks above. */
static void check_repacked(const char *title, enum kvp_type type, const void *data, int64_t rows, int64_t n, const float *W,
                           const float *Y, int64_t yrows) {
    enum kvp_type lb = kvp_repack_type(type);
    if (lb == type) return;
    size_t rb = kvp_row_bytes(type, n), rbl = kvp_row_bytes(lb, n);
    uint8_t *rp = malloc(rbl * rows);
    kvp_repack_rows(type, data, rp, rows, n);
    char t2[160];
    snprintf(t2, sizeof t2, "%s, repacked as %s: same floats, same bits", title, kvp_type_name(lb));
    TEST(t2) {
        CHECK(rbl == rb + (lb == KVP_TYPE_Q4_K_LB ? 4 * (size_t)(n / 256) : 0), "the repacked rows' size: %zu for %zu",
              rbl, rb);
        float *w = malloc((size_t)n * sizeof(float));
        int same = 1;
        for (int64_t r = 0; r < rows; r++) {
            kvp_dequantize_row(lb, rp + r * rbl, w, n);
            same &= !memcmp(w, W + r * n, (size_t)n * sizeof(float));
        }
        CHECK(same, "dequantized repacked rows differ from the file layout's");
        free(w);
        int64_t nblk = n / 32;
        kvp_qact a = {n, NB, malloc((size_t)NB * n), malloc((size_t)NB * nblk * sizeof(float)), malloc((size_t)NB * n), NULL};
        for (int j = 0; j < NB; j++)
            kvp_quantize_act_row2(Y + (j % yrows) * n, n, a.q + j * n, a.d + j * nblk, a.lo + j * n);
        float *r1 = malloc((size_t)NB * rows * sizeof(float)), *r2 = malloc((size_t)NB * rows * sizeof(float));
        float *o1[NB], *o2[NB];
        for (int lo = 0; lo < 2; lo++) {
            kvp_qact x = a;
            if (!lo) x.lo = NULL;
            static const int nbs[] = {1, 2, 3, 5, 17, NB};
            for (int ni = 0; ni < 6; ni++) {
                x.nb = nbs[ni];
                for (int j = 0; j < x.nb; j++) o1[j] = r1 + j * rows, o2[j] = r2 + j * rows;
                kvp_qdot_rows(type, data, rb, 0, rows, &x, o1);
                kvp_qdot_rows(lb, rp, rbl, 0, rows, &x, o2);
                CHECK(!memcmp(r1, r2, (size_t)x.nb * rows * sizeof(float)), "%s, %d activations: the repacked rows give other bits",
                      lo ? "q8x2" : "q8", x.nb);
            }
        }
        free(r1);
        free(r2);
        free(a.q);
        free(a.d);
        free(a.lo);
    }
    for (int lo = 0; lo < 2; lo++) check_kernel(t2, lb, rp, rows, n, W, Y, yrows, lo);
    free(rp);
}

static void check_golden(const char *name) {
    char path[256], title[96];
    snprintf(path, sizeof path, "tests/golden/quant/%s.gguf", name);
    snprintf(title, sizeof title, "qdot %s (%s): golden blocks, q8 and q8x2 activations", name, kvp_qdot_isa());
    kvp_error err = {0};
    gguf_file *f = gguf_open(path, &err);
    const gguf_tensor *q = f ? gguf_find_tensor(f, "q") : NULL, *deq = f ? gguf_find_tensor(f, "deq") : NULL,
                      *y = f ? gguf_find_tensor(f, "y") : NULL;
    char load[128];
    snprintf(load, sizeof load, "qdot %s: golden file loads", name);
    TEST(load) CHECK(q && deq && y, "%s: golden missing or incomplete %s", path, err.msg);
    for (int lo = 0; lo < 2 && q && deq && y; lo++)
        check_kernel(title, q->type, q->data, q->ne[1], q->ne[0], deq->data, y->data, y->ne[1], lo);
    if (q && deq && y) check_repacked(title, q->type, q->data, q->ne[1], q->ne[0], deq->data, y->data, y->ne[1]);
    gguf_close(f);
}

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* Random blocks: random bytes, then every f16 scale field set to a finite value. */
static void check_random(enum kvp_type type, int64_t n) {
    static const struct { enum kvp_type t; int n_f16; int off[2]; } F16S[] = {
        {KVP_TYPE_Q4_0, 1, {0}},      {KVP_TYPE_Q4_1, 2, {0, 2}},   {KVP_TYPE_Q5_0, 1, {0}},
        {KVP_TYPE_Q5_1, 2, {0, 2}},   {KVP_TYPE_Q8_0, 1, {0}},      {KVP_TYPE_Q2_K, 2, {80, 82}},
        {KVP_TYPE_Q3_K, 1, {108}},    {KVP_TYPE_Q4_K, 2, {0, 2}},   {KVP_TYPE_Q5_K, 2, {0, 2}},
        {KVP_TYPE_Q6_K, 1, {208}},
    };
    const int64_t rows = 21, yrows = 5;
    const kvp_type_info *ti = kvp_type_get(type);
    size_t rb = kvp_row_bytes(type, n), nblocks = (size_t)(rows * n / ti->block_elems);
    uint8_t *data = malloc(rb * rows);
    for (size_t i = 0; i < rb * rows; i++) data[i] = (uint8_t)next_u32();
    for (size_t k = 0; k < sizeof F16S / sizeof F16S[0]; k++)
        if (F16S[k].t == type)
            for (size_t b = 0; b < nblocks; b++)
                for (int s = 0; s < F16S[k].n_f16; s++) {
                    float v = ((float)(next_u32() % 2001) - 1000.0f) * 1e-5f;
                    uint16_t h = kvp_f32_to_fp16(v);
                    memcpy(data + b * ti->block_bytes + F16S[k].off[s], &h, 2);
                }
    float *W = malloc((size_t)rows * n * sizeof(float)), *Y = malloc((size_t)yrows * n * sizeof(float));
    for (int64_t r = 0; r < rows; r++) kvp_dequantize_row(type, data + r * rb, W + r * n, n);
    for (int64_t i = 0; i < yrows * n; i++) Y[i] = ((float)(next_u32() % 20001) - 10000.0f) * 1e-3f;
    for (int64_t i = 0; i < 32; i++) Y[i] = 0.0f; /* an all-zero activation block */
    char title[96];
    snprintf(title, sizeof title, "qdot %s (%s): random blocks, %lld x %lld", ti->name, kvp_qdot_isa(), (long long)rows,
             (long long)n);
    for (int lo = 0; lo < 2; lo++) check_kernel(title, type, data, rows, n, W, Y, yrows, lo);
    check_repacked(title, type, data, rows, n, W, Y, yrows);
    free(data);
    free(W);
    free(Y);
}

int main(void) {
    /* Every kernel variant this CPU runs (kvp_qkernels), each the default in turn, through the
     * same checks against the scalar reference (their titles name the variant). */
    const kvp_qkernels *ks[8];
    int nk = kvp_qkernels_available(ks, 8);
    for (int v = 0; v < nk; v++) {
        setenv("KVPROBE_KERNELS", ks[v]->name, 1);
        for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++) check_golden(TYPES[i]);
        enum kvp_type rand_types[] = {KVP_TYPE_Q4_0, KVP_TYPE_Q4_1, KVP_TYPE_Q5_0, KVP_TYPE_Q5_1, KVP_TYPE_Q8_0,
                                      KVP_TYPE_Q2_K, KVP_TYPE_Q3_K, KVP_TYPE_Q4_K, KVP_TYPE_Q5_K, KVP_TYPE_Q6_K};
        for (size_t i = 0; i < sizeof rand_types / sizeof rand_types[0]; i++) {
            check_random(rand_types[i], 512);
            /* 11 blocks of 32: a row ends inside a kernel chunk of 8 blocks */
            if (kvp_type_get(rand_types[i])->block_elems == 32) check_random(rand_types[i], 352);
        }
    }
    unsetenv("KVPROBE_KERNELS");
    TEST("qdot: kernel variants are chosen by name; unknown names are refused") {
        kvp_error err = {0};
        CHECK(kvp_qkernels_select("portable", &err) != NULL, "portable always runs");
        CHECK(kvp_qkernels_select(NULL, &err) == ks[0], "the default is the first this CPU runs");
        CHECK(kvp_qkernels_select("sse9", &err) == NULL && strstr(err.msg, "unknown variant"), "%s", err.msg);
        setenv("KVPROBE_KERNELS", ks[nk - 1]->name, 1);
        CHECK(kvp_qkernels_select(NULL, &err) == ks[nk - 1] && !strcmp(kvp_qdot_isa(), ks[nk - 1]->name),
              "KVPROBE_KERNELS picks the default");
        unsetenv("KVPROBE_KERNELS");
    }
    TEST("qdot: every variant quantizes activations to the portable kernel's bytes (q8 and q8x2)") {
        /* random values, exact halves (ties of the rounding), residuals at +-0.5 / 256 and a zero block */
        enum { N = 32 * 24 };
        static float x[N];
        uint32_t rng = 12345;
        for (int i = 0; i < N; i++) {
            rng = rng * 1664525u + 1013904223u;
            float u = (float)(rng >> 8) / (float)(1u << 24) - 0.5f;
            int blk = i / 32;
            x[i] = blk % 4 == 0 ? u * 1e-3f : blk % 4 == 1 ? (float)((int)(u * 64)) * 0.5f : u * (float)(1 + blk);
        }
        for (int i = 64; i < 96; i++) x[i] = 0.0f;
        x[100] = 127.0f, x[101] = 2.5f / 127.0f * 127.0f, x[102] = -(0.5f + 0.5f / 256.0f);
        kvp_error err = {0};
        const kvp_qkernels *ref = kvp_qkernels_select("portable", &err);
        static int8_t q0[N], l0[N], q1[N], l1[N];
        float d0[N / 32], d1[N / 32];
        int bad = 0;
        for (int v = 0; v < nk; v++) {
            ref->quantize_row(x, N, q0, d0);
            ks[v]->quantize_row(x, N, q1, d1);
            bad += memcmp(q0, q1, N) != 0 || memcmp(d0, d1, sizeof d0) != 0;
            ref->quantize_row2(x, N, q0, d0, l0);
            ks[v]->quantize_row2(x, N, q1, d1, l1);
            if (memcmp(q0, q1, N) || memcmp(l0, l1, N) || memcmp(d0, d1, sizeof d0)) {
                bad++;
                NOTE("%s: q8x2 planes differ from portable", ks[v]->name);
            }
        }
        CHECK(bad == 0, "%d variants differ", bad);
    }
    TEST("qdot: float types have no integer kernel") {
        CHECK(!kvp_qdot_supported(KVP_TYPE_F32) && !kvp_qdot_supported(KVP_TYPE_F16) &&
                  !kvp_qdot_supported(KVP_TYPE_BF16),
              "float weights must stay on the exact path");
    }
    TEST("qdot: activation quantization rounds to nearest even, zero blocks stay zero") {
        float x[64] = {0};
        int8_t q[64];
        float d[2];
        for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) * 0.5f;
        x[5] = 63.5f; /* max: d = 0.5 exactly, so x/d are integers or halves */
        x[6] = 1.25f;  /* 2.5 -> 2 */
        x[7] = 1.75f;  /* 3.5 -> 4 */
        x[8] = -1.25f; /* -2.5 -> -2 */
        kvp_quantize_act_row(x, 64, q, d);
        CHECK(d[0] == 0.5f, "d = %g", d[0]);
        CHECK(q[5] == 127 && q[6] == 2 && q[7] == 4 && q[8] == -2, "q = %d %d %d %d", q[5], q[6], q[7], q[8]);
        CHECK(q[0] == -16 && q[31] == 15, "q[0] %d q[31] %d", q[0], q[31]);
        int zero = d[1] == 0.0f;
        for (int i = 32; i < 64; i++) zero &= q[i] == 0;
        CHECK(zero, "an all-zero block quantizes to zeros with d = 0");
    }
    TEST("vmath: exp matches libm within 2 ulp, NaN propagates, infinities saturate, vector lanes = scalar") {
        /* kvp_vexp on all 37 runs the first 32 in vector lanes (16 or 8 wide) and the rest in the
         * scalar tail; one value at a time always takes the scalar path. */
        float base[37] = {0.0f, 1.0f, -1.0f, 0.5f, 88.0f, -86.9f, 10.0f, -10.0f, 1e-8f, -1e-8f, 3.3f, -40.0f,
                          NAN, INFINITY, -INFINITY, 100.0f, -100.0f, 88.7f, -87.5f, 2.0f, 7.25f, -7.25f, 60.0f,
                          -60.0f, 0.125f, 42.0f, -0.693f, 0.693f, 20.0f, -20.0f, 5.0f, -5.0f, NAN, 1.5f, -1.5f,
                          80.0f, -80.0f};
        float a[37];
        memcpy(a, base, sizeof a);
        kvp_vexp(a, 37);
        int bad = 0;
        for (int i = 0; i < 37; i++) {
            float x = base[i], got = a[i], scalar = x;
            kvp_vexp(&scalar, 1);
            if (memcmp(&got, &scalar, 4) != 0 && !(isnan(got) && isnan(scalar))) {
                if (bad++ < 3) NOTE("exp(%g): %.9g in the batch, %.9g alone", x, got, scalar);
                continue;
            }
            if (isnan(x)) { bad += !isnan(got); continue; }
            if (x < -87.0f) { bad += got != 0.0f; continue; }
            if (x > 88.3762626647949f) { bad += !(got >= 2.4e38f && isfinite(got)); continue; } /* saturates */
            float want = expf(x);
            float ulp = nextafterf(want, INFINITY) - want;
            if (fabsf(got - want) > 2 * ulp) {
                if (bad++ < 3) NOTE("exp(%g) = %.9g, libm %.9g", x, got, want);
            }
        }
        CHECK(bad == 0, "%d values wrong", bad);
        float g[3] = {NAN, 1.0f, -3.0f}, one[3] = {1, 1, 1};
        kvp_silu_mul(g, one, 3);
        CHECK(isnan(g[0]) && fabsf(g[1] - 0.7310586f) < 1e-6f && fabsf(g[2] + 0.1422776f) < 1e-6f,
              "silu: %g %g %g", g[0], g[1], g[2]);
    }
    return harness_finish();
}
