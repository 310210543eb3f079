/* kvprobe — tensor element types (ggml numbering) and their row kernels.
 *
 * Weights stay in their on-disk block format; kernels dequantize a row (or dot a row with an
 * f32 vector) block by block. Dequantization is exact: it yields the same f32 values as
 * ggml's reference dequantizers and the gguf Python package. */
#ifndef KVPROBE_TENSOR_H
#define KVPROBE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "kvprobe/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values are ggml's on-disk ids (ggml.h); retired ids are never reused. */
enum kvp_type {
    KVP_TYPE_F32 = 0,
    KVP_TYPE_F16 = 1,
    KVP_TYPE_Q4_0 = 2,
    KVP_TYPE_Q4_1 = 3,
    KVP_TYPE_Q5_0 = 6,
    KVP_TYPE_Q5_1 = 7,
    KVP_TYPE_Q8_0 = 8,
    KVP_TYPE_Q8_1 = 9,
    KVP_TYPE_Q2_K = 10,
    KVP_TYPE_Q3_K = 11,
    KVP_TYPE_Q4_K = 12,
    KVP_TYPE_Q5_K = 13,
    KVP_TYPE_Q6_K = 14,
    KVP_TYPE_Q8_K = 15,
    KVP_TYPE_I8 = 24,
    KVP_TYPE_I16 = 25,
    KVP_TYPE_I32 = 26,
    KVP_TYPE_I64 = 27,
    KVP_TYPE_F64 = 28,
    KVP_TYPE_BF16 = 30,
    /* kvprobe's own layouts of the same values, made at load (kvp_repack_rows), never read from
     * a file (gguf_open refuses ids from KVP_TYPE_INTERNAL on): K-quants with their quants
     * regrouped lane = block for the decode kernels (src/tensor/kquant_layout.h). */
    KVP_TYPE_INTERNAL = 60,
    KVP_TYPE_Q4_K_LB = 60,
    KVP_TYPE_Q6_K_LB = 61,
    KVP_TYPE_COUNT = 64 /* upper bound on ids we know about */
};

typedef struct kvp_type_info {
    const char *name;       /* "Q4_K"; NULL for ids we do not know */
    uint32_t block_elems;   /* elements per block */
    uint32_t block_bytes;   /* bytes per block */
    int can_compute;        /* 1 if dequantize/dot kernels exist (weights may use it) */
} kvp_type_info;

/* Info for a ggml type id, or NULL if the id is unknown to kvprobe. */
const kvp_type_info *kvp_type_get(uint32_t type);
const char *kvp_type_name(uint32_t type); /* "unknown" for unknown ids */

/* Bytes of a row of n elements (n must be a multiple of block_elems). */
size_t kvp_row_bytes(enum kvp_type type, int64_t n);

/* The internal layout the engine repacks weights of this type into at load, or the type itself
 * when it has none. The repacked rows dequantize to the same floats, and the integer kernels
 * give the same bits on them, only faster. */
enum kvp_type kvp_repack_type(enum kvp_type type);
/* Rows of n elements of `type` into kvp_repack_type(type)'s layout: src holds nrows *
 * kvp_row_bytes(type, n) bytes, dst nrows * kvp_row_bytes(kvp_repack_type(type), n) (Q4_K's
 * is 148 bytes per 256 elements, the file's 144); they must not overlap. */
void kvp_repack_rows(enum kvp_type type, const void *src, void *dst, int64_t nrows, int64_t n);

/* Dequantize n elements (a multiple of the block size) from src into dst. */
void kvp_dequantize_row(enum kvp_type type, const void *src, float *dst, int64_t n);

/* Dot product of a row of n elements of `type` with f32 vector x (f32 accumulation). */
float kvp_dot_row(enum kvp_type type, const void *row, const float *x, int64_t n);

/* The same dot for nb vectors x + b*ldx (b < nb), dequantizing each block of the row once.
 * out[b] is bit-identical to kvp_dot_row(type, row, x + b*ldx, n): batching never changes
 * results. */
void kvp_dot_row_batch(enum kvp_type type, const void *row, const float *x, int64_t ldx, int nb, int64_t n,
                       float *out);

/* f32 dot product with a fixed summation order. */
float kvp_dot_f32(const float *a, const float *b, int64_t n);

/* ---- the fast path: 8-bit activations, integer block dots (src/tensor/qdot.c) ----------
 * Activation rows are quantized to blocks of 32 int8 with one f32 scale (d = max|x| / 127);
 * weight blocks are dotted with them in integer arithmetic and scaled once per 16 elements.
 * With a residual plane (q8x2) each block is x ~ d * (q + lo / 256): 16-bit activations
 * whose dot is two 8-bit dots combined in integers. Not exact: the result differs from
 * kvp_dot_row by the activations' rounding (README, "Parity"). Deterministic: batching,
 * tiling and threading never change a bit. */
