/* --kv-policy cells: the example's prompt prefilled and compressed by a prefill policy
 * (streaming, h2o, snapkv), then decoded from step 0 with the other cells of its wave; or, for
 * scaffold / drop-content with a recent window, the clean run forked at the policy's W and
 * spliced as the policy edits a request (schedule.c forks them like the grid's cells). */
#include "sweep_impl.h"

void sweep_policy_cell_at(const run_ctx *r, int i, int *L, int *W) {
    const kvp_kv_policy *p = &r->o->policies[i];
    *L = kvp_kv_policy_is_edit(p) ? p->layer_from : 0;
    *W = kvp_kv_policy_is_edit(p) ? p->step : 0;
}

int sweep_policy_cell(run_ctx *r, const example_state *s, const kvp_example *ex, int i, cell *ce) {
    memset(ce, 0, sizeof *ce);
    ce->cond = KVP_COND_COUNT; /* named by its policy */
    ce->policy = i;
    ce->L = 0; /* every layer */
    ce->W = 0; /* at prefill */
    ce->applied = 1;
    ce->readout = -1;
    if (sweep_cell_buffers(r, ex, s, 0, ce)) return r->err->code;
    if (!(ce->kv = kvp_kv_new(r->m, kvp_kv_capacity(s->base), KVP_KV_F32, r->err))) return r->err->code;
    kvp_policy_run run = {&r->o->policies[i], r->ctx, ce->kv, &s->prompt, NULL, 0};
    if (kvp_policy_prefill(&run, r->err)) return r->err->code;
    ce->prompt_own = sweep_prompt_kv_own(ce->kv, NULL, s->prompt.n);
    return 0;
}

double sweep_prompt_kv_own(const kvp_kv *kv, const kvp_splice *sp, int n_prompt) {
    int NL = kvp_kv_n_layer(kv), H = kvp_kv_n_head_kv(kv), span = n_prompt - 1, later = kvp_kv_len(kv) - span;
    if (span <= 0) return 1.0;
    double held = 0;
    for (int l = 0; l < NL; l++)
        for (int h = 0; h < H; h++) held += kvp_kv_held(kv, l, h) - later; /* positions after the prompt are never evicted here */
    if (sp && kvp_condition_needs_donor(sp->cond) && sp->layer_from < NL) {
        uint8_t *mask = malloc((size_t)n_prompt);
        int spliced = 0;
        if (mask) {
            kvp_splice_positions(sp, mask);
            for (int p = 0; p < span; p++) spliced += mask[p] != 0;
        }
        free(mask);
        held -= (double)(NL - sp->layer_from) * H * spliced;
    }
    return held / ((double)NL * H * span);
}
