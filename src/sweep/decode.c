/* Decoding: prefills, the clean greedy run, and the batched decode of every cell of an example
 * (each at its own step), with the KL and agreement read against the clean run. */
#include "sweep_impl.h"

kvp_kv *sweep_prefill(run_ctx *r, const int32_t *ids, int n, int n_ctx) {
    kvp_kv *kv = kvp_kv_new(r->m, n_ctx, KVP_KV_F32, r->err);
    if (kv && kvp_decode(r->ctx, kv, ids, n, NULL, NULL, r->err)) {
        kvp_kv_free(kv);
        return NULL;
    }
    return kv;
}

int sweep_is_end(const run_ctx *r, int32_t t) { return kvp_token_is_eog(r->tok, t); }

/* ---- the text so far, and the stop sequence ----------------------------------------------- */

static int text_put(gen_text *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *p = realloc(t->p, cap);
        if (!p) return -1;
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = 0;
    return 0;
}

/* Append token tok's bytes; 1 if the example's stop sequence now appears in the text (looked
 * for only where it could end inside the new bytes, the response prefix included), 0 if not,
 * -1 out of memory. */
static int text_add(run_ctx *r, const kvp_example *ex, gen_text *t, int32_t tok) {
    char buf[256];
    size_t n = kvp_token_to_bytes(r->tok, tok, 0, buf, sizeof buf), before = t->len;
    if (text_put(t, buf, n < sizeof buf ? n : sizeof buf)) return -1;
    if (!ex->stop) return 0;
    size_t k = strlen(ex->stop), from = before + 1 > k ? before + 1 - k : 0;
    return from < t->len && strstr(t->p + from, ex->stop) != NULL;
}

int sweep_text_start(run_ctx *r, const kvp_example *ex, const example_state *s, int W, gen_text *t) {
    memset(t, 0, sizeof *t);
    const char *pre = ex->response_prefix ? ex->response_prefix : "";
    if (text_put(t, pre, strlen(pre))) return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    t->start = t->len;
    for (int i = 0; i < W && i < s->n_clean; i++)
        if (text_add(r, ex, t, s->clean_tok[i]) < 0) return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    return 0;
}


int sweep_cell_buffers(run_ctx *r, const kvp_example *ex, const example_state *s, int W, cell *ce) {
    ce->tok = malloc((size_t)(r->max_new + 1) * sizeof *ce->tok);
    ce->margin = malloc((size_t)(r->max_new + 1) * sizeof *ce->margin);
    ce->logits = malloc((size_t)r->hp->n_vocab * sizeof(float));
    if (!ce->tok || !ce->margin || !ce->logits) return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    return sweep_text_start(r, ex, s, W, &ce->text);
}

/* Clean greedy decodes from each prefilled base, side by side; each keeps the logits of its
 * first n_save steps. */
int sweep_clean_decode_group(run_ctx *r, const kvp_example *const *ex, example_state *const *s, int n, int n_save) {
    int V = r->hp->n_vocab, rc = 0;
    float *lg = malloc((size_t)n * V * sizeof(float));
    gen_text *text = calloc((size_t)n, sizeof *text);
    kvp_row *rows = malloc((size_t)n * sizeof *rows);
    int *act = malloc((size_t)n * sizeof *act), *done = calloc((size_t)n, sizeof *done);
    if (!lg || !text || !rows || !act || !done) rc = kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++) {
        example_state *e = s[i];
        e->clean_tok = malloc((size_t)(r->max_new + 1) * sizeof *e->clean_tok);
        e->clean_margin = malloc((size_t)(r->max_new + 1) * sizeof *e->clean_margin);
        e->clean_logits = malloc((size_t)(n_save > 0 ? n_save : 1) * V * sizeof(float));
        e->clean_stop = STOP_MAX_TOKENS;
        if (!(e->clean = kvp_kv_clone(e->base, r->err)) || (rc = sweep_text_start(r, ex[i], e, 0, &text[i]))) break;
        if (!e->clean_tok || !e->clean_margin || !e->clean_logits) rc = kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
        done[i] = r->max_new <= 0;
    }
    if (!rc && r->err->code) rc = r->err->code;
    for (int step = 0; step < r->max_new && !rc; step++) {
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (done[i]) continue;
            example_state *e = s[i];
            int np = e->prompt.n;
            int32_t x = step == 0 ? e->prompt.ids[np - 1] : e->clean_tok[step - 1];
            rows[k] = (kvp_row){x, np - 1 + step, e->clean, lg + (size_t)k * V};
            act[k++] = i;
        }
        if (!k) break;
        if ((rc = kvp_forward(r->ctx, rows, k, r->err))) break;
        for (int j = 0; j < k && !rc; j++) {
            int i = act[j];
            example_state *e = s[i];
            const float *l = lg + (size_t)j * V;
            e->clean_steps = step + 1;
            if (step < n_save) memcpy(e->clean_logits + (size_t)step * V, l, (size_t)V * sizeof(float)), e->n_saved = step + 1;
            int32_t x = kvp_argmax_margin(l, V, &e->clean_margin[step]);
            if (sweep_is_end(r, x)) {
                e->clean_stop = STOP_EOG, done[i] = 1;
                continue;
            }
            e->clean_tok[e->n_clean++] = x;
            int hit = text_add(r, ex[i], &text[i], x);
            if (hit < 0) rc = kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
            if (hit > 0) e->clean_stop = STOP_SEQUENCE, done[i] = 1;
        }
    }
    for (int i = 0; text && i < n; i++) free(text[i].p);
    free(text);
    free(lg);
    free(rows);
    free(act);
    free(done);
    return rc;
}

