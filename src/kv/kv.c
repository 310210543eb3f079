/* The editable KV cache: allocation, copies (shared pages), range reads/writes, eviction,
 * and the memory it holds. Storage is in pages.c (kv_impl.h describes the layout). */
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

static kvp_kv *kv_alloc(const kvp_kv *shape, kvp_error *err) {
    kvp_kv *kv = calloc(1, sizeof *kv);
    if (kv) {
        *kv = *shape;
        kv->len = 0;
        kv->lists = calloc((size_t)shape->n_layer * shape->n_head_kv, sizeof *kv->lists);
        for (int i = 0; kv->lists && i < shape->n_layer * shape->n_head_kv; i++) kv->lists[i].dense = 1;
    }
    if (!kv || !kv->lists) {
        free(kv);
        kvp_fail(err, KVP_E_NOMEM, "out of memory for a KV cache of %d layers", shape->n_layer);
        return NULL;
    }
    return kv;
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
    kvp_kv shape = {.n_layer = hp->n_layer,
                    .n_head_kv = hp->n_head_kv,
                    .head_dim = hp->head_dim,
                    .head_dim_v = hp->head_dim_v,
                    .n_ctx = n_ctx,
                    .k_row = hp->n_head_kv * hp->head_dim,
                    .v_row = hp->n_head_kv * hp->head_dim_v,
                    .type = type};
    return kv_alloc(&shape, err);
}

static int n_lists(const kvp_kv *kv) { return kv->n_layer * kv->n_head_kv; }

void kvp_kv_free(kvp_kv *kv) {
    if (!kv) return;
    for (int i = 0; kv->lists && i < n_lists(kv); i++) kv_list_free(&kv->lists[i]);
    free(kv->lists);
    free(kv);
}

/* Same model geometry and element type (capacities may differ). */
static int same_shape(const kvp_kv *a, const kvp_kv *b) {
    return a->n_layer == b->n_layer && a->n_head_kv == b->n_head_kv && a->head_dim == b->head_dim &&
           a->head_dim_v == b->head_dim_v && a->type == b->type;
}

int kvp_kv_copy(kvp_kv *dst, const kvp_kv *src, kvp_error *err) {
    if (!same_shape(dst, src))
        return kvp_fail(err, KVP_E_INVALID, "kv copy: caches differ in shape or type");
    if (src->len > dst->n_ctx)
        return kvp_fail(err, KVP_E_INVALID, "kv copy: %d positions do not fit a cache of %d", src->len, dst->n_ctx);
    for (int i = 0; i < n_lists(src); i++)
        if (kv_list_share(src, &dst->lists[i], &src->lists[i])) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    dst->len = src->len;
    dst->scoring = src->scoring;
    return KVP_OK;
}

kvp_kv *kvp_kv_clone(const kvp_kv *src, kvp_error *err) {
    kvp_kv *kv = kv_alloc(src, err);
    if (kv && kvp_kv_copy(kv, src, err)) {
        kvp_kv_free(kv);
        return NULL;
    }
    return kv;
}

int kvp_kv_len(const kvp_kv *kv) { return kv->len; }
int kvp_kv_capacity(const kvp_kv *kv) { return kv->n_ctx; }
int kvp_kv_n_layer(const kvp_kv *kv) { return kv->n_layer; }
kvp_kv_type kvp_kv_dtype(const kvp_kv *kv) { return kv->type; }
int kvp_kv_row_size(const kvp_kv *kv, kvp_kv_which which) { return which == KVP_V ? kv->v_row : kv->k_row; }

/* ---- memory ------------------------------------------------------------------------------ */

static size_t list_overhead(const kvp_kv *kv) {
    size_t b = sizeof *kv + (size_t)n_lists(kv) * sizeof(kv_list);
    for (int i = 0; i < n_lists(kv); i++) b += (size_t)kv->lists[i].cap * sizeof(kv_page *);
    return b;
}

void kvp_kv_memory(const kvp_kv *kv, kvp_kv_mem *m) {
    memset(m, 0, sizeof *m);
    size_t pb = kv_page_bytes(kv);
    for (int i = 0; i < n_lists(kv); i++) {
        const kv_list *li = &kv->lists[i];
        m->slots += li->n;
        for (int j = 0; j < (li->n + KV_PAGE - 1) / KV_PAGE; j++) {
            m->pages++;
            if (atomic_load_explicit(&li->pages[j]->refs, memory_order_relaxed) > 1) m->shared_pages++;
        }
    }
    m->page_bytes = pb;
    m->bytes = (size_t)m->pages * pb + list_overhead(kv);
    m->shared_bytes = (size_t)m->shared_pages * pb;
}

