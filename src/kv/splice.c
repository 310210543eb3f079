/* The KV splice (include/kvprobe/splice.h): every condition of the study and beyond, applied
 * to contiguous runs of span positions through the public cache-editing API. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvprobe/chat.h"
#include "kvprobe/splice.h"

static const char *const COND_NAMES[KVP_COND_COUNT] = {"clean", "blank", "zero",  "mean",
                                                       "noise", "other", "drop", "drop-content"};
static const char *const SPAN_NAMES[] = {"all-prompt", "user-content", "scaffold"};

const char *kvp_condition_name(kvp_condition c) { return (unsigned)c < KVP_COND_COUNT ? COND_NAMES[c] : "?"; }

int kvp_condition_from_name(const char *name, kvp_condition *out) {
    for (int i = 0; i < KVP_COND_COUNT; i++)
        if (!strcmp(name, COND_NAMES[i])) {
            *out = (kvp_condition)i;
            return 0;
        }
    return -1;
}

const char *kvp_span_name(kvp_span s) { return (unsigned)s < 3 ? SPAN_NAMES[s] : "?"; }

int kvp_span_from_name(const char *name, kvp_span *out) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, SPAN_NAMES[i])) {
            *out = (kvp_span)i;
            return 0;
        }
    return -1;
}

int kvp_condition_needs_donor(kvp_condition c) { return c == KVP_COND_BLANK || c == KVP_COND_OTHER; }

void kvp_splice_positions(const kvp_splice *s, uint8_t *mask) {
    memset(mask, 0, (size_t)(s->n_prompt > 0 ? s->n_prompt : 0));
    int end = s->n_prompt - 1 - (s->keep_recent > 0 ? s->keep_recent : 0);
    for (int p = 0; p < end; p++) {
        int seg = s->seg ? s->seg[p] : KVP_SEG_USER;
        if (s->cond == KVP_COND_DROP_CONTENT) mask[p] = seg == KVP_SEG_USER;
        else if (s->span == KVP_SPAN_ALL_PROMPT) mask[p] = 1;
        else if (s->span == KVP_SPAN_USER_CONTENT) mask[p] = seg == KVP_SEG_USER;
        else mask[p] = seg == KVP_SEG_SCAFFOLD;
    }
}

/* ---- statistics over the span (mean / noise) -------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* splitmix64: good streams from any seed */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_normal(uint64_t *s) { /* Box-Muller */
    double u1 = ((rng_next(s) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Replace the span slots of one layer's K or V (n_pos x row floats, gathered in buf) by the
 * per-dimension mean, or by Gaussian noise with the per-dimension mean and std. Each KV
 * head is a separate group of dimensions, so statistics are per layer, head and dimension. */
static void replace_stats(float *buf, int n_pos, int row, int noise, uint64_t *rng) {
    for (int d = 0; d < row; d++) {
        double sum = 0, sq = 0;
        for (int p = 0; p < n_pos; p++) sum += buf[(size_t)p * row + d];
        double mean = sum / n_pos;
        for (int p = 0; p < n_pos; p++) {
            double x = buf[(size_t)p * row + d] - mean;
            sq += x * x;
        }
        double sd = sqrt(sq / n_pos);
        for (int p = 0; p < n_pos; p++)
            buf[(size_t)p * row + d] = (float)(noise ? mean + sd * rng_normal(rng) : mean);
    }
}

typedef struct run {
    int p0, p1;
} run;

/* Contiguous runs of mask. Returns count; runs has room for n/2 + 1. */
static int runs_of(const uint8_t *mask, int n, run *runs) {
    int k = 0;
    for (int p = 0; p < n;) {
        if (!mask[p]) {
            p++;
            continue;
        }
        int q = p;
        while (q < n && mask[q]) q++;
        runs[k++] = (run){p, q};
        p = q;
    }
    return k;
}

static int apply_stats(kvp_kv *kv, const kvp_splice *s, const run *runs, int n_runs, int n_pos, kvp_error *err) {
    int noise = s->cond == KVP_COND_NOISE, rc = 0;
    for (int l = s->layer_from; l < kvp_kv_n_layer(kv) && !rc; l++) {
        for (int part = KVP_K; part <= KVP_V && !rc; part <<= 1) {
            int row = kvp_kv_row_size(kv, (kvp_kv_which)part);
            float *buf = malloc((size_t)n_pos * row * sizeof(float));
            if (!buf) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
            size_t at = 0;
            for (int r = 0; r < n_runs && !rc; r++) {
                rc = kvp_kv_read(kv, (kvp_kv_which)part, l, l + 1, runs[r].p0, runs[r].p1, buf + at, err);
                at += (size_t)(runs[r].p1 - runs[r].p0) * row;
            }
            uint64_t rng = s->seed ^ ((uint64_t)l << 32) ^ (uint64_t)part * 0x632BE59BD9B4E019ull;
            if (!rc) replace_stats(buf, n_pos, row, noise, &rng);
            at = 0;
            for (int r = 0; r < n_runs && !rc; r++) {
                rc = kvp_kv_write(kv, (kvp_kv_which)part, l, l + 1, runs[r].p0, runs[r].p1, buf + at, err);
                at += (size_t)(runs[r].p1 - runs[r].p0) * row;
            }
            free(buf);
        }
    }
    return rc;
}

int kvp_splice_apply(kvp_kv *kv, const kvp_splice *s, kvp_error *err) {
    int n_layer = kvp_kv_n_layer(kv);
    if (s->cond == KVP_COND_CLEAN || s->layer_from >= n_layer) return 0;
    if (s->layer_from < 0) return kvp_fail(err, KVP_E_INVALID, "splice: layer cutoff %d is negative", s->layer_from);
    if ((unsigned)s->cond >= KVP_COND_COUNT) return kvp_fail(err, KVP_E_INVALID, "splice: unknown condition %d", s->cond);
    if (s->n_prompt < 1 || s->n_prompt - 1 > kvp_kv_len(kv))
        return kvp_fail(err, KVP_E_INVALID, "splice: prompt of %d tokens but the cache holds %d", s->n_prompt,
                        kvp_kv_len(kv));
    if (kvp_condition_needs_donor(s->cond) && (!s->donor || kvp_kv_len(s->donor) < s->n_prompt - 1))
        return kvp_fail(err, KVP_E_INVALID, "splice %s: needs a donor cache holding the %d prompt positions",
                        kvp_condition_name(s->cond), s->n_prompt - 1);
    uint8_t *mask = malloc((size_t)s->n_prompt);
    run *runs = malloc(((size_t)s->n_prompt / 2 + 1) * sizeof *runs);
    if (!mask || !runs) {
        free(mask);
        free(runs);
        return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    }
    kvp_splice_positions(s, mask);
    int n_runs = runs_of(mask, s->n_prompt, runs), n_pos = 0, rc = 0;
    for (int r = 0; r < n_runs; r++) n_pos += runs[r].p1 - runs[r].p0;
    if (s->cond == KVP_COND_MEAN || s->cond == KVP_COND_NOISE) {
        rc = n_pos ? apply_stats(kv, s, runs, n_runs, n_pos, err) : 0;
    } else {
        for (int r = 0; r < n_runs && !rc; r++) {
            int p0 = runs[r].p0, p1 = runs[r].p1, L = s->layer_from;
            switch (s->cond) {
            case KVP_COND_ZERO: rc = kvp_kv_fill(kv, KVP_KV_BOTH, L, n_layer, p0, p1, 0.0f, err); break;
            case KVP_COND_BLANK:
            case KVP_COND_OTHER: rc = kvp_kv_copy_range(kv, s->donor, KVP_KV_BOTH, L, n_layer, p0, p1, err); break;
            case KVP_COND_DROP:
            case KVP_COND_DROP_CONTENT: rc = kvp_kv_evict(kv, L, n_layer, p0, p1, err); break;
            default: break;
            }
        }
    }
    free(mask);
    free(runs);
    return rc;
}
