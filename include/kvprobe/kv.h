/* kvprobe — the KV cache as an editable object.
 *
 * Logical layout: per layer, per position, per KV head, head_dim values. Keys are stored
 * AFTER RoPE (rotated for their own position), exactly as attention consumes them; so moving
 * a key to another position would need re-rotation, while overwriting a position with K
 * computed for the same position (the BLANK donor, whose scaffold tokens sit at the same
 * positions) needs none.
 *
 * Storage is paged (16 positions per page and KV head), allocated as positions are written,
 * and shared: a clone shares its source's pages and copies one only when it first writes into
 * it, and kvp_kv_share_range makes several caches point at one donor's pages. Eviction
 * removes a position's K/V (per layer, or per KV head): attention never sees it again, its
 * memory is released once no slot of its page is used, and reading or editing it is an
 * error. kvp_kv_memory reports what a cache holds; kvp_kv_bytes_total counts shared pages
 * once over many caches.
 *
 * Sliding-window layers keep every position too (no ring buffer): attention only reads
 * their window, but every position stays readable and editable. */
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

int kvp_kv_len(const kvp_kv *kv);         /* positions [0, len) written (some may be evicted) */
int kvp_kv_capacity(const kvp_kv *kv);    /* n_ctx */
int kvp_kv_n_layer(const kvp_kv *kv);
int kvp_kv_row_size(const kvp_kv *kv, kvp_kv_which which); /* floats per (layer, slot) */
kvp_kv_type kvp_kv_dtype(const kvp_kv *kv);
/* Forget positions >= n (n <= len); length = n. */
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
/* Like kvp_kv_copy_range for K and V, but whole pages of src inside the range are shared
 * (not copied) where both caches hold every position of the page at its own slot; the rest is
 * copied. The donor can be freed afterwards: shared pages live while any cache uses them. */
int kvp_kv_share_range(kvp_kv *dst, const kvp_kv *src, int l0, int l1, int p0, int p1, kvp_error *err);

/* Evict positions [p0, p1) at layers [l0, l1) (every KV head, or heads [h0, h1)): removed
 * from attention for good; positions already evicted are skipped. */
int kvp_kv_evict(kvp_kv *kv, int l0, int l1, int p0, int p1, kvp_error *err);
int kvp_kv_evict_heads(kvp_kv *kv, int l0, int l1, int h0, int h1, int p0, int p1, kvp_error *err);
/* 1 if the position is held (not evicted) at every KV head of the layer. */
int kvp_kv_holds(const kvp_kv *kv, int layer, int pos);
int kvp_kv_n_head_kv(const kvp_kv *kv);
/* Positions held at (layer, KV head), or -1 if out of range. */
int kvp_kv_held(const kvp_kv *kv, int layer, int head);

/* ---- attention scores (for eviction policies: H2O, SnapKV) ------------------------------ */

/* While on, every forward row of this cache adds its attention probabilities, summed over the
 * query heads of each KV head, to a score per held (layer, KV head, position); turning it on
 * starts every score at 0, turning it off frees them. Clones copy the scores; eviction drops
 * the evicted ones. */
int kvp_kv_score(kvp_kv *kv, int on, kvp_error *err);
/* The held positions of (layer, KV head) in order and, if scores is not NULL, their scores
 * (0 while scoring is off); both [kvp_kv_held(kv, layer, head)]. */
int kvp_kv_slots(const kvp_kv *kv, int layer, int head, int32_t *pos, float *scores, kvp_error *err);
/* Keep only the held slots of (layer, KV head) with keep[i] != 0 (i over kvp_kv_slots). */
int kvp_kv_keep(kvp_kv *kv, int layer, int head, const uint8_t *keep, kvp_error *err);

/* ---- memory ----------------------------------------------------------------------------- */

typedef struct kvp_kv_mem {
    size_t bytes;        /* everything this cache references: its pages (whole) and page tables */
    size_t shared_bytes; /* of those, pages also referenced elsewhere (another cache or donor) */
    size_t page_bytes;   /* one page: 16 positions of one KV head (K, V, positions) */
    int pages, shared_pages;
    long slots;          /* (layer, KV head, position) entries held */
} kvp_kv_mem;

void kvp_kv_memory(const kvp_kv *kv, kvp_kv_mem *out);
size_t kvp_kv_bytes(const kvp_kv *kv); /* kvp_kv_memory's bytes */
/* Memory held by n caches together, each shared page counted once (same model shape). */
int kvp_kv_bytes_total(const kvp_kv *const *kvs, int n, size_t *bytes, kvp_error *err);

#ifdef __cplusplus
}
#endif
#endif