size_t kvp_kv_bytes(const kvp_kv *kv) {
    kvp_kv_mem m;
    kvp_kv_memory(kv, &m);
    return m.bytes;
}

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

int kvp_kv_bytes_total(const kvp_kv *const *kvs, int n, size_t *bytes, kvp_error *err) {
    size_t count = 0, overhead = 0;
    for (int k = 0; k < n; k++) {
        overhead += list_overhead(kvs[k]);
        for (int i = 0; i < n_lists(kvs[k]); i++) count += (size_t)(kvs[k]->lists[i].n + KV_PAGE - 1) / KV_PAGE;
    }
    const void **all = malloc((count ? count : 1) * sizeof *all);
    if (!all) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    size_t at = 0;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < n_lists(kvs[k]); i++)
            for (int j = 0; j < (kvs[k]->lists[i].n + KV_PAGE - 1) / KV_PAGE; j++) all[at++] = kvs[k]->lists[i].pages[j];
    qsort(all, count, sizeof *all, cmp_ptr);
    size_t distinct = 0;
    for (size_t i = 0; i < count; i++) distinct += i == 0 || all[i] != all[i - 1];
    free(all);
    /* every cache of one call has the same page size, or its own when mixed */
    size_t pb = n ? kv_page_bytes(kvs[0]) : 0;
    for (int k = 1; k < n; k++)
        if (kv_page_bytes(kvs[k]) != pb) return kvp_fail(err, KVP_E_INVALID, "kv bytes_total: caches of different shapes");
    *bytes = distinct * pb + overhead;
    return KVP_OK;
}

/* ---- positions ---------------------------------------------------------------------------- */

int kvp_kv_truncate(kvp_kv *kv, int n, kvp_error *err) {
    if (n < 0 || n > kv->len)
        return kvp_fail(err, KVP_E_INVALID, "kv truncate to %d: cache holds %d positions", n, kv->len);
    for (int i = 0; i < n_lists(kv); i++) kv_truncate_list(&kv->lists[i], n);
    kv->len = n;
    return KVP_OK;
}