int sweep_clean_decode(run_ctx *r, const kvp_example *ex, example_state *s, int n_save) {
    return sweep_clean_decode_group(r, &ex, &s, 1, n_save);
}

outcome sweep_clean_outcome(const run_ctx *r, const example_state *s, const char *cond, int L, int W) {
    return (outcome){.cond = cond, .L = L, .W = W, .tok = s->clean_tok, .n_tok = s->n_clean, .stop = s->clean_stop, .prompt_own = 1.0,
                     .agreement = 1.0, .first_div = -1, .n_prompt = s->prompt.n, .readout = s->clean_readout,
                     .cand_lp = sweep_is_loglik(r->o->readout) ? s->clean_lp : NULL,
                     .margin = r->o->margins ? s->clean_margin : NULL};
}

/* KL(p || q) of the softmax distributions of two logit vectors, in nats (fp64). */
static double kl_logits(const float *p_logits, const float *q_logits, int n) {
    double pm = -INFINITY, qm = -INFINITY, ps = 0, qs = 0;
    for (int i = 0; i < n; i++) pm = fmax(pm, p_logits[i]), qm = fmax(qm, q_logits[i]);
    for (int i = 0; i < n; i++) ps += exp(p_logits[i] - pm), qs += exp(q_logits[i] - qm);
    double lps = log(ps), lqs = log(qs), kl = 0;
    for (int i = 0; i < n; i++) {
        double lp = p_logits[i] - pm - lps, lq = q_logits[i] - qm - lqs;
        kl += exp(lp) * (lp - lq);
    }
    return kl > 0 ? kl : 0;
}

/* Token agreement with the clean continuation from step W on, and the first step that differs. */
static void agreement(const example_state *s, const cell *c, double *agree, int *first_div) {
    int a = s->n_clean > c->W ? s->n_clean - c->W : 0, b = c->n_tok > c->W ? c->n_tok - c->W : 0;
    int len = a > b ? a : b, same = 0;
    *first_div = -1;
    for (int i = 0; i < len; i++) {
        int w = c->W + i;
        int eq = w < s->n_clean && w < c->n_tok && s->clean_tok[w] == c->tok[w];
        same += eq;
        if (!eq && *first_div < 0) *first_div = w;
    }
    if (*first_div < 0 && s->clean_stop != c->stop) *first_div = c->W + len;
    *agree = len ? (double)same / len : (s->clean_stop == c->stop ? 1.0 : 0.0);
}

/* Feed every unfinished cell of the groups (the examples in flight) one token, in forward
 * passes of at most the context's batch (a cell's results do not depend on the rows beside it),
 * then write the records of the cells that finished, group by group in cell order. Cells may
 * have different W: each feeds its own next token at its own position. */
