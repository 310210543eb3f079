/* Internal layout of kvp_kv, shared by the KV modules (kv.c, pages.c) and the forward pass.
 *
 * Each (layer, KV head) owns a list of slots in increasing position order, stored in pages of
 * KV_PAGE slots. A page holds, per slot, the position it stores, the head's key and its value.
 * Pages are reference-counted and copied on write: a clone shares every page of its source
 * and copies a page only when it first writes into it, and a donor's pages can be shared by
 * many caches (kvp_kv_share_range). An evicted position is removed from the list (later slots
 * move down), so memory that no slot uses is released, not just masked.
 *
 * A list is "dense" while slot i holds position i for every slot: the common case, where a
 * position's slot needs no search. */
#ifndef KVPROBE_KV_IMPL_H
#define KVPROBE_KV_IMPL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kvprobe/kv.h"

#define KV_PAGE 16 /* slots per page */

typedef struct kv_page {
    atomic_int refs;
    int32_t pos[KV_PAGE];
    _Alignas(64) unsigned char data[]; /* keys [KV_PAGE][head_dim], then values [KV_PAGE][head_dim_v] */
} kv_page;

typedef struct kv_list {
    int n;          /* slots held */
    int cap;        /* entries of pages[] */
    int dense;      /* slot i holds position i for all i < n */
    kv_page **pages; /* ceil(n / KV_PAGE) in use */
    float *score;   /* [score_cap] accumulated attention per slot, when the cache keeps scores */
    int score_cap;
} kv_list;

struct kvp_kv {
    int n_layer;
    int n_head_kv;
    int head_dim;     /* key floats per slot and head */
    int head_dim_v;   /* value floats per slot and head */
    int n_ctx;
    int k_row;        /* n_head_kv * head_dim: floats per position in the public K layout */
    int v_row;
    kvp_kv_type type;
    int len;          /* positions [0, len) exist (some may be evicted) */
    kv_list *lists;   /* [n_layer][n_head_kv] */
    int scoring;      /* forward passes add each row's attention to its lists' scores */
};

static inline size_t kv_elem_size(const struct kvp_kv *kv) { return kv->type == KVP_KV_F16 ? 2 : 4; }
static inline size_t kv_page_bytes(const struct kvp_kv *kv) {
    return sizeof(kv_page) + (size_t)KV_PAGE * (kv->head_dim + kv->head_dim_v) * kv_elem_size(kv);
}

static inline kv_list *kv_list_at(const struct kvp_kv *kv, int layer, int head) {
    return &kv->lists[(size_t)layer * kv->n_head_kv + head];
}
static inline int kv_slot_pos(const kv_list *li, int s) { return li->pages[s / KV_PAGE]->pos[s % KV_PAGE]; }
static inline void *kv_slot_k(const struct kvp_kv *kv, const kv_list *li, int s) {
    return li->pages[s / KV_PAGE]->data + (size_t)(s % KV_PAGE) * kv->head_dim * kv_elem_size(kv);
}
static inline void *kv_slot_v(const struct kvp_kv *kv, const kv_list *li, int s) {
    return li->pages[s / KV_PAGE]->data +
           ((size_t)KV_PAGE * kv->head_dim + (size_t)(s % KV_PAGE) * kv->head_dim_v) * kv_elem_size(kv);
}

/* The first slot whose position is >= pos (n if none). */
int kv_lower(const kv_list *li, int pos);
/* The slot holding pos, or -1 if it is not held. */
static inline int kv_find(const kv_list *li, int pos) {
    if (li->dense) return pos >= 0 && pos < li->n ? pos : -1;
    int s = kv_lower(li, pos);
    return s < li->n && kv_slot_pos(li, s) == pos ? s : -1;
}

/* pages.c: the page lists. Every function that can allocate returns 0 or -1 (out of memory). */
void kv_list_free(kv_list *li);
int kv_list_share(const struct kvp_kv *kv, kv_list *dst, const kv_list *src); /* dst := src, pages shared */
int kv_make_writable(const struct kvp_kv *kv, kv_list *li, int slot);       /* copy a shared page */
int kv_append(const struct kvp_kv *kv, kv_list *li, int pos);               /* a new last slot */
int kv_remove(const struct kvp_kv *kv, kv_list *li, int p0, int p1);        /* evict [p0, p1) */
int kv_keep(const struct kvp_kv *kv, kv_list *li, const uint8_t *keep);     /* evict slots with keep[s] = 0 */
void kv_truncate_list(kv_list *li, int n_pos);                              /* drop positions >= n_pos */
/* dst's slots for positions [p0, p1) take src's K/V: pages wholly inside the range are shared
 * when both lists are dense there, the rest copied. Every position must be held by both. */
int kv_share_slots(const struct kvp_kv *kv, kv_list *dst, const kv_list *src, int p0, int p1);

/* Make (or find) the slot every layer and head writes at pos, its page unshared: called once
 * per row before a forward pass so that the threads of the pass only store. */
int kv_reserve(struct kvp_kv *kv, int pos, kvp_error *err);

/* Room for the score of slot s (scores on): 0 or -1 (out of memory). */
int kv_score_reserve(kv_list *li, int s);

/* Store / load n floats to / from a slot in the cache's element type. */
void kv_store(const struct kvp_kv *kv, void *slot, const float *src, int n);
void kv_load(const struct kvp_kv *kv, const void *slot, float *dst, int n);

#endif
