/* The shared scaffold cache: every request's BLANK donor, computed once per distinct token
 * prefix and held once (pages shared between donors and with the requests that splice them). */
#include <stdlib.h>
#include <string.h>

#include "kvprobe/policy.h"

typedef struct donor {
    int32_t *ids;
    int n;
    kvp_kv *kv;  /* holds exactly ids[0, n) */
    int trimmed; /* layers below layer_from evicted: serves requests, never extended */
} donor;

struct kvp_scaffold {
    const kvp_model *m;
    kvp_ctx *ctx;
    const kvp_tokenizer *tok;
    char *filler;
    int32_t *fill; /* the filler's tokens */
    int n_fill;
    int max_filler;
    int layer_from; /* requests read layers >= layer_from only */
    kvp_kv_type type;
    donor *d;
    int n, cap;
    long computed;
};

void kvp_scaffold_free(kvp_scaffold *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        free(s->d[i].ids);
        kvp_kv_free(s->d[i].kv);
    }
    free(s->d);
    free(s->fill);
    free(s->filler);
    free(s);
}

kvp_scaffold *kvp_scaffold_new(const kvp_model *m, kvp_ctx *ctx, const kvp_tokenizer *tok, const char *filler,
                               int max_filler, int layer_from, kvp_kv_type type, kvp_error *err) {
    kvp_scaffold *s = calloc(1, sizeof *s);
    if (!filler) filler = KVP_DEFAULT_FILLER;
    if (!s || !(s->filler = strdup(filler))) {
        free(s);
        kvp_fail(err, KVP_E_NOMEM, "out of memory");
        return NULL;
    }
    *s = (kvp_scaffold){m, ctx, tok, s->filler, NULL, 0, max_filler > 0 ? max_filler : 0, layer_from > 0 ? layer_from : 0,
                        type, NULL, 0, 0, 0};
    if (kvp_tokenize(tok, filler, strlen(filler), 0, 0, &s->fill, &s->n_fill, err)) {
        kvp_scaffold_free(s);
        return NULL;
    }
    if (!s->n_fill) {
        kvp_scaffold_free(s);
        kvp_fail(err, KVP_E_INVALID, "scaffold cache: the filler text has no tokens");
        return NULL;
    }
    return s;
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* The cached donor sharing the longest token prefix with ids[0, n) (of those that can be
 * extended, if `extend`); *lcp its length. */
static int best_match(const kvp_scaffold *s, const int32_t *ids, int n, int extend, int *lcp) {
    int best = -1;
    *lcp = 0;
    for (int i = 0; i < s->n; i++) {
        if (extend && s->d[i].trimmed) continue;
        int c = common_prefix(s->d[i].ids, s->d[i].n, ids, n);
        if (best < 0 || c > *lcp) best = i, *lcp = c;
    }
    return best;
}

/* Capacity of every donor cache: storage is allocated as positions are written (kv.h), so a
 * large capacity costs nothing and lets any donor be extended. */
#define DONOR_CTX (1 << 20)

/* Cache ids[0, n): the best match's first lcp positions (pages shared) plus the rest computed.
 * A `leaf` (one request's donor, not a long filler run) then drops its layers below
 * layer_from, which no request reads: its own pages (the closing scaffold, the page where it
 * leaves the shared prefix) are then held only where they serve. */
static const kvp_kv *add(kvp_scaffold *s, const int32_t *ids, int n, int leaf, kvp_error *err) {
    int lcp, b = best_match(s, ids, n, 1, &lcp);
    if (b >= 0 && lcp == n && s->d[b].n == n) return s->d[b].kv;
    if (n > DONOR_CTX) {
        kvp_fail(err, KVP_E_INVALID, "scaffold cache: a donor of %d tokens exceeds %d", n, DONOR_CTX);
        return NULL;
    }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 8;
        donor *d = realloc(s->d, (size_t)cap * sizeof *d);
        if (!d) {
            kvp_fail(err, KVP_E_NOMEM, "out of memory");
            return NULL;
        }
        s->d = d;
        s->cap = cap;
    }
    donor e = {malloc((size_t)(n ? n : 1) * sizeof(int32_t)), n, NULL, 0};
    if (!e.ids) {
        kvp_fail(err, KVP_E_NOMEM, "out of memory");
        return NULL;
    }
    memcpy(e.ids, ids, (size_t)n * sizeof *ids);
    if (b >= 0 && lcp > 0) {
        if ((e.kv = kvp_kv_clone(s->d[b].kv, err)) && kvp_kv_truncate(e.kv, lcp, err)) {
            kvp_kv_free(e.kv);
            e.kv = NULL;
        }
    } else {
        e.kv = kvp_kv_new(s->m, DONOR_CTX, s->type, err);
        lcp = 0;
    }
    if (!e.kv || kvp_decode(s->ctx, e.kv, ids + lcp, n - lcp, NULL, NULL, err)) {
        kvp_kv_free(e.kv);
        free(e.ids);
        return NULL;
    }
    s->computed += n - lcp;
    if (leaf && s->layer_from > 0 && n > 0) {
        if (kvp_kv_evict(e.kv, 0, s->layer_from < kvp_kv_n_layer(e.kv) ? s->layer_from : kvp_kv_n_layer(e.kv), 0, n, err)) {
            kvp_kv_free(e.kv);
            free(e.ids);
            return NULL;
        }
        e.trimmed = 1;
    }
    s->d[s->n++] = e;
    return e.kv;
}