int sweep_decode_step(run_ctx *r, cell_group *g, int n_groups) {
    int V = r->hp->n_vocab, B = kvp_ctx_max_batch(r->ctx), rc = 0;
    kvp_row *rows = malloc((size_t)B * sizeof *rows);
    cell **act = malloc((size_t)B * sizeof *act);
    cell_group **of = malloc((size_t)B * sizeof *of);
    if (!rows || !act || !of) rc = kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    for (int k0 = 0, i0 = 0; !rc && k0 < n_groups;) { /* one forward pass per B unfinished cells */
        int n_act = 0;
        for (; k0 < n_groups && n_act < B; k0++, i0 = 0) {
            for (; i0 < g[k0].n_cells && n_act < B; i0++) {
                cell *c = &g[k0].cells[i0];
                if (c->done) continue;
                const example_state *s = g[k0].s;
                int n = s->prompt.n, step = c->n_tok; /* tokens so far, the clean ones before W included */
                int32_t x = step == 0 ? s->prompt.ids[n - 1] : c->tok[step - 1];
                rows[n_act] = (kvp_row){x, n - 1 + step, c->kv, c->logits};
                of[n_act] = &g[k0];
                act[n_act++] = c;
            }
            if (i0 < g[k0].n_cells) break; /* the batch is full inside this group */
        }
        if (!n_act) break;
        if (r->o->unbatched)
            for (int k = 0; k < n_act && !rc; k++) rc = kvp_forward(r->ctx, &rows[k], 1, r->err);
        else
            rc = kvp_forward(r->ctx, rows, n_act, r->err);
        if (rc) kvp_wrap(r->err, "example %s%s", of[0]->ex->id, of[n_act - 1] != of[0] ? " (and the next, decoding beside it)" : "");
        for (int k = 0; k < n_act && !rc; k++) {
            cell *c = act[k];
            const example_state *s = of[k]->s;
            int step = c->n_tok;
            if (step < c->W + r->kl_steps && step < s->n_saved) {
                c->kl_sum += kl_logits(s->clean_logits + (size_t)step * V, c->logits, V);
                c->kl_n++;
            }
            if (step == 0 && r->o->readout == KVP_READOUT_FIRST_TOKEN) c->readout = sweep_readout(r, c->logits);
            int32_t t = kvp_argmax_margin(c->logits, V, &c->margin[step]);
            if (sweep_is_end(r, t)) {
                c->stop = STOP_EOG, c->done = 1;
                continue;
            }
            c->tok[c->n_tok++] = t;
            int hit = text_add(r, of[k]->ex, &c->text, t);
            if (hit < 0) rc = kvp_fail(r->err, KVP_E_NOMEM, "example %s: out of memory", of[k]->ex->id);
            if (hit > 0) c->stop = STOP_SEQUENCE, c->done = 1;
            else if (c->n_tok >= r->max_new) c->stop = STOP_MAX_TOKENS, c->done = 1;
        }
    }
    for (int k = 0; k < n_groups && !rc; k++) { /* records of cells that just finished */
        const example_state *s = g[k].s;
        for (int i = 0; i < g[k].n_cells && !rc; i++) {
            cell *c = &g[k].cells[i];
            if (!c->done || !c->kv) continue;
            kvp_kv_mem mem;
            kvp_kv_memory(c->kv, &mem);
            outcome o = {.cond = c->policy >= 0 ? r->policy_name[c->policy] : kvp_condition_name(c->cond), .L = c->L, .W = c->W, .applied = 1, .tok = c->tok,
                         .n_tok = c->n_tok, .stop = c->stop, .kl = c->kl_sum, .kl_n = c->kl_n, .n_prompt = s->prompt.n,
                         .readout = c->readout, .cand_lp = sweep_is_loglik(r->o->readout) ? c->cand_lp : NULL,
                         .margin = r->o->margins ? c->margin : NULL, .seconds = sweep_now_s() - c->t0,
                         .kv_bytes = mem.bytes, .kv_entries = mem.slots, .prompt_own = c->prompt_own};
            agreement(s, c, &o.agreement, &o.first_div);
            if ((rc = sweep_write_record(r, g[k].ex, &o))) kvp_wrap(r->err, "example %s", g[k].ex->id);
            kvp_kv_free(c->kv);
            c->kv = NULL;
        }
    }
    free(rows);
    free(act);
    free(of);
    return rc;
}
