/* The integer matmul kernels alone, on a real model's weights, one thread.
 *
 *   qdot-bench MODEL.gguf [-b BATCH] [-p q8|q8x2] [-s SECONDS] [-m huge|anon|mmap] [-t TENSOR]
 *   qdot-bench --peak
 *
 * A "pass" is what one forward step of BATCH tokens asks of kvp_qdot_rows: every matmul weight
 * of the file (2-D, quantized; token_embd only where it is the tied LM head), in file order,
 * against BATCH random activation rows. Passes repeat for SECONDS; since the model is much
 * larger than the caches, every weight comes from memory, as in decoding. Prints, per weight
 * type and in total: bytes, seconds per pass, GB/s of weights read, and GMAC/s
 * (multiply-accumulates of weight x activation elements). -m: where the weights are read from:
 * a copy in anonymous memory advised into transparent huge pages (huge, the default: where the
 * engine holds them, repacked at load as it does, KVPROBE_REPACK=0: in the file's layout), the
 * same on 4 KB pages (anon), or the file's mapping itself (mmap: the file's layout). -t: that one tensor only, over and over
 * (from the caches where it fits: the kernel's compute speed without the memory).
 *
 * --peak: the core's integer-dot peak, one thread: independent chains of vpdpbusd (512- and
 * 256-bit) or, without VNNI, AVX2 maddubs+madd, in registers. GMAC/s = 8-bit products per
 * second, the ceiling the batched kernels are measured against. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "kvprobe/gguf.h"
#include "kvprobe/tensor.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- --peak -------------------------------------------------------------------------------- */

#define PEAK_ITERS 20000000L
#define PEAK_CHAINS 12 /* independent accumulators: enough to cover the latency, none spilled */

/* Each chain starts from its own value (and, for AVX2, multiplies its own operand): chains that
 * start equal and do the same operations are one value to the compiler, which then computes one
 * chain and reported 10 / latency instead of the throughput (2.5x the true peak on Zen 4). */
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
static double peak512(void) {
    __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5), c[PEAK_CHAINS];
    for (int k = 0; k < PEAK_CHAINS; k++) c[k] = _mm512_set1_epi32(k);
    double t0 = now_s();
    for (long i = 0; i < PEAK_ITERS; i++) {
#pragma GCC unroll 16
        for (int k = 0; k < PEAK_CHAINS; k++) c[k] = _mm512_dpbusd_epi32(c[k], a, b);
        __asm__ volatile("" : "+v"(a));
    }
    double t = now_s() - t0;
    for (int k = 1; k < PEAK_CHAINS; k++) c[0] = _mm512_add_epi32(c[0], c[k]);
    volatile int sink = _mm512_reduce_add_epi32(c[0]);
    (void)sink;
    return (double)PEAK_CHAINS * 64 * PEAK_ITERS / t / 1e9;
}
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512VL__) || defined(__AVXVNNI__)
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define DP256 _mm256_dpbusd_epi32
#else
#define DP256 _mm256_dpbusd_avx_epi32
#endif
static double peak256(void) {
    __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(5), c[PEAK_CHAINS];
    for (int k = 0; k < PEAK_CHAINS; k++) c[k] = _mm256_set1_epi32(k);
    double t0 = now_s();
    for (long i = 0; i < PEAK_ITERS; i++) {
#pragma GCC unroll 16
        for (int k = 0; k < PEAK_CHAINS; k++) c[k] = DP256(c[k], a, b);
        __asm__ volatile("" : "+v"(a));
    }
    double t = now_s() - t0;
    for (int k = 1; k < PEAK_CHAINS; k++) c[0] = _mm256_add_epi32(c[0], c[k]);
    volatile int sink = _mm256_extract_epi32(c[0], 0);
    (void)sink;
    return (double)PEAK_CHAINS * 32 * PEAK_ITERS / t / 1e9;
}
#elif defined(__AVX2__)
static double peak256(void) { /* maddubs + madd: the AVX2 kernels' pair of instructions */
    enum { C = 6 };
    __m256i a = _mm256_set1_epi8(3), one = _mm256_set1_epi16(1), b[C], c[C];
    for (int k = 0; k < C; k++) b[k] = _mm256_set1_epi8((char)(5 + k)), c[k] = _mm256_set1_epi32(k);
    double t0 = now_s();
    for (long i = 0; i < PEAK_ITERS; i++) {
#pragma GCC unroll 8
        for (int k = 0; k < C; k++) c[k] = _mm256_add_epi32(c[k], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b[k]), one));
        __asm__ volatile("" : "+v"(a));
    }
    double t = now_s() - t0;
    for (int k = 1; k < C; k++) c[0] = _mm256_add_epi32(c[0], c[k]);
    volatile int sink = _mm256_extract_epi32(c[0], 0);
    (void)sink;
    return (double)C * 32 * PEAK_ITERS / t / 1e9;
}
#endif

