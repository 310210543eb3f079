/* kvprobe — KV cache policies for inference: what a sequence keeps of its prompt's K/V.
 *
 * The prompt span is positions [0, n_prompt - 1): every prompt token but the last, which is
 * the first decode step's input (as in the splice, splice.h). Generated tokens are always kept.
 *
 *   full                       keep everything
 *   scaffold:L=..,W=..         once W tokens are generated, layers >= L read the prompt span
 *                              from a shared scaffold cache (the BLANK donor: the chat template
 *                              with neutral filler, computed once and shared by every request)
 *                              and the request's own K/V there are released
 *   drop-content:L=..,W=..     once W tokens are generated, evict the user-content positions
 *                              at layers >= L (the scaffold stays)
 *   scaffold / drop-content ...,recent=N   the same, but the prompt span's last N positions
 *                              stay the request's own at every layer (a recent window: where a
 *                              task's question usually ends)
 *   streaming:budget=B[,sinks=4]      StreamingLLM: the first `sinks` positions (attention
 *                              sinks) and the most recent ones
 *   h2o:budget=B[,recent=R]    H2O: the R most recent positions and the heavy hitters, the
 *                              positions with the largest attention accumulated over every
 *                              prompt query (R = B / 2 by default)
 *   snapkv:budget=B[,window=32,kernel=7]   SnapKV: the last `window` prompt positions (the
 *                              observation window) and the positions with the largest
 *                              window attention, average-pooled over `kernel` neighbours
 *
 * B is the fraction of the prompt span kept per layer and KV head (0 < B <= 1), or a count
 * with `tokens=N`. The three peers act once, right after the prefill, per layer and KV head
 * (with grouped-query attention a KV head's score sums its query heads); the evicted K/V are
 * freed (kv.h), so the budget is memory not held. */
#ifndef KVPROBE_POLICY_H
#define KVPROBE_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "kvprobe/chat.h"
#include "kvprobe/error.h"
#include "kvprobe/kv.h"
#include "kvprobe/model.h"
#include "kvprobe/splice.h"
#include "kvprobe/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvp_policy_kind {
    KVP_POLICY_FULL = 0,
    KVP_POLICY_SCAFFOLD,
    KVP_POLICY_DROP_CONTENT,
    KVP_POLICY_STREAMING,
    KVP_POLICY_H2O,
    KVP_POLICY_SNAPKV,
} kvp_policy_kind;

typedef struct kvp_kv_policy {
    kvp_policy_kind kind;
    int layer_from; /* scaffold, drop-content: L */
    int step;       /* scaffold, drop-content: W */
    double budget;  /* streaming, h2o, snapkv: kept fraction of the prompt span */
    int tokens;     /* or kept positions (> 0 overrides budget) */
    int sinks;      /* streaming (default 4) */
    int recent;     /* h2o: recent positions kept (default: half the kept ones; -1 = default);
                     * scaffold, drop-content: the span's last positions left unedited (-1 = 0) */
    int window;     /* snapkv observation window (default 32) */
    int kernel;     /* snapkv pooling kernel, odd (default 7) */
} kvp_kv_policy;

const char *kvp_policy_name(kvp_policy_kind k);
/* Parse SPEC (above); errors name the bad part. */
int kvp_kv_policy_parse(const char *spec, kvp_kv_policy *out, kvp_error *err);
/* The canonical spec, every parameter spelled out (records, reports). */
int kvp_kv_policy_format(const kvp_kv_policy *p, char *buf, size_t n);
/* Positions a prefill policy keeps of a prompt span of n positions (n for the others). */
int kvp_kv_policy_kept(const kvp_kv_policy *p, int n);
int kvp_kv_policy_is_prefill(const kvp_kv_policy *p); /* streaming, h2o, snapkv */
int kvp_kv_policy_is_edit(const kvp_kv_policy *p);    /* scaffold, drop-content: an edit at step W */
/* The splice an edit policy makes to a request's cache of prompt pr once W tokens are
 * generated: span all-prompt less the recent window; scaffold = BLANK from donor (the shared
 * scaffold cache gives the same K/V, pages shared), drop-content = its user content evicted. */
kvp_splice kvp_kv_policy_splice(const kvp_kv_policy *p, const kvp_prompt *pr, const kvp_kv *donor);

/* ---- kept sets: keep[i] = 1 for the i (of n) positions kept; return the count ------------- */
int kvp_keep_streaming(int n, int budget, int sinks, uint8_t *keep);
/* score[i]: attention accumulated by position i */
int kvp_keep_h2o(const float *score, int n, int budget, int recent, uint8_t *keep);
/* votes[i], i < n - window: the observation window's attention to position i */
int kvp_keep_snapkv(const float *votes, int n, int budget, int window, int kernel, uint8_t *keep);

/* ---- the shared scaffold cache ------------------------------------------------------------ */

/* BLANK donors of every request, as one prefix tree of caches: a request's donor (its prompt
 * with each user-content run replaced by the filler's tokens, cut to the run's length) is the
 * cached donor with the longest common token prefix, extended by the tokens it lacks; the
 * first request with a given template prefix also computes that prefix followed by a long
 * filler run (max_filler tokens), so later prompts of any length share it and compute only
 * their closing scaffold (end of turn, assistant header). Entries share pages (kv.h), so the
 * cache holds each position once. Positions are the request's own, so no K needs re-rotation. */
typedef struct kvp_scaffold kvp_scaffold;

/* Donors are computed with ctx (a context of model m); filler NULL = KVP_DEFAULT_FILLER.
 * layer_from: the lowest layer the requests read (the policy's L; 0 = every layer): each
 * request's own donor then holds only layers >= layer_from (the long filler runs keep every
 * layer, since donors are extended from them). */
kvp_scaffold *kvp_scaffold_new(const kvp_model *m, kvp_ctx *ctx, const kvp_tokenizer *tok, const char *filler,
                               int max_filler, int layer_from, kvp_kv_type type, kvp_error *err);
void kvp_scaffold_free(kvp_scaffold *s);
/* The donor cache for prompt p: it holds positions [0, p->n - 1) of p's BLANK donor (and
 * maybe more). Owned by the scaffold cache; valid until kvp_scaffold_free. */
const kvp_kv *kvp_scaffold_donor(kvp_scaffold *s, const kvp_prompt *p, kvp_error *err);
/* Memory of every cached donor, shared pages counted once; number of cached donors. */
int kvp_scaffold_bytes(const kvp_scaffold *s, size_t *bytes, kvp_error *err);
int kvp_scaffold_entries(const kvp_scaffold *s);
/* Tokens computed so far (what sharing saves: compare with the sum of donor lengths). */
long kvp_scaffold_computed(const kvp_scaffold *s);

/* ---- running a request under a policy ------------------------------------------------------ */

typedef struct kvp_policy_run {
    const kvp_kv_policy *policy;
    kvp_ctx *ctx;
    kvp_kv *kv;
    const kvp_prompt *prompt;   /* ids and segment labels */
    kvp_scaffold *scaffold;     /* scaffold policy: the shared donors */
    int applied;                /* the policy's edit has been made */
} kvp_policy_run;

/* Prefill prompt positions [0, n - 1) into r->kv (empty), scoring attention where the policy
 * needs it, and apply a prefill policy. The caller then decodes the last prompt token. */
int kvp_policy_prefill(kvp_policy_run *r, kvp_error *err);
/* Call with the number of tokens generated so far, before the next decode step: applies
 * scaffold / drop-content when it reaches W. */
int kvp_policy_step(kvp_policy_run *r, int generated, kvp_error *err);

#ifdef __cplusplus
}
#endif
#endif