typedef struct kvp_qact {
    int64_t n;  /* elements per row, a multiple of 32 */
    int nb;     /* rows */
    int8_t *q;  /* [nb][n] */
    float *d;   /* [nb][n / 32] block scales */
    int8_t *lo; /* [nb][n] residual plane in units of d / 256, or NULL (q8) */
    const void *pk; /* the rows packed for the batch kernels (kvp_qact_pack), or NULL */
} kvp_qact;

/* Batches of 4 or more rows run packed kernels where the build has them (AVX-512 VNNI): the
 * activations packed once per input, for every matmul that reads it (otherwise each call packs
 * its own). kvp_qact_pack_bytes is 0 where there is nothing to pack; kvp_qact_pack sets a->pk
 * to buf (or NULL). Packing changes no result. */
size_t kvp_qact_pack_bytes(const kvp_qact *a);
void kvp_qact_pack(kvp_qact *a, void *buf);

/* 1 if weights of this type have an integer kernel (the quantized types). */
int kvp_qdot_supported(enum kvp_type type);
/* Quantize n floats (a multiple of 32) into q[n] and d[n / 32]. Changing q, d or lo of a packed
 * kvp_qact needs a new kvp_qact_pack (or a->pk = NULL). */
void kvp_quantize_act_row(const float *x, int64_t n, int8_t *q, float *d);
/* The same q and d, plus the residual x/d - q (|.| <= 1/2) in units of 1/256 into lo (clamped
 * to +-127): x ~ d * (q + lo / 256) to within d / 512 (d / 256 where the clamp bites). */
void kvp_quantize_act_row2(const float *x, int64_t n, int8_t *q, float *d, int8_t *lo);
/* out[j][r] = row r of the weights . activation row j, for r in [r0, r1) and j < a->nb.
 * Weight rows are row_bytes apart and hold a->n elements. Splitting [r0, r1) at
 * multiples of kvp_qdot_row_multiple() keeps every tile full. */
void kvp_qdot_rows(enum kvp_type type, const void *weights, size_t row_bytes, int64_t r0, int64_t r1,
                   const kvp_qact *a, float *const *out);
int kvp_qdot_row_multiple(void);
/* The instruction set of the kernels above: those kvp_qkernels_select(NULL) gives. */
const char *kvp_qdot_isa(void);

/* ---- kernel variants, chosen at run time ------------------------------------------------
 * One build holds the integer kernels for several instruction sets; a context picks one
 * (kvp_ctx_params.kernels), the functions above use the default:
 *   amx-int8          batches of 16+ on AMX tiles (16 rows x 16 activations per product), the
 *                     rest as avx512-vnni (Intel Sapphire Rapids and later; Linux grants the
 *                     tile state on request)
 *   avx512-vnni       VNNI, 512-bit packed tiles for batches of 4+ (AVX-512 F/BW/VL + VNNI)
 *   avx512-vnni-256   the same instructions at 256 bits only (no 512-bit tiles)
 *   avx-vnni          VEX-coded VNNI, 256 bits (AVX-VNNI: Alder Lake and later)
 *   avx2              maddubs (AVX2 + FMA + F16C)
 *   portable          plain C
 * Every variant computes the same bits ("the arithmetic every path follows", qdot_kernels.h),
 * so the choice changes speed, never a result. The default is the first this CPU runs in the
 * order above, unless the environment variable KVPROBE_KERNELS names another. */
typedef struct kvp_qkernels {
    const char *name;
    void (*quantize_row)(const float *x, int64_t n, int8_t *q, float *d);
    void (*quantize_row2)(const float *x, int64_t n, int8_t *q, float *d, int8_t *lo);
    size_t (*pack_bytes)(const kvp_qact *a);
    void (*pack)(kvp_qact *a, void *buf); /* a->pk is this variant's own packing */
    void (*rows)(enum kvp_type type, const void *weights, size_t row_bytes, int64_t r0, int64_t r1, const kvp_qact *a,
                 float *const *out);
    int (*row_multiple)(void);
} kvp_qkernels;

/* The variant named, or for NULL / "auto" the default; NULL (and a message in err, if
 * given) when the name is unknown or this CPU cannot run it. */
const kvp_qkernels *kvp_qkernels_select(const char *name, kvp_error *err);
/* The variants this CPU runs, in the order above (at most max); returns how many. */
int kvp_qkernels_available(const kvp_qkernels **out, int max);

/* fp16 / bf16 scalar conversions (IEEE binary16 with subnormals; bf16 = upper f32 half). */
float kvp_fp16_to_f32(uint16_t h);
uint16_t kvp_f32_to_fp16(float f); /* round to nearest even */
float kvp_bf16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