const kvp_kv *kvp_scaffold_donor(kvp_scaffold *s, const kvp_prompt *p, kvp_error *err) {
    kvp_prompt d;
    if (kvp_prompt_blank(s->tok, p, s->filler, KVP_FILLER_SAME_LENGTH, &d, NULL, err)) return NULL;
    int n = d.n - 1; /* the spliced span: every position but the last prompt token */
    const kvp_kv *kv = NULL;
    int u0 = 0;
    while (u0 < d.n && d.seg[u0] != KVP_SEG_USER) u0++;
    /* First donor with this template prefix: cache the prefix followed by a long filler run,
     * which every later prompt's user content (a cut of the same run) shares. */
    if (u0 < n && s->max_filler > 0) {
        int lcp;
        best_match(s, d.ids, n, 1, &lcp);
        int run = u0;
        while (run < d.n && d.seg[run] == KVP_SEG_USER) run++;
        if (lcp < run && run - u0 <= s->max_filler) {
            int32_t *seed = malloc((size_t)(u0 + s->max_filler) * sizeof *seed);
            if (!seed) {
                kvp_fail(err, KVP_E_NOMEM, "out of memory");
                kvp_prompt_free(&d);
                return NULL;
            }
            memcpy(seed, d.ids, (size_t)u0 * sizeof *seed);
            for (int i = 0; i < s->max_filler; i++) seed[u0 + i] = s->fill[i % s->n_fill];
            const kvp_kv *ok = add(s, seed, u0 + s->max_filler, 0, err);
            free(seed);
            if (!ok) {
                kvp_prompt_free(&d);
                return NULL;
            }
        }
    }
    int lcp, b = best_match(s, d.ids, n, 0, &lcp);
    kv = b >= 0 && lcp == n ? s->d[b].kv : add(s, d.ids, n, 1, err); /* a longer donor serves too: K/V are causal */
    kvp_prompt_free(&d);
    return kv;
}

int kvp_scaffold_bytes(const kvp_scaffold *s, size_t *bytes, kvp_error *err) {
    const kvp_kv **kvs = malloc((size_t)(s->n ? s->n : 1) * sizeof *kvs);
    if (!kvs) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    for (int i = 0; i < s->n; i++) kvs[i] = s->d[i].kv;
    int rc = kvp_kv_bytes_total(kvs, s->n, bytes, err);
    free(kvs);
    return rc;
}

int kvp_scaffold_entries(const kvp_scaffold *s) { return s->n; }
long kvp_scaffold_computed(const kvp_scaffold *s) { return s->computed; }