static int run_peak(void) {
    printf("isa=%s\n", kvp_qdot_isa());
#if defined(__AVX512VNNI__) && defined(__AVX512F__)
    printf("peak_gmacs_512=%.1f\n", peak512());
#endif
#if defined(__AVX2__)
    printf("peak_gmacs_256=%.1f\n", peak256());
#else
    printf("peak: no SIMD integer dot in this build\n");
#endif
    return 0;
}

/* ---- the weights of one forward step ------------------------------------------------------- */

typedef struct per_type {
    double seconds, bytes, macs;
    int tensors;
} per_type;

static int is_matmul_weight(const gguf_file *f, const gguf_tensor *t) {
    if (t->n_dims != 2 || !kvp_qdot_supported(t->type) || t->ne[0] % 32) return 0;
    size_t len = t->name.len;
    if (len < 7 || memcmp(t->name.ptr + len - 7, ".weight", 7)) return 0;
    if (len == 16 && !memcmp(t->name.ptr, "token_embd", 10)) return gguf_find_tensor(f, "output.weight") == NULL;
    return 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--peak")) return run_peak();
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [-b BATCH] [-p q8|q8x2] [-s SECONDS] | --peak\n", argv[0]);
        return 2;
    }
    int batch = 1, two = 0;
    double secs = 3.0;
    const char *mem = "huge", *only = NULL;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-b")) batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) two = !strcmp(argv[i + 1], "q8x2");
        else if (!strcmp(argv[i], "-s")) secs = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "-m")) mem = argv[i + 1];
        else if (!strcmp(argv[i], "-t")) only = argv[i + 1];
        else {
            fprintf(stderr, "qdot-bench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (batch < 1 || batch > 512) {
        fprintf(stderr, "qdot-bench: batch must be 1..512\n");
        return 2;
    }
    kvp_error err = {0};
    gguf_file *f = gguf_open(argv[1], &err);
    if (!f) {
        fprintf(stderr, "qdot-bench: %s\n", err.msg);
        return 1;
    }
    int64_t nmax = 0, rmax = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (is_matmul_weight(f, &f->tensors[i])) {
            if (f->tensors[i].ne[0] > nmax) nmax = f->tensors[i].ne[0];
            if (f->tensors[i].ne[1] > rmax) rmax = f->tensors[i].ne[1];
        }
    if (!nmax) {
        fprintf(stderr, "qdot-bench: %s has no quantized matmul weights\n", argv[1]);
        return 1;
    }
    /* weights elsewhere than the mapping: one anonymous copy of every matmul weight, in the
     * layout the engine repacks it into at load (kvp_repack_type; KVPROBE_REPACK=0: the file's) */
    const void **wdata = calloc(f->n_tensors, sizeof *wdata);
    enum kvp_type *wtype = calloc(f->n_tensors, sizeof *wtype);
    const char *repack_env = getenv("KVPROBE_REPACK");
    int repack = !(repack_env && !strcmp(repack_env, "0"));
    if (!wdata || !wtype) return 1;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        wdata[i] = t->data;
        wtype[i] = t->type;
        if (!strcmp(mem, "mmap") || !is_matmul_weight(f, t)) continue;
        size_t held = repack ? (size_t)t->ne[1] * kvp_row_bytes(kvp_repack_type(t->type), t->ne[0]) : (size_t)t->nbytes;
        size_t sz = (held + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
        void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            fprintf(stderr, "qdot-bench: cannot map %zu bytes\n", sz);
            return 1;
        }
        if (!strcmp(mem, "huge")) madvise(p, sz, MADV_HUGEPAGE);
        if (repack) {
            wtype[i] = kvp_repack_type(t->type);
            kvp_repack_rows(t->type, t->data, p, t->ne[1], t->ne[0]);
        } else {
            memcpy(p, t->data, (size_t)t->nbytes);
        }
        wdata[i] = p;
    }
    /* activations: random normal-ish rows, quantized once per input width (as the engine does) */
    float *x = malloc(sizeof(float) * (size_t)nmax);
    int8_t *q = malloc((size_t)batch * nmax), *lo = two ? malloc((size_t)batch * nmax) : NULL;
    float *d = malloc(sizeof(float) * (size_t)batch * (nmax / 32));
    float *outbuf = malloc(sizeof(float) * (size_t)batch * rmax);
    float **out = malloc(sizeof(float *) * (size_t)batch);
    kvp_qact widest = {nmax, batch, q, d, lo, NULL};
    const kvp_qkernels *k = kvp_qkernels_select(NULL, NULL); /* the default, or $KVPROBE_KERNELS */
    if (!k) {
        fprintf(stderr, "qdot-bench: KVPROBE_KERNELS names no kernel variant this CPU runs\n");
        return 1;
    }
    size_t pack_bytes = k->pack_bytes(&widest);
    void *pack = malloc(pack_bytes ? pack_bytes : 1);
    if (!x || !q || (two && !lo) || !d || !outbuf || !out || !pack) {
        fprintf(stderr, "qdot-bench: out of memory\n");
        return 1;
    }
    uint64_t s = 88172645463325252ULL;
    for (int j = 0; j < batch; j++) out[j] = outbuf + (size_t)j * rmax;

    per_type pt[64] = {{0}};
    double t_end = now_s() + secs, total = 0;
    int passes = 0;
    float sink = 0;
    do {
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const gguf_tensor *t = &f->tensors[i];
            if (!is_matmul_weight(f, t)) continue;
            if (only && (strlen(only) != t->name.len || memcmp(only, t->name.ptr, t->name.len))) continue;
            int64_t n = t->ne[0], rows = t->ne[1];
            for (int j = 0; j < batch; j++) {
                for (int64_t k = 0; k < n; k++) {
                    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                    x[k] = (float)((int64_t)(s % 2001) - 1000) * 1e-3f;
                }
                if (two) k->quantize_row2(x, n, q + (size_t)j * n, d + (size_t)j * (n / 32), lo + (size_t)j * n);
                else k->quantize_row(x, n, q + (size_t)j * n, d + (size_t)j * (n / 32));
            }
            kvp_qact a = {n, batch, q, d, lo, NULL};
            k->pack(&a, pack); /* once per input, as the engine does (not timed) */
            const size_t rb = kvp_row_bytes(wtype[i], t->ne[0]); /* the layout read (a repack may differ in size) */
            double t0 = now_s();
            k->rows(wtype[i], wdata[i], rb, 0, rows, &a, out);
            double dt = now_s() - t0;
            sink += out[0][0];
            per_type *p = &pt[wtype[i] & 63];
            p->seconds += dt, p->bytes += (double)rb * rows, p->macs += (double)n * rows * batch;
            if (!passes) p->tensors++;
            total += dt;
        }
        passes++;
    } while (now_s() < t_end);

    printf("# %s, batch %d, %s, weights %s, isa %s, %d passes (sink %g)\n", argv[1], batch, two ? "q8x2" : "q8",
           mem, k->name, passes, (double)sink);
    printf("| type | tensors | MiB | ms/pass | GB/s | GMAC/s |\n|---|---|---|---|---|---|\n");
    double bytes = 0, macs = 0;
    for (int k = 0; k < 64; k++) {
        if (!pt[k].tensors) continue;
        printf("| %s | %d | %.1f | %.3f | %.2f | %.2f |\n", kvp_type_name((uint32_t)k), pt[k].tensors,
               pt[k].bytes / passes / 1048576.0, pt[k].seconds / passes * 1e3, pt[k].bytes / pt[k].seconds / 1e9,
               pt[k].macs / pt[k].seconds / 1e9);
        bytes += pt[k].bytes, macs += pt[k].macs;
    }
    printf("| all | | %.1f | %.3f | %.2f | %.2f |\n", bytes / passes / 1048576.0, total / passes * 1e3,
           bytes / total / 1e9, macs / total / 1e9);
    printf("passes_per_s=%.2f gbps=%.2f gmacs=%.2f\n", passes / total, bytes / total / 1e9, macs / total / 1e9);
    free(x), free(q), free(lo), free(d), free(outbuf), free(out), free(pack), free(wdata), free(wtype);
    gguf_close(f);
    return 0;
}
