/* Internal model structures shared by the loader (model.c) and the forward pass. */
#ifndef KVPROBE_MODEL_IMPL_H
#define KVPROBE_MODEL_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "kvprobe/model.h"
#include "kvprobe/tensor.h"

/* A 2-D weight in its on-disk format: n_out rows of n_in elements (GGUF ne = [n_in, n_out]). */
typedef struct kvp_weight {
    enum kvp_type type;
    const uint8_t *data;
    int64_t n_in, n_out;
    size_t row_bytes;
} kvp_weight;

typedef struct kvp_layer {
    float *attn_norm;      /* [n_embd] */
    kvp_weight wq, wk, wv; /* -> [n_head*hd], [n_kv*hd], [n_kv*hd_v] */
    float *bq, *bk, *bv;   /* projection biases (qwen2; optional elsewhere), else NULL */
    float *q_norm, *k_norm; /* [hd] per-head RMSNorm (qwen3, gemma3), else NULL */
    kvp_weight wo;
    float *post_attn_norm; /* gemma3 */
    float *ffn_norm;
    kvp_weight gate, up, down;
    float *post_ffw_norm;  /* gemma3 */
} kvp_layer;

struct kvp_model {
    gguf_file *gguf;
    kvp_hparams hp;
    uint8_t *layer_is_swa;
    kvp_weight tok_embd;
    kvp_weight output;
    float *output_norm;
    float *rope_freqs;     /* [n_rot/2] llama3 factors, or NULL */
    kvp_layer *layers;
    float **owned;         /* f32 copies of 1-D tensors */
    int n_owned, cap_owned;
    uint8_t *repacked;     /* the weights repacked at load (kvp_repack_type), one block, or NULL */
};

#endif
