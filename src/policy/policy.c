/* KV cache policies: the spec, the kept-set rules of StreamingLLM / H2O / SnapKV, and a
 * request's prefill and decode steps under a policy (include/kvprobe/policy.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvprobe/policy.h"
#include "kvprobe/splice.h"

static const char *const NAMES[] = {"full", "scaffold", "drop-content", "streaming", "h2o", "snapkv"};

const char *kvp_policy_name(kvp_policy_kind k) {
    return (unsigned)k < sizeof NAMES / sizeof NAMES[0] ? NAMES[k] : "?";
}

int kvp_kv_policy_is_prefill(const kvp_kv_policy *p) {
    return p->kind == KVP_POLICY_STREAMING || p->kind == KVP_POLICY_H2O || p->kind == KVP_POLICY_SNAPKV;
}

int kvp_kv_policy_is_edit(const kvp_kv_policy *p) {
    return p->kind == KVP_POLICY_SCAFFOLD || p->kind == KVP_POLICY_DROP_CONTENT;
}

kvp_splice kvp_kv_policy_splice(const kvp_kv_policy *p, const kvp_prompt *pr, const kvp_kv *donor) {
    int scaffold = p->kind == KVP_POLICY_SCAFFOLD;
    return (kvp_splice){.cond = scaffold ? KVP_COND_BLANK : KVP_COND_DROP_CONTENT, .layer_from = p->layer_from,
                        .span = KVP_SPAN_ALL_PROMPT, .n_prompt = pr->n, .seg = pr->seg, .donor = scaffold ? donor : NULL,
                        .keep_recent = p->recent > 0 ? p->recent : 0};
}

/* ---- the spec ------------------------------------------------------------------------------- */

static int parse_int(const char *spec, const char *key, const char *v, int lo, int hi, int *out, kvp_error *err) {
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi)
        return kvp_fail(err, KVP_E_INVALID, "kv policy '%s': %s must be an integer in [%d, %d], got '%s'", spec, key, lo,
                        hi, v);
    *out = (int)x;
    return 0;
}

