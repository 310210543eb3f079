/* Token selection. Sampling is deterministic for a given seed: the RNG state lives in the
 * sampler, candidates are ordered by (logit desc, id asc). */
#include <math.h>
#include <stdlib.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "kvprobe/sample.h"

int kvp_sampler_init(kvp_sampler *s, int n_vocab, float temperature, int top_k, float top_p, uint64_t seed) {
    s->temperature = temperature;
    s->top_k = top_k;
    s->top_p = top_p;
    s->rng = seed ? seed : 0x9E3779B97F4A7C15ull;
    s->n_vocab = n_vocab;
    s->probs = malloc((size_t)n_vocab * sizeof *s->probs);
    s->idx = malloc((size_t)n_vocab * sizeof *s->idx);
    if (!s->probs || !s->idx) {
        kvp_sampler_free(s);
        return -1;
    }
    return 0;
}

void kvp_sampler_free(kvp_sampler *s) {
    free(s->probs);
    free(s->idx);
    s->probs = NULL;
    s->idx = NULL;
}

/* The largest of x[a, b) that is not NaN (-inf if none), from m on: vectors whose max keeps
 * its second operand, the running maximum, against a NaN lane. */
static float max_from(const float *x, int a, int b, float m) {
    int i = a;
#if defined(__AVX512F__)
    if (b - a >= 16) {
        __m512 vm = _mm512_set1_ps(m);
        for (; i + 16 <= b; i += 16) vm = _mm512_max_ps(_mm512_loadu_ps(x + i), vm);
        m = _mm512_reduce_max_ps(vm);
    }
#elif defined(__AVX__)
    if (b - a >= 8) {
        __m256 vm = _mm256_set1_ps(m);
        for (; i + 8 <= b; i += 8) vm = _mm256_max_ps(_mm256_loadu_ps(x + i), vm);
        float lanes[8];
        _mm256_storeu_ps(lanes, vm);
        for (int k = 0; k < 8; k++) m = lanes[k] > m ? lanes[k] : m;
    }
#endif
    for (; i < b; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* The first index of the largest logit; a NaN never wins, except at index 0, which nothing
 * compares greater than (the scalar scan `if (x[i] > x[best]) best = i` this replaces). A
 * greedy sweep calls this once per row and step over the whole vocabulary. */
int32_t kvp_argmax(const float *logits, int n) {
    if (n <= 1 || isnan(logits[0])) return 0;
    float m = max_from(logits, 1, n, logits[0]);
    int32_t best = 0;
    while (logits[best] != m) best++; /* m is one of the values; +0 and -0 compare equal */
    return best;
}

int32_t kvp_argmax_margin(const float *logits, int n, float *margin) {
    int32_t best = kvp_argmax(logits, n);
    float second = max_from(logits, best + 1, n, max_from(logits, 0, best, -INFINITY));
    if (second == 0.0f) { /* which zero the scan meets first decides the margin's sign: scan */
        second = -INFINITY;
        for (int i = 0; i < n; i++)
            if (i != best && logits[i] > second) second = logits[i];
    }
    *margin = logits[best] - second;
    return best;
}

static double next_uniform(kvp_sampler *s) { /* xorshift64*, 53-bit uniform in [0,1) */
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return (double)((s->rng * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}


static int by_logit_desc(const void *a, const void *b, void *ctx) {
    const float *l = ctx;
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (l[i] != l[j]) return l[i] > l[j] ? -1 : 1;
    return (i > j) - (i < j);
}

int32_t kvp_sample(kvp_sampler *s, const float *logits) {
    int n = s->n_vocab;
    if (s->temperature <= 0.0f) return kvp_argmax(logits, n);
    for (int i = 0; i < n; i++) s->idx[i] = i;
    qsort_r(s->idx, (size_t)n, sizeof *s->idx, by_logit_desc, (void *)logits);
    int k = (s->top_k > 0 && s->top_k < n) ? s->top_k : n;
    double mx = logits[s->idx[0]], sum = 0.0;
    for (int i = 0; i < k; i++) {
        s->probs[i] = (float)exp((logits[s->idx[i]] - mx) / s->temperature);
        sum += s->probs[i];
    }
    if (s->top_p < 1.0f) { /* smallest prefix with mass >= top_p */
        double acc = 0.0;
        int keep = k;
        for (int i = 0; i < k; i++) {
            acc += s->probs[i] / sum;
            if (acc >= s->top_p) {
                keep = i + 1;
                break;
            }
        }
        sum = 0.0;
        for (int i = 0; i < keep; i++) sum += s->probs[i];
        k = keep;
    }
    double u = next_uniform(s) * sum, acc = 0.0;
    for (int i = 0; i < k; i++) {
        acc += s->probs[i];
        if (u < acc) return s->idx[i];
    }
    return s->idx[k - 1];
}
