/* The page lists behind kvp_kv: reference-counted pages, copy on write, eviction that
 * releases memory, and page sharing between caches. */
#include <stdlib.h>
#include <string.h>

#include "kv_impl.h"

static size_t alloc_bytes(const struct kvp_kv *kv) { return (kv_page_bytes(kv) + 63) & ~(size_t)63; }

static kv_page *page_new(const struct kvp_kv *kv) {
    kv_page *p = aligned_alloc(64, alloc_bytes(kv));
    if (p) atomic_init(&p->refs, 1);
    return p;
}

static void page_unref(kv_page *p) {
    if (p && atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1) free(p);
}

static kv_page *page_ref(kv_page *p) {
    atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
    return p;
}

static int used_pages(int n) { return (n + KV_PAGE - 1) / KV_PAGE; }

static int reserve_pages(kv_list *li, int n_pages) {
    if (n_pages <= li->cap) return 0;
    int cap = li->cap ? li->cap : 4;
    while (cap < n_pages) cap *= 2;
    kv_page **p = realloc(li->pages, (size_t)cap * sizeof *p);
    if (!p) return -1;
    memset(p + li->cap, 0, (size_t)(cap - li->cap) * sizeof *p);
    li->pages = p;
    li->cap = cap;
    return 0;
}

static void update_dense(kv_list *li) { li->dense = li->n == 0 || kv_slot_pos(li, li->n - 1) == li->n - 1; }