int kvp_kv_policy_parse(const char *spec, kvp_kv_policy *out, kvp_error *err) {
    kvp_kv_policy p = {.kind = KVP_POLICY_FULL, .layer_from = -1, .step = -1, .sinks = 4, .recent = -1, .window = 32,
                       .kernel = 7};
    char buf[256];
    if (!spec || strlen(spec) >= sizeof buf) return kvp_fail(err, KVP_E_INVALID, "kv policy: missing or too long spec");
    strcpy(buf, spec);
    char *args = strchr(buf, ':');
    if (args) *args++ = 0;
    int k = -1;
    for (int i = 0; i < (int)(sizeof NAMES / sizeof NAMES[0]); i++)
        if (!strcmp(buf, NAMES[i])) k = i;
    if (k < 0)
        return kvp_fail(err, KVP_E_INVALID,
                        "kv policy '%s': unknown policy '%s' (full, scaffold, drop-content, streaming, h2o, snapkv)", spec,
                        buf);
    p.kind = (kvp_policy_kind)k;
    int has_budget = 0;
    for (char *kv = args, *next; kv && *kv; kv = next) {
        next = strchr(kv, ',');
        if (next) *next++ = 0;
        char *v = strchr(kv, '=');
        if (!v || !v[1]) return kvp_fail(err, KVP_E_INVALID, "kv policy '%s': '%s' is not KEY=VALUE", spec, kv);
        *v++ = 0;
        int rc = 0, layer_key = !strcmp(kv, "L"), step_key = !strcmp(kv, "W");
        int needs_lw = kvp_kv_policy_is_edit(&p);
        if ((layer_key || step_key) && !needs_lw) {
            rc = kvp_fail(err, KVP_E_INVALID, "kv policy '%s': %s applies to scaffold and drop-content only", spec, kv);
        } else if (layer_key) {
            rc = parse_int(spec, kv, v, 0, 1 << 16, &p.layer_from, err);
        } else if (step_key) {
            rc = parse_int(spec, kv, v, 0, 1 << 24, &p.step, err);
        } else if (needs_lw && !strcmp(kv, "recent")) {
            rc = parse_int(spec, kv, v, 0, 1 << 24, &p.recent, err);
        } else if (needs_lw || p.kind == KVP_POLICY_FULL) {
            rc = kvp_fail(err, KVP_E_INVALID, "kv policy '%s': unknown parameter '%s' (%s)", spec, kv,
                          needs_lw ? "L, W, recent" : "none");
        } else if (!strcmp(kv, "budget")) {
            char *end;
            double b = strtod(v, &end);
            if (end != v && *end == '%' && !end[1]) b /= 100.0, end++;
            if (end == v || *end || !(b > 0.0 && b <= 1.0))
                rc = kvp_fail(err, KVP_E_INVALID, "kv policy '%s': budget must be a fraction in (0, 1] or a percentage, got '%s'",
                              spec, v);
            p.budget = b;
            has_budget = 1;
        } else if (!strcmp(kv, "tokens")) {
            rc = parse_int(spec, kv, v, 1, 1 << 24, &p.tokens, err);
            has_budget = 1;
        } else if (!strcmp(kv, "sinks") && p.kind == KVP_POLICY_STREAMING) {
            rc = parse_int(spec, kv, v, 0, 1 << 16, &p.sinks, err);
        } else if (!strcmp(kv, "recent") && p.kind == KVP_POLICY_H2O) {
            rc = parse_int(spec, kv, v, 0, 1 << 24, &p.recent, err);
        } else if (!strcmp(kv, "window") && p.kind == KVP_POLICY_SNAPKV) {
            rc = parse_int(spec, kv, v, 1, 1 << 16, &p.window, err);
        } else if (!strcmp(kv, "kernel") && p.kind == KVP_POLICY_SNAPKV) {
            rc = parse_int(spec, kv, v, 1, 255, &p.kernel, err);
            if (!rc && p.kernel % 2 == 0)
                rc = kvp_fail(err, KVP_E_INVALID, "kv policy '%s': kernel must be odd, got %d", spec, p.kernel);
        } else {
            rc = kvp_fail(err, KVP_E_INVALID, "kv policy '%s': unknown parameter '%s' for %s", spec, kv, NAMES[k]);
        }
        if (rc) return rc;
    }
    if (kvp_kv_policy_is_edit(&p) && (p.layer_from < 0 || p.step < 0))
        return kvp_fail(err, KVP_E_INVALID, "kv policy '%s': %s needs L=.. and W=..", spec, NAMES[k]);
    if (kvp_kv_policy_is_prefill(&p) && !has_budget)
        return kvp_fail(err, KVP_E_INVALID, "kv policy '%s': %s needs budget=.. (fraction kept) or tokens=..", spec,
                        NAMES[k]);
    *out = p;
    return KVP_OK;
}

int kvp_kv_policy_format(const kvp_kv_policy *p, char *buf, size_t n) {
    char b[32];
    if (p->tokens > 0) snprintf(b, sizeof b, "tokens=%d", p->tokens);
    else snprintf(b, sizeof b, "budget=%g", p->budget);
    switch (p->kind) {
    case KVP_POLICY_SCAFFOLD:
    case KVP_POLICY_DROP_CONTENT:
        if (p->recent > 0) return snprintf(buf, n, "%s:L=%d,W=%d,recent=%d", NAMES[p->kind], p->layer_from, p->step, p->recent);
        return snprintf(buf, n, "%s:L=%d,W=%d", NAMES[p->kind], p->layer_from, p->step);
    case KVP_POLICY_STREAMING: return snprintf(buf, n, "streaming:%s,sinks=%d", b, p->sinks);
    case KVP_POLICY_H2O:
        if (p->recent >= 0) return snprintf(buf, n, "h2o:%s,recent=%d", b, p->recent);
        return snprintf(buf, n, "h2o:%s", b);
    case KVP_POLICY_SNAPKV: return snprintf(buf, n, "snapkv:%s,window=%d,kernel=%d", b, p->window, p->kernel);
    default: return snprintf(buf, n, "full");
    }
}

