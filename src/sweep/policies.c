/* --kv-policy cells: the example's prompt prefilled and compressed by a prefill policy
 * (streaming, h2o, snapkv), then decoded from step 0 with the other cells of its wave. */
#include "sweep_impl.h"

int sweep_policy_cell(run_ctx *r, const example_state *s, const kvp_example *ex, int i, cell *ce) {
    int V = r->hp->n_vocab;
    memset(ce, 0, sizeof *ce);
    ce->cond = KVP_COND_COUNT; /* named by its policy */
    ce->policy = i;
    ce->L = 0; /* every layer */
    ce->W = 0; /* at prefill */
    ce->applied = 1;
    ce->readout = -1;
    ce->tok = malloc((size_t)(r->max_new + 1) * sizeof *ce->tok);
    ce->margin = malloc((size_t)(r->max_new + 1) * sizeof *ce->margin);
    ce->logits = malloc((size_t)V * sizeof(float));
    if (!ce->tok || !ce->margin || !ce->logits) return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    if (sweep_text_start(r, ex, s, 0, &ce->text)) return r->err->code;
    if (!(ce->kv = kvp_kv_new(r->m, kvp_kv_capacity(s->base), KVP_KV_F32, r->err))) return r->err->code;
    kvp_policy_run run = {&r->o->policies[i], r->ctx, ce->kv, &s->prompt, NULL, 0};
    return kvp_policy_prefill(&run, r->err);
}