int kv_lower(const kv_list *li, int pos) {
    if (li->dense) return pos < 0 ? 0 : pos < li->n ? pos : li->n;
    int lo = 0, hi = li->n; /* positions increase with the slot */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (kv_slot_pos(li, mid) < pos) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

void kv_list_free(kv_list *li) {
    for (int i = 0; i < used_pages(li->n); i++) page_unref(li->pages[i]);
    free(li->pages);
    free(li->score);
    memset(li, 0, sizeof *li);
}

int kv_score_reserve(kv_list *li, int s) {
    if (s < li->score_cap) return 0;
    int cap = li->score_cap ? li->score_cap : 64;
    while (cap <= s) cap *= 2;
    float *p = realloc(li->score, (size_t)cap * sizeof *p);
    if (!p) return -1;
    memset(p + li->score_cap, 0, (size_t)(cap - li->score_cap) * sizeof *p);
    li->score = p;
    li->score_cap = cap;
    return 0;
}

int kv_list_share(const struct kvp_kv *kv, kv_list *dst, const kv_list *src) {
    (void)kv;
    if (dst == src) return 0;
    if (reserve_pages(dst, used_pages(src->n))) return -1;
    for (int i = 0; i < used_pages(src->n); i++) page_ref(src->pages[i]);
    for (int i = 0; i < used_pages(dst->n); i++) page_unref(dst->pages[i]);
    if (src->n) memcpy(dst->pages, src->pages, (size_t)used_pages(src->n) * sizeof *dst->pages);
    dst->n = src->n;
    dst->dense = src->dense;
    if (src->score) {
        if (kv_score_reserve(dst, src->n ? src->n - 1 : 0)) return -1;
        memcpy(dst->score, src->score, (size_t)src->n * sizeof *dst->score);
    } else if (dst->score) {
        memset(dst->score, 0, (size_t)dst->score_cap * sizeof *dst->score);
    }
    return 0;
}

int kv_make_writable(const struct kvp_kv *kv, kv_list *li, int slot) {
    kv_page *p = li->pages[slot / KV_PAGE];
    if (atomic_load_explicit(&p->refs, memory_order_acquire) == 1) return 0;
    kv_page *q = page_new(kv);
    if (!q) return -1;
    memcpy(q->pos, p->pos, sizeof q->pos);
    memcpy(q->data, p->data, kv_page_bytes(kv) - sizeof(kv_page));
    li->pages[slot / KV_PAGE] = q;
    page_unref(p);
    return 0;
}

int kv_append(const struct kvp_kv *kv, kv_list *li, int pos) {
    int s = li->n;
    if (s % KV_PAGE == 0) {
        if (reserve_pages(li, s / KV_PAGE + 1)) return -1;
        if (!(li->pages[s / KV_PAGE] = page_new(kv))) return -1;
    } else if (kv_make_writable(kv, li, s)) {
        return -1;
    }
    if (li->score) {
        if (kv_score_reserve(li, s)) return -1;
        li->score[s] = 0.0f;
    }
    li->pages[s / KV_PAGE]->pos[s % KV_PAGE] = pos;
    li->n = s + 1;
    li->dense = li->dense && pos == s;
    return 0;
}

/* Copy slot `from` of src into slot `to` of the fresh page `dst` (same geometry). */
static void copy_slot(const struct kvp_kv *kv, kv_page *dst, int to, const kv_list *src, int from) {
    size_t es = kv_elem_size(kv), kb = (size_t)kv->head_dim * es, vb = (size_t)kv->head_dim_v * es;
    dst->pos[to] = kv_slot_pos(src, from);
    memcpy(dst->data + (size_t)to * kb, kv_slot_k(kv, src, from), kb);
    memcpy(dst->data + (size_t)KV_PAGE * kb + (size_t)to * vb, kv_slot_v(kv, src, from), vb);
}

int kv_remove(const struct kvp_kv *kv, kv_list *li, int p0, int p1) {
    int a = kv_lower(li, p0), b = kv_lower(li, p1), n = li->n;
    if (a >= b) return 0;
    int m = n - (b - a), first = a / KV_PAGE; /* pages before `first` are untouched */
    int n_new = used_pages(m) - first;
    kv_page **fresh = n_new > 0 ? calloc((size_t)n_new, sizeof *fresh) : NULL;
    if (n_new > 0 && !fresh) return -1;
    for (int i = 0; i < n_new; i++)
        if (!(fresh[i] = page_new(kv))) {
            for (int j = 0; j < i; j++) page_unref(fresh[j]);
            free(fresh);
            return -1;
        }
    for (int t = first * KV_PAGE; t < m; t++) /* slot t of the new list */
        copy_slot(kv, fresh[t / KV_PAGE - first], t % KV_PAGE, li, t < a ? t : t + (b - a));
    for (int i = first; i < used_pages(n); i++) page_unref(li->pages[i]);
    if (n_new > 0) memcpy(li->pages + first, fresh, (size_t)n_new * sizeof *fresh);
    for (int i = first + (n_new > 0 ? n_new : 0); i < used_pages(n); i++) li->pages[i] = NULL;
    free(fresh);
    if (li->score && n > b) memmove(li->score + a, li->score + b, (size_t)(n - b) * sizeof *li->score);
    li->n = m;
    update_dense(li);
    return 0;
}

int kv_keep(const struct kvp_kv *kv, kv_list *li, const uint8_t *keep) {
    int n = li->n, first = 0, m = 0;
    while (first < n && keep[first]) first++;
    if (first == n) return 0;
    for (int s = 0; s < n; s++) m += keep[s] != 0;
    int p0 = first / KV_PAGE, n_new = used_pages(m) - p0;
    kv_page **fresh = n_new > 0 ? calloc((size_t)n_new, sizeof *fresh) : NULL;
    if (n_new > 0 && !fresh) return -1;
    for (int i = 0; i < n_new; i++)
        if (!(fresh[i] = page_new(kv))) {
            for (int j = 0; j < i; j++) page_unref(fresh[j]);
            free(fresh);
            return -1;
        }
    int t = p0 * KV_PAGE;
    for (int s = p0 * KV_PAGE; s < n; s++) {
        if (!keep[s]) continue;
        copy_slot(kv, fresh[t / KV_PAGE - p0], t % KV_PAGE, li, s);
        if (li->score) li->score[t] = li->score[s];
        t++;
    }
    for (int i = p0; i < used_pages(n); i++) {
        page_unref(li->pages[i]);
        li->pages[i] = NULL;
    }
    if (n_new > 0) memcpy(li->pages + p0, fresh, (size_t)n_new * sizeof *fresh);
    free(fresh);
    li->n = m;
    update_dense(li);
    return 0;
}

void kv_truncate_list(kv_list *li, int n_pos) {
    int m = kv_lower(li, n_pos);
    for (int i = used_pages(m); i < used_pages(li->n); i++) {
        page_unref(li->pages[i]);
        li->pages[i] = NULL;
    }
    li->n = m;
    update_dense(li);
}

int kv_share_slots(const struct kvp_kv *kv, kv_list *dst, const kv_list *src, int p0, int p1) {
    size_t es = kv_elem_size(kv), kb = (size_t)kv->head_dim * es, vb = (size_t)kv->head_dim_v * es;
    for (int p = p0; p < p1;) {
        int sd = kv_find(dst, p), ss = kv_find(src, p);
        if (sd < 0 || ss < 0) return -2;
        /* a whole page of positions [p, p + KV_PAGE) at the same slots in both: share it */
        if (dst->dense && src->dense && p % KV_PAGE == 0 && p + KV_PAGE <= p1 && p + KV_PAGE <= dst->n &&
            p + KV_PAGE <= src->n) {
            kv_page *old = dst->pages[p / KV_PAGE], *nw = src->pages[p / KV_PAGE];
            if (old != nw) {
                dst->pages[p / KV_PAGE] = page_ref(nw);
                page_unref(old);
            }
            p += KV_PAGE;
            continue;
        }
        if (kv_make_writable(kv, dst, sd)) return -1;
        memcpy(kv_slot_k(kv, dst, sd), kv_slot_k(kv, src, ss), kb);
        memcpy(kv_slot_v(kv, dst, sd), kv_slot_v(kv, src, ss), vb);
        p++;
    }
    return 0;
}