int kvp_kv_policy_kept(const kvp_kv_policy *p, int n) {
    if (!kvp_kv_policy_is_prefill(p)) return n;
    int k = p->tokens > 0 ? p->tokens : (int)lround(p->budget * n);
    if (k < 1) k = 1;
    return k < n ? k : n;
}

/* ---- kept sets ---------------------------------------------------------------------------- */

static int all(int n, uint8_t *keep) {
    memset(keep, 1, (size_t)n);
    return n;
}

int kvp_keep_streaming(int n, int budget, int sinks, uint8_t *keep) {
    if (budget >= n) return all(n, keep);
    memset(keep, 0, (size_t)n);
    int s = sinks < budget ? sinks : budget;
    for (int i = 0; i < s; i++) keep[i] = 1;
    for (int i = n - (budget - s); i < n; i++) keep[i] = 1;
    return budget;
}

typedef struct ranked {
    float score;
    int pos;
} ranked;

/* higher score first; ties keep the earlier position */
static int by_score(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->pos - y->pos;
}

/* keep[i] = 1 for the k best of score[0, m) (NaN scores rank last) */
static int keep_top(const float *score, int m, int k, uint8_t *keep) {
    if (k <= 0 || m <= 0) return 0;
    ranked *r = malloc((size_t)m * sizeof *r);
    if (!r) return -1;
    for (int i = 0; i < m; i++) r[i] = (ranked){isnan(score[i]) ? -INFINITY : score[i], i};
    qsort(r, (size_t)m, sizeof *r, by_score);
    for (int i = 0; i < k && i < m; i++) keep[r[i].pos] = 1;
    free(r);
    return 0;
}

int kvp_keep_h2o(const float *score, int n, int budget, int recent, uint8_t *keep) {
    if (budget >= n) return all(n, keep);
    memset(keep, 0, (size_t)n);
    int r = recent < 0 ? budget / 2 : recent < budget ? recent : budget;
    for (int i = n - r; i < n; i++) keep[i] = 1;
    if (keep_top(score, n - r, budget - r, keep)) return -1;
    return budget;
}

int kvp_keep_snapkv(const float *votes, int n, int budget, int window, int kernel, uint8_t *keep) {
    if (budget >= n) return all(n, keep);
    memset(keep, 0, (size_t)n);
    int w = window < budget ? window : budget, m = n - w, h = kernel / 2;
    for (int i = m; i < n; i++) keep[i] = 1;
    if (budget - w <= 0) return budget;
    float *pooled = malloc((size_t)m * sizeof *pooled);
    if (!pooled) return -1;
    for (int i = 0; i < m; i++) { /* average pool, zero padding (count_include_pad) */
        double s = 0;
        for (int j = i - h; j <= i + h; j++)
            if (j >= 0 && j < m) s += votes[j];
        pooled[i] = (float)(s / kernel);
    }
    int rc = keep_top(pooled, m, budget - w, keep);
    free(pooled);
    return rc ? -1 : budget;
}

/* ---- a request under a policy ----------------------------------------------------------------- */

