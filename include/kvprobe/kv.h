/* kvprobe — the KV cache as an editable object.
 *
 * Layout: per layer, per position (slot), per KV head, head_dim values. Slot index ==
 * token position. Keys are stored AFTER RoPE (rotated for their own position), exactly as
 * attention consumes them; so moving a key to another position would need re-rotation,
 * while overwriting a slot with K computed for the same position (the BLANK donor, whose
 * scaffold tokens sit at the same positions) needs none.
 *
 * Sliding-window layers keep every position too (no ring buffer): attention only reads
 * their window, but every slot stays readable and editable.
 *
 * Each (layer, slot) also has an "active" flag: inactive slots are skipped by attention
 * (eviction / drop), as opposed to zeroed slots, which are still attended. */
#ifndef KVPROBE_KV_H
#define KVPROBE_KV_H

#include <stddef.h>
#include <stdint.h>

#include "kvprobe/error.h"
#include "kvprobe/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvp_kv_type { KVP_KV_F32 = 0, KVP_KV_F16 = 1 } kvp_kv_type;

typedef enum kvp_kv_which { KVP_K = 1, KVP_V = 2, KVP_KV_BOTH = 3 } kvp_kv_which;

typedef struct kvp_kv kvp_kv;

kvp_kv *kvp_kv_new(const kvp_model *m, int n_ctx, kvp_kv_type type, kvp_error *err);
void kvp_kv_free(kvp_kv *kv);
kvp_kv *kvp_kv_clone(const kvp_kv *src, kvp_error *err);
/* Copy src's contents (positions [0, len)) into dst; shapes must match. */
int kvp_kv_copy(kvp_kv *dst, const kvp_kv *src, kvp_error *err);

int kvp_kv_len(const kvp_kv *kv);         /* filled positions */
size_t kvp_kv_bytes(const kvp_kv *kv);    /* memory the cache holds (K, V and the active mask) */
int kvp_kv_capacity(const kvp_kv *kv);    /* n_ctx */
int kvp_kv_n_layer(const kvp_kv *kv);
int kvp_kv_row_size(const kvp_kv *kv, kvp_kv_which which); /* floats per (layer, slot) */
kvp_kv_type kvp_kv_dtype(const kvp_kv *kv);
/* Forget positions >= n (n <= len). Slots beyond become inactive-free, length = n. */
int kvp_kv_truncate(kvp_kv *kv, int n, kvp_error *err);

/* Ranges are half-open: layers [l0, l1), positions [p0, p1), within [0, n_layer) x [0, len).
 * Buffers are dense f32 in order [layer][pos][head][dim]; K and V separately. */
int kvp_kv_read(const kvp_kv *kv, kvp_kv_which which, int l0, int l1, int p0, int p1,
                float *out, kvp_error *err);
int kvp_kv_write(kvp_kv *kv, kvp_kv_which which, int l0, int l1, int p0, int p1,
                 const float *in, kvp_error *err);
/* Set every value in the range to `value` (0 for the ZERO condition). */
int kvp_kv_fill(kvp_kv *kv, kvp_kv_which which, int l0, int l1, int p0, int p1, float value,
                kvp_error *err);
/* Copy a range from src to the same layers/positions of dst (the splice primitive). */
int kvp_kv_copy_range(kvp_kv *dst, const kvp_kv *src, kvp_kv_which which, int l0, int l1,
                      int p0, int p1, kvp_error *err);
/* Mark slots attendable (1) or evicted (0). */
int kvp_kv_set_active(kvp_kv *kv, int l0, int l1, int p0, int p1, int active, kvp_error *err);
int kvp_kv_is_active(const kvp_kv *kv, int layer, int pos);

#ifdef __cplusplus
}
#endif
#endif