int kv_reserve(kvp_kv *kv, int pos, kvp_error *err) {
    for (int l = 0; l < kv->n_layer; l++)
        for (int h = 0; h < kv->n_head_kv; h++) {
            kv_list *li = kv_list_at(kv, l, h);
            int last = li->n ? kv_slot_pos(li, li->n - 1) : -1;
            if (pos > last) {
                if (kv_append(kv, li, pos)) return kvp_fail(err, KVP_E_NOMEM, "out of memory for KV pages");
                continue;
            }
            int s = kv_find(li, pos);
            if (s < 0)
                return kvp_fail(err, KVP_E_INVALID,
                                "forward: position %d was evicted at layer %d (KV head %d) and cannot be rewritten", pos,
                                l, h);
            if (kv_make_writable(kv, li, s)) return kvp_fail(err, KVP_E_NOMEM, "out of memory for KV pages");
        }
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

/* Every position of the range held at every head of its layers (reading or editing an evicted
 * position is an error: its K/V no longer exist). */
static int check_held(const kvp_kv *kv, int l0, int l1, int p0, int p1, const char *op, kvp_error *err) {
    for (int l = l0; l < l1; l++)
        for (int h = 0; h < kv->n_head_kv; h++) {
            const kv_list *li = kv_list_at(kv, l, h);
            if (li->dense && p1 <= li->n) continue;
            int s = kv_lower(li, p0);
            for (int p = p0; p < p1; p++, s++)
                if (s >= li->n || kv_slot_pos(li, s) != p)
                    return kvp_fail(err, KVP_E_INVALID, "kv %s: layer %d position %d was evicted (KV head %d)", op, l, p,
                                    h);
        }
    return KVP_OK;
}

/* Walk every (part, layer, position, head) slot of a held range, calling fn with the slot
 * pointer and the index of its floats in the [layer][pos][head][dim] buffer (K, then V).
 * fn returns nonzero to stop (out of memory). */
typedef int (*slot_fn)(kvp_kv *kv, kv_list *li, int slot, int part, int n, void *user, size_t index);

static int for_each_slot(kvp_kv *kv, kvp_kv_which which, int l0, int l1, int p0, int p1, slot_fn fn, void *user) {
    size_t index = 0;
    for (int part = KVP_K; part <= KVP_V; part <<= 1) {
        if (!(which & part)) continue;
        int n = part == KVP_K ? kv->head_dim : kv->head_dim_v;
        for (int l = l0; l < l1; l++)
            for (int p = p0; p < p1; p++)
                for (int h = 0; h < kv->n_head_kv; h++, index += (size_t)n) {
                    kv_list *li = kv_list_at(kv, l, h);
                    if (fn(kv, li, kv_find(li, p), part, n, user, index)) return -1;
                }
    }
    return 0;
}

static void *slot_ptr(kvp_kv *kv, kv_list *li, int s, int part) {
    return part == KVP_K ? kv_slot_k(kv, li, s) : kv_slot_v(kv, li, s);
}
static int slot_read(kvp_kv *kv, kv_list *li, int s, int part, int n, void *user, size_t index) {
    kv_load(kv, slot_ptr(kv, li, s, part), (float *)user + index, n);
    return 0;
}
static int slot_write(kvp_kv *kv, kv_list *li, int s, int part, int n, void *user, size_t index) {
    if (kv_make_writable(kv, li, s)) return -1;
    kv_store(kv, slot_ptr(kv, li, s, part), (const float *)user + index, n);
    return 0;
}
static int slot_fill(kvp_kv *kv, kv_list *li, int s, int part, int n, void *user, size_t index) {
    (void)index;
    if (kv_make_writable(kv, li, s)) return -1;
    float v = *(const float *)user;
    void *slot = slot_ptr(kv, li, s, part);
    if (kv->type == KVP_KV_F32) {
        for (int i = 0; i < n; i++) ((float *)slot)[i] = v;
    } else {
        uint16_t h = kvp_f32_to_fp16(v);
        for (int i = 0; i < n; i++) ((uint16_t *)slot)[i] = h;
    }
    return 0;
}

int kvp_kv_read(const kvp_kv *kv, kvp_kv_which which, int l0, int l1, int p0, int p1, float *out, kvp_error *err) {
    if (check_range(kv, which, l0, l1, p0, p1, "read", err) || check_held(kv, l0, l1, p0, p1, "read", err))
        return err->code;
    for_each_slot((kvp_kv *)kv, which, l0, l1, p0, p1, slot_read, out);
    return KVP_OK;
}

int kvp_kv_write(kvp_kv *kv, kvp_kv_which which, int l0, int l1, int p0, int p1, const float *in, kvp_error *err) {
    if (check_range(kv, which, l0, l1, p0, p1, "write", err) || check_held(kv, l0, l1, p0, p1, "write", err))
        return err->code;
    if (for_each_slot(kv, which, l0, l1, p0, p1, slot_write, (void *)in))
        return kvp_fail(err, KVP_E_NOMEM, "out of memory for KV pages");
    return KVP_OK;
}

int kvp_kv_fill(kvp_kv *kv, kvp_kv_which which, int l0, int l1, int p0, int p1, float value, kvp_error *err) {
    if (check_range(kv, which, l0, l1, p0, p1, "fill", err) || check_held(kv, l0, l1, p0, p1, "fill", err))
        return err->code;
    if (for_each_slot(kv, which, l0, l1, p0, p1, slot_fill, &value))
        return kvp_fail(err, KVP_E_NOMEM, "out of memory for KV pages");
    return KVP_OK;
}

int kvp_kv_copy_range(kvp_kv *dst, const kvp_kv *src, kvp_kv_which which, int l0, int l1, int p0, int p1,
                      kvp_error *err) {
    if (!same_shape(dst, src))
        return kvp_fail(err, KVP_E_INVALID, "kv copy_range: caches differ in shape or type");
    if (check_range(dst, which, l0, l1, p0, p1, "copy_range (destination)", err) ||
        check_range(src, which, l0, l1, p0, p1, "copy_range (source)", err) ||
        check_held(dst, l0, l1, p0, p1, "copy_range (destination)", err) ||
        check_held(src, l0, l1, p0, p1, "copy_range (source)", err))
        return err->code;
    size_t es = kv_elem_size(src);
    for (int l = l0; l < l1; l++)
        for (int h = 0; h < dst->n_head_kv; h++) {
            kv_list *d = kv_list_at(dst, l, h);
            const kv_list *s = kv_list_at(src, l, h);
            for (int p = p0; p < p1; p++) {
                int sd = kv_find(d, p), ss = kv_find(s, p);
                if (kv_make_writable(dst, d, sd)) return kvp_fail(err, KVP_E_NOMEM, "out of memory for KV pages");
                if (which & KVP_K) memcpy(kv_slot_k(dst, d, sd), kv_slot_k(src, s, ss), (size_t)dst->head_dim * es);
                if (which & KVP_V) memcpy(kv_slot_v(dst, d, sd), kv_slot_v(src, s, ss), (size_t)dst->head_dim_v * es);
            }
        }
    return KVP_OK;
}

int kvp_kv_share_range(kvp_kv *dst, const kvp_kv *src, int l0, int l1, int p0, int p1, kvp_error *err) {
    if (!same_shape(dst, src))
        return kvp_fail(err, KVP_E_INVALID, "kv share_range: caches differ in shape or type");
    if (check_range(dst, KVP_KV_BOTH, l0, l1, p0, p1, "share_range (destination)", err) ||
        check_range(src, KVP_KV_BOTH, l0, l1, p0, p1, "share_range (source)", err) ||
        check_held(dst, l0, l1, p0, p1, "share_range (destination)", err) ||
        check_held(src, l0, l1, p0, p1, "share_range (source)", err))
        return err->code;
    for (int l = l0; l < l1; l++)
        for (int h = 0; h < dst->n_head_kv; h++)
            if (kv_share_slots(dst, kv_list_at(dst, l, h), kv_list_at(src, l, h), p0, p1))
                return kvp_fail(err, KVP_E_NOMEM, "out of memory for KV pages");
    return KVP_OK;
}

int kvp_kv_evict(kvp_kv *kv, int l0, int l1, int p0, int p1, kvp_error *err) {
    return kvp_kv_evict_heads(kv, l0, l1, 0, kv->n_head_kv, p0, p1, err);
}

int kvp_kv_evict_heads(kvp_kv *kv, int l0, int l1, int h0, int h1, int p0, int p1, kvp_error *err) {
    if (check_range(kv, KVP_KV_BOTH, l0, l1, p0, p1, "evict", err)) return err->code;
    if (h0 < 0 || h1 > kv->n_head_kv || h0 > h1)
        return kvp_fail(err, KVP_E_INVALID, "kv evict: KV heads [%d,%d) outside [0,%d)", h0, h1, kv->n_head_kv);
    for (int l = l0; l < l1; l++)
        for (int h = h0; h < h1; h++)
            if (kv_remove(kv, kv_list_at(kv, l, h), p0, p1)) return kvp_fail(err, KVP_E_NOMEM, "out of memory for KV pages");
    return KVP_OK;
}

int kvp_kv_holds(const kvp_kv *kv, int layer, int pos) {
    if (layer < 0 || layer >= kv->n_layer || pos < 0 || pos >= kv->len) return 0;
    for (int h = 0; h < kv->n_head_kv; h++)
        if (kv_find(kv_list_at(kv, layer, h), pos) < 0) return 0;
    return 1;
}

int kvp_kv_n_head_kv(const kvp_kv *kv) { return kv->n_head_kv; }

int kvp_kv_held(const kvp_kv *kv, int layer, int head) {
    if (layer < 0 || layer >= kv->n_layer || head < 0 || head >= kv->n_head_kv) return -1;
    return kv_list_at(kv, layer, head)->n;
}

/* ---- attention scores ---------------------------------------------------------------------- */

int kvp_kv_score(kvp_kv *kv, int on, kvp_error *err) {
    kv->scoring = on != 0;
    if (!on) { /* the scores go with it: no memory held for them */
        for (int i = 0; i < n_lists(kv); i++) {
            free(kv->lists[i].score);
            kv->lists[i].score = NULL;
            kv->lists[i].score_cap = 0;
        }
        return KVP_OK;
    }
    for (int i = 0; i < n_lists(kv); i++) {
        kv_list *li = &kv->lists[i];
        if (kv_score_reserve(li, li->n)) return kvp_fail(err, KVP_E_NOMEM, "out of memory for attention scores");
        memset(li->score, 0, (size_t)li->score_cap * sizeof *li->score);
    }
    return KVP_OK;
}

static int check_list(const kvp_kv *kv, int layer, int head, const char *op, kvp_error *err) {
    if (layer < 0 || layer >= kv->n_layer || head < 0 || head >= kv->n_head_kv)
        return kvp_fail(err, KVP_E_INVALID, "kv %s: layer %d / KV head %d outside [0,%d) x [0,%d)", op, layer, head,
                        kv->n_layer, kv->n_head_kv);
    return KVP_OK;
}

int kvp_kv_slots(const kvp_kv *kv, int layer, int head, int32_t *pos, float *scores, kvp_error *err) {
    if (check_list(kv, layer, head, "slots", err)) return err->code;
    const kv_list *li = kv_list_at(kv, layer, head);
    for (int s = 0; s < li->n; s++) {
        if (pos) pos[s] = kv_slot_pos(li, s);
        if (scores) scores[s] = li->score ? li->score[s] : 0.0f;
    }
    return KVP_OK;
}

int kvp_kv_keep(kvp_kv *kv, int layer, int head, const uint8_t *keep, kvp_error *err) {
    if (check_list(kv, layer, head, "keep", err)) return err->code;
    if (kv_keep(kv, kv_list_at(kv, layer, head), keep)) return kvp_fail(err, KVP_E_NOMEM, "out of memory for KV pages");
    return KVP_OK;
}
