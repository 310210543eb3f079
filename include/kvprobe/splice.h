/* kvprobe — the KV splice: the study's intervention, in one place.
 *
 * Applied once, in place, to a cache that holds a prompt of n_prompt tokens whose last token
 * has not been fed yet (it is the first decode step), plus any tokens generated so far:
 *   span   = prompt positions [0, n_prompt - 1), filtered by segment (--span), less the last
 *            keep_recent of them (a recent window that stays the sequence's own)
 *   layers = every layer l >= layer_from
 * Conditions:
 *   clean         no edit
 *   blank, other  K/V copied from a donor cache at the same layers and positions
 *   zero          K and V set to 0 (still attended)
 *   mean          each slot set to its layer/head's mean K and V over the span
 *   noise         Gaussian per layer, head and dimension, matched to the span's mean and std
 *   drop          span slots evicted from attention (never attended again at those layers)
 *   drop-content  evict only the user-content positions, keep the scaffold */
#ifndef KVPROBE_SPLICE_H
#define KVPROBE_SPLICE_H

#include <stdint.h>

#include "kvprobe/error.h"
#include "kvprobe/kv.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvp_condition {
    KVP_COND_CLEAN = 0,
    KVP_COND_BLANK,
    KVP_COND_ZERO,
    KVP_COND_MEAN,
    KVP_COND_NOISE,
    KVP_COND_OTHER,
    KVP_COND_DROP,
    KVP_COND_DROP_CONTENT,
    KVP_COND_COUNT
} kvp_condition;

typedef enum kvp_span {
    KVP_SPAN_ALL_PROMPT = 0, /* every prompt position but the last token */
    KVP_SPAN_USER_CONTENT,   /* positions labelled user */
    KVP_SPAN_SCAFFOLD,       /* positions labelled scaffold */
} kvp_span;

const char *kvp_condition_name(kvp_condition c);
int kvp_condition_from_name(const char *name, kvp_condition *out);
const char *kvp_span_name(kvp_span s);
int kvp_span_from_name(const char *name, kvp_span *out);
/* Does the condition need a donor cache? */
int kvp_condition_needs_donor(kvp_condition c);

typedef struct kvp_splice {
    kvp_condition cond;
    int layer_from;        /* L: edit layers [L, n_layer); L = n_layer edits nothing */
    kvp_span span;
    int n_prompt;          /* prompt tokens */
    const uint8_t *seg;    /* [n_prompt] kvp_segment labels (chat.h); NULL = all user */
    const kvp_kv *donor;   /* blank / other: the donor prompt's cache, same positions */
    uint64_t seed;         /* noise */
    int keep_recent;       /* positions [n_prompt - 1 - keep_recent, n_prompt - 1) stay unedited */
} kvp_splice;

/* Which prompt positions the splice touches: mask[p] = 1 for p in the span ([n_prompt]). */
void kvp_splice_positions(const kvp_splice *s, uint8_t *mask);

int kvp_splice_apply(kvp_kv *kv, const kvp_splice *s, kvp_error *err);

#ifdef __cplusplus
}
#endif
#endif
