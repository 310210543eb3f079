/* kvprobe — model loading and the forward pass.
 *
 * Data flow: kvp_model (weights, mmap'd GGUF) + kvp_ctx (threads, scratch buffers) run a
 * batch of rows; each row is one token at one position of one KV cache (kvp_kv, see kv.h).
 * Prefill is a batch of consecutive positions of one cache; the splice sweep batches the
 * next token of many forked caches. Rows of the same cache see each other causally. */
#ifndef KVPROBE_MODEL_H
#define KVPROBE_MODEL_H

#include <stdint.h>

#include "kvprobe/error.h"
#include "kvprobe/gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvp_arch { KVP_ARCH_LLAMA = 0, KVP_ARCH_QWEN3 = 1, KVP_ARCH_GEMMA3 = 2, KVP_ARCH_QWEN2 = 3 } kvp_arch;

/* Hyper-parameters, all read from GGUF metadata (never from the model's name). */
typedef struct kvp_hparams {
    kvp_arch arch;
    const char *arch_name;
    int n_vocab;
    int n_ctx_train;
    int n_embd;
    int n_layer;
    int n_head;
    int n_head_kv;
    int head_dim;        /* key/query head size */
    int head_dim_v;      /* value head size */
    int n_ff;
    int n_rot;           /* rotary dims (== head_dim for the supported families) */
    float rms_eps;
    float rope_base;       /* global layers */
    float rope_base_swa;   /* sliding-window layers */
    float rope_freq_scale; /* global layers: angle multiplier (1/linear factor) */
    int rope_neox;       /* 1: pairs (i, i+d/2) (Qwen3, Gemma 3); 0: adjacent pairs (llama GGUF) */
    float attn_scale;    /* multiplies q.k */
    float embed_scale;   /* multiplies token embeddings (Gemma: sqrt(n_embd)) */
    float final_softcap; /* 0 = none */
    int sliding_window;  /* 0 = none */
    const uint8_t *layer_is_swa; /* [n_layer]: 1 for sliding-window layers */
    int tied_output;     /* 1 if the LM head is token_embd */
    int has_rope_freqs;  /* llama3 rope scaling factors present */
} kvp_hparams;

typedef struct kvp_model kvp_model;

kvp_model *kvp_model_load(const char *path, kvp_error *err);
/* Build a model over an already parsed file; takes ownership of f (closed on failure too). */
kvp_model *kvp_model_from_gguf(gguf_file *f, kvp_error *err);
void kvp_model_free(kvp_model *m);
const kvp_hparams *kvp_model_hparams(const kvp_model *m);
const gguf_file *kvp_model_gguf(const kvp_model *m);

/* ---- execution context ------------------------------------------------------------------ */

/* How matmul inputs meet quantized weights (float weights always take f32 kernels). */
typedef enum kvp_precision {
    KVP_PREC_Q8 = 0,   /* activations rounded to 8-bit blocks of 32 with one scale, integer
                          kernels (llama.cpp's arithmetic): the fastest, generate's default */
    KVP_PREC_Q8X2 = 1, /* two 8-bit planes, x ~ d1*q1 + d2*q2 with q2 the rounded residual
                          (error <= max|x| / 64516 per block, 254x finer than q8): the same
                          integer kernels over twice the rows; the sweep's default, because
                          edited caches (ZERO) drive q8 far from the reference */
    KVP_PREC_F32 = 2,  /* f32 activations on dequantized weights: the parity path (--exact),
                          within 1e-3 of transformers */
} kvp_precision;

/* "q8", "q8x2", "f32"; kvp_precision_from_name returns -1 for an unknown name. */
const char *kvp_precision_name(kvp_precision p);
int kvp_precision_from_name(const char *name, kvp_precision *out);

typedef struct kvp_ctx_params {
    int n_threads;  /* 0 = number of online CPUs */
    int max_batch;  /* rows per forward call (prefill chunk / fork batch); 0 = 64 */
    kvp_precision precision;
    int emulate;    /* q8 / q8x2: f32 kernels on the rounded activations, i.e. the path's
                       arithmetic without its integer kernels (tests use it to tell kernel
                       errors from rounding) */
    const char *kernels; /* the integer kernels' variant (tensor.h: avx512-vnni, avx512-vnni-256,
                            avx-vnni, avx2, portable); NULL: $KVPROBE_KERNELS, else the CPU's
                            best. Every variant gives the same bits. */
} kvp_ctx_params;

typedef struct kvp_ctx kvp_ctx;

kvp_ctx *kvp_ctx_new(const kvp_model *m, const kvp_ctx_params *p, kvp_error *err);
void kvp_ctx_free(kvp_ctx *ctx);
int kvp_ctx_threads(const kvp_ctx *ctx);
int kvp_ctx_max_batch(const kvp_ctx *ctx);
kvp_precision kvp_ctx_precision(const kvp_ctx *ctx);
const char *kvp_ctx_kernels(const kvp_ctx *ctx); /* the kernels' variant in use */

struct kvp_kv;

/* One row of a batch: feed `token` at position `pos` of cache `kv`. If `logits` is non-NULL,
 * the next-token logits (n_vocab floats) are written there. pos must be <= the cache's
 * current length (positions are slots: writing at pos overwrites that slot and sets the
 * length to max(len, pos + 1)). */
typedef struct kvp_row {
    int32_t token;
    int32_t pos;
    struct kvp_kv *kv;
    float *logits;
} kvp_row;

int kvp_forward(kvp_ctx *ctx, const kvp_row *rows, int n_rows, kvp_error *err);

/* Convenience: append n tokens to kv (in chunks of max_batch). If logits_all is non-NULL it
 * receives n rows of logits; else if logits_last is non-NULL it receives the last row's. */
int kvp_decode(kvp_ctx *ctx, struct kvp_kv *kv, const int32_t *tokens, int n,
               float *logits_all, float *logits_last, kvp_error *err);

#ifdef __cplusplus
}
#endif
#endif
