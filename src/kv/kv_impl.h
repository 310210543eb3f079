/* Internal layout of kvp_kv, shared by kv.c (editing API) and the forward pass. */
#ifndef KVPROBE_KV_IMPL_H
#define KVPROBE_KV_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "kvprobe/kv.h"

struct kvp_kv {
    int n_layer;
    int n_ctx;
    int k_row;        /* floats per slot: n_head_kv * head_dim */
    int v_row;        /* n_head_kv * head_dim_v */
    kvp_kv_type type;
    int len;          /* filled positions */
    void *k;          /* [n_layer][n_ctx][k_row] of f32 or f16 */
    void *v;          /* [n_layer][n_ctx][v_row] */
    uint8_t *active;  /* [n_layer][n_ctx]: 1 = attended */
};

static inline size_t kv_elem_size(const struct kvp_kv *kv) { return kv->type == KVP_KV_F16 ? 2 : 4; }

static inline void *kv_k_slot(const struct kvp_kv *kv, int layer, int pos) {
    return (char *)kv->k + (((size_t)layer * kv->n_ctx + pos) * kv->k_row) * kv_elem_size(kv);
}
static inline void *kv_v_slot(const struct kvp_kv *kv, int layer, int pos) {
    return (char *)kv->v + (((size_t)layer * kv->n_ctx + pos) * kv->v_row) * kv_elem_size(kv);
}

/* Store / load n floats to / from a slot in the cache's element type. */
void kv_store(const struct kvp_kv *kv, void *slot, const float *src, int n);
void kv_load(const struct kvp_kv *kv, const void *slot, float *dst, int n);

#endif