static int compress(kvp_policy_run *r, int n, kvp_error *err) {
    const kvp_kv_policy *p = r->policy;
    kvp_kv *kv = r->kv;
    int budget = kvp_kv_policy_kept(p, n), rc = 0;
    int32_t *pos = malloc((size_t)n * sizeof *pos);
    float *score = malloc((size_t)n * sizeof *score);
    uint8_t *keep = malloc((size_t)n);
    if (!pos || !score || !keep) rc = kvp_fail(err, KVP_E_NOMEM, "out of memory");
    for (int l = 0; l < kvp_kv_n_layer(kv) && !rc; l++)
        for (int h = 0; h < kvp_kv_n_head_kv(kv) && !rc; h++) {
            if (kvp_kv_held(kv, l, h) != n)
                rc = kvp_fail(err, KVP_E_INVALID, "kv policy: layer %d head %d holds %d positions, expected the %d of the prompt",
                              l, h, kvp_kv_held(kv, l, h), n);
            if (rc || (rc = kvp_kv_slots(kv, l, h, pos, score, err))) break;
            int kept = p->kind == KVP_POLICY_STREAMING ? kvp_keep_streaming(n, budget, p->sinks, keep)
                       : p->kind == KVP_POLICY_H2O     ? kvp_keep_h2o(score, n, budget, p->recent, keep)
                                                       : kvp_keep_snapkv(score, n, budget, p->window, p->kernel, keep);
            if (kept < 0) rc = kvp_fail(err, KVP_E_NOMEM, "out of memory");
            else rc = kvp_kv_keep(kv, l, h, keep, err);
        }
    free(pos);
    free(score);
    free(keep);
    return rc;
}

int kvp_policy_prefill(kvp_policy_run *r, kvp_error *err) {
    const kvp_kv_policy *p = r->policy;
    const kvp_prompt *pr = r->prompt;
    int n = pr->n - 1; /* the span; the last prompt token is the first decode step */
    if (n < 0) return kvp_fail(err, KVP_E_INVALID, "kv policy: the prompt is empty");
    if (kvp_kv_len(r->kv) != 0) return kvp_fail(err, KVP_E_INVALID, "kv policy: prefill needs an empty cache");
    r->applied = 0;
    /* H2O scores every prompt query; SnapKV only the observation window's */
    int scored_from = p->kind == KVP_POLICY_H2O ? 0 : p->kind == KVP_POLICY_SNAPKV ? (n > p->window ? n - p->window : 0) : n;
    int rc = 0;
    if (scored_from > 0) rc = kvp_decode(r->ctx, r->kv, pr->ids, scored_from, NULL, NULL, err);
    if (!rc && scored_from < n) {
        rc = kvp_kv_score(r->kv, 1, err);
        if (!rc) rc = kvp_decode(r->ctx, r->kv, pr->ids + scored_from, n - scored_from, NULL, NULL, err);
    }
    if (!rc && kvp_kv_policy_is_prefill(p) && n > 0) {
        rc = compress(r, n, err);
        r->applied = !rc;
    }
    int rc2 = kvp_kv_score(r->kv, 0, err);
    return rc ? rc : rc2;
}

int kvp_policy_step(kvp_policy_run *r, int generated, kvp_error *err) {
    const kvp_kv_policy *p = r->policy;
    if (r->applied || generated != p->step || !kvp_kv_policy_is_edit(p)) return KVP_OK;
    kvp_splice s = kvp_kv_policy_splice(p, r->prompt, NULL);
    int n_layer = kvp_kv_n_layer(r->kv), L = p->layer_from;
    int edited = r->prompt->n - 1 - s.keep_recent; /* span positions [0, edited) */
    r->applied = 1;
    if (L >= n_layer || edited <= 0) return KVP_OK;
    if (p->kind == KVP_POLICY_DROP_CONTENT) return kvp_splice_apply(r->kv, &s, err);
    if (!r->scaffold) return kvp_fail(err, KVP_E_INVALID, "kv policy scaffold: no scaffold cache given");
    const kvp_kv *donor = kvp_scaffold_donor(r->scaffold, r->prompt, err);
    if (!donor) return err->code;
    /* the BLANK splice of the sweep (span all-prompt, less the recent window), the donor's
     * pages shared, not copied */
    return kvp_kv_share_range(r->kv, donor, L, n_layer, 0, edited, err);
}
