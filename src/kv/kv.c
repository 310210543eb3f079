/* The editable KV cache: allocation, copies, range reads/writes, eviction flags. */
#include <stdlib.h>
#include <string.h>

#include "kv_impl.h"
#include "kvprobe/tensor.h"

void kv_store(const kvp_kv *kv, void *slot, const float *src, int n) {
    if (kv->type == KVP_KV_F32) {
        memcpy(slot, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *d = slot;
    for (int i = 0; i < n; i++) d[i] = kvp_f32_to_fp16(src[i]);
}

void kv_load(const kvp_kv *kv, const void *slot, float *dst, int n) {
    if (kv->type == KVP_KV_F32) {
        memcpy(dst, slot, (size_t)n * sizeof(float));
        return;
    }
    const uint16_t *s = slot;
    for (int i = 0; i < n; i++) dst[i] = kvp_fp16_to_f32(s[i]);
}

static kvp_kv *kv_alloc(int n_layer, int n_ctx, int k_row, int v_row, kvp_kv_type type, kvp_error *err) {
    kvp_kv *kv = calloc(1, sizeof *kv);
    if (!kv) goto oom;
    kv->n_layer = n_layer;
    kv->n_ctx = n_ctx;
    kv->k_row = k_row;
    kv->v_row = v_row;
    kv->type = type;
    size_t es = kv_elem_size(kv), slots = (size_t)n_layer * n_ctx;
    kv->k = calloc(slots * k_row, es);
    kv->v = calloc(slots * v_row, es);
    kv->active = malloc(slots);
    if (!kv->k || !kv->v || !kv->active) goto oom;
    memset(kv->active, 1, slots);
    return kv;
oom:
    kvp_kv_free(kv);
    kvp_fail(err, KVP_E_NOMEM, "out of memory for a KV cache of %d layers x %d positions", n_layer, n_ctx);
    return NULL;
}

kvp_kv *kvp_kv_new(const kvp_model *m, int n_ctx, kvp_kv_type type, kvp_error *err) {
    const kvp_hparams *hp = kvp_model_hparams(m);
    if (n_ctx <= 0) {
        kvp_fail(err, KVP_E_INVALID, "KV cache size must be positive (got %d)", n_ctx);
        return NULL;
    }
    if (type != KVP_KV_F32 && type != KVP_KV_F16) {
        kvp_fail(err, KVP_E_INVALID, "unknown KV cache type %d", (int)type);
        return NULL;
    }
    return kv_alloc(hp->n_layer, n_ctx, hp->n_head_kv * hp->head_dim, hp->n_head_kv * hp->head_dim_v, type, err);
}

void kvp_kv_free(kvp_kv *kv) {
    if (!kv) return;
    free(kv->k);
    free(kv->v);
    free(kv->active);
    free(kv);
}

static int same_shape(const kvp_kv *a, const kvp_kv *b) {
    return a->n_layer == b->n_layer && a->n_ctx == b->n_ctx && a->k_row == b->k_row &&
           a->v_row == b->v_row && a->type == b->type;
}

int kvp_kv_copy(kvp_kv *dst, const kvp_kv *src, kvp_error *err) {
    if (!same_shape(dst, src))
        return kvp_fail(err, KVP_E_INVALID, "kv copy: caches differ in shape or type");
    size_t es = kv_elem_size(src);
    for (int l = 0; l < src->n_layer; l++) {
        memcpy(kv_k_slot(dst, l, 0), kv_k_slot(src, l, 0), (size_t)src->len * src->k_row * es);
        memcpy(kv_v_slot(dst, l, 0), kv_v_slot(src, l, 0), (size_t)src->len * src->v_row * es);
    }
    memcpy(dst->active, src->active, (size_t)src->n_layer * src->n_ctx);
    dst->len = src->len;
    return KVP_OK;
}

kvp_kv *kvp_kv_clone(const kvp_kv *src, kvp_error *err) {
    kvp_kv *kv = kv_alloc(src->n_layer, src->n_ctx, src->k_row, src->v_row, src->type, err);
    if (kv && kvp_kv_copy(kv, src, err)) {
        kvp_kv_free(kv);
        return NULL;
    }
    return kv;
}

int kvp_kv_len(const kvp_kv *kv) { return kv->len; }
size_t kvp_kv_bytes(const kvp_kv *kv) {
    size_t slots = (size_t)kv->n_layer * kv->n_ctx;
    return slots * (size_t)(kv->k_row + kv->v_row) * kv_elem_size(kv) + slots;
}
int kvp_kv_capacity(const kvp_kv *kv) { return kv->n_ctx; }
int kvp_kv_n_layer(const kvp_kv *kv) { return kv->n_layer; }
kvp_kv_type kvp_kv_dtype(const kvp_kv *kv) { return kv->type; }
int kvp_kv_row_size(const kvp_kv *kv, kvp_kv_which which) { return which == KVP_V ? kv->v_row : kv->k_row; }

int kvp_kv_truncate(kvp_kv *kv, int n, kvp_error *err) {
    if (n < 0 || n > kv->len)
        return kvp_fail(err, KVP_E_INVALID, "kv truncate to %d: cache holds %d positions", n, kv->len);
    /* Dropped slots become active again so a later append starts from a clean slate. */
    for (int l = 0; l < kv->n_layer; l++) memset(kv->active + (size_t)l * kv->n_ctx + n, 1, (size_t)(kv->len - n));
    kv->len = n;
    return KVP_OK;
}

static int check_range(const kvp_kv *kv, kvp_kv_which which, int l0, int l1, int p0, int p1, const char *op,
                       kvp_error *err) {
    if (which < KVP_K || which > KVP_KV_BOTH)
        return kvp_fail(err, KVP_E_INVALID, "kv %s: invalid K/V selector %d", op, (int)which);
    if (l0 < 0 || l1 > kv->n_layer || l0 > l1 || p0 < 0 || p1 > kv->len || p0 > p1)
        return kvp_fail(err, KVP_E_INVALID, "kv %s: range layers [%d,%d) x positions [%d,%d) outside [0,%d) x [0,%d)",
                        op, l0, l1, p0, p1, kv->n_layer, kv->len);
    return KVP_OK;
}

/* Walk every (part, layer, position) slot of a range, calling fn with the slot pointer. */
typedef void (*slot_fn)(kvp_kv *kv, void *slot, int n, void *user, size_t index);

static void for_each_slot(kvp_kv *kv, kvp_kv_which which, int l0, int l1, int p0, int p1, slot_fn fn, void *user) {
    size_t index = 0;
    for (int part = KVP_K; part <= KVP_V; part <<= 1) {
        if (!(which & part)) continue;
        int n = part == KVP_K ? kv->k_row : kv->v_row;
        for (int l = l0; l < l1; l++)
            for (int p = p0; p < p1; p++, index += (size_t)n)
                fn(kv, part == KVP_K ? kv_k_slot(kv, l, p) : kv_v_slot(kv, l, p), n, user, index);
    }
}

static void slot_read(kvp_kv *kv, void *slot, int n, void *user, size_t index) { kv_load(kv, slot, (float *)user + index, n); }
static void slot_write(kvp_kv *kv, void *slot, int n, void *user, size_t index) {
    kv_store(kv, slot, (const float *)user + index, n);
}
static void slot_fill(kvp_kv *kv, void *slot, int n, void *user, size_t index) {
    (void)index;
    float v = *(const float *)user;
    if (kv->type == KVP_KV_F32) {
        for (int i = 0; i < n; i++) ((float *)slot)[i] = v;
    } else {
        uint16_t h = kvp_f32_to_fp16(v);
        for (int i = 0; i < n; i++) ((uint16_t *)slot)[i] = h;
    }
}

int kvp_kv_read(const kvp_kv *kv, kvp_kv_which which, int l0, int l1, int p0, int p1, float *out, kvp_error *err) {
    if (check_range(kv, which, l0, l1, p0, p1, "read", err)) return err->code;
    for_each_slot((kvp_kv *)kv, which, l0, l1, p0, p1, slot_read, out);
    return KVP_OK;
}

int kvp_kv_write(kvp_kv *kv, kvp_kv_which which, int l0, int l1, int p0, int p1, const float *in, kvp_error *err) {
    if (check_range(kv, which, l0, l1, p0, p1, "write", err)) return err->code;
    for_each_slot(kv, which, l0, l1, p0, p1, slot_write, (void *)in);
    return KVP_OK;
}

int kvp_kv_fill(kvp_kv *kv, kvp_kv_which which, int l0, int l1, int p0, int p1, float value, kvp_error *err) {
    if (check_range(kv, which, l0, l1, p0, p1, "fill", err)) return err->code;
    for_each_slot(kv, which, l0, l1, p0, p1, slot_fill, &value);
    return KVP_OK;
}

int kvp_kv_copy_range(kvp_kv *dst, const kvp_kv *src, kvp_kv_which which, int l0, int l1, int p0, int p1,
                      kvp_error *err) {
    if (!same_shape(dst, src))
        return kvp_fail(err, KVP_E_INVALID, "kv copy_range: caches differ in shape or type");
    if (check_range(dst, which, l0, l1, p0, p1, "copy_range (destination)", err) ||
        check_range(src, which, l0, l1, p0, p1, "copy_range (source)", err))
        return err->code;
    size_t es = kv_elem_size(src);
    for (int l = l0; l < l1; l++) {
        size_t np = (size_t)(p1 - p0);
        if (which & KVP_K) memcpy(kv_k_slot(dst, l, p0), kv_k_slot(src, l, p0), np * src->k_row * es);
        if (which & KVP_V) memcpy(kv_v_slot(dst, l, p0), kv_v_slot(src, l, p0), np * src->v_row * es);
    }
    return KVP_OK;
}

int kvp_kv_set_active(kvp_kv *kv, int l0, int l1, int p0, int p1, int active, kvp_error *err) {
    if (check_range(kv, KVP_KV_BOTH, l0, l1, p0, p1, "set_active", err)) return err->code;
    for (int l = l0; l < l1; l++) memset(kv->active + (size_t)l * kv->n_ctx + p0, active ? 1 : 0, (size_t)(p1 - p0));
    return KVP_OK;
}

int kvp_kv_is_active(const kvp_kv *kv, int layer, int pos) {
    if (layer < 0 || layer >= kv->n_layer || pos < 0 || pos >= kv->n_ctx) return 0;
    return kv->active[(size_t)layer * kv->n_ctx + pos];
}
