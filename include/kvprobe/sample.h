/* kvprobe — next-token selection: greedy, or seeded sampling with temperature/top-k/top-p. */
#ifndef KVPROBE_SAMPLE_H
#define KVPROBE_SAMPLE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvp_sampler {
    float temperature; /* <= 0: greedy (argmax, lowest id wins ties) */
    int top_k;         /* <= 0: no limit */
    float top_p;       /* >= 1: no limit */
    uint64_t rng;      /* xorshift state; set with kvp_sampler_init */
    float *probs;      /* scratch [n_vocab] */
    int32_t *idx;      /* scratch [n_vocab] */
    int n_vocab;
} kvp_sampler;

int kvp_sampler_init(kvp_sampler *s, int n_vocab, float temperature, int top_k, float top_p, uint64_t seed);
void kvp_sampler_free(kvp_sampler *s);
int32_t kvp_argmax(const float *logits, int n);
/* kvp_argmax, and in *margin its logit minus the largest other one (+inf when n == 1). */
int32_t kvp_argmax_margin(const float *logits, int n, float *margin);
int32_t kvp_sample(kvp_sampler *s, const float *logits);

#ifdef __cplusplus
}
#endif
#endif
