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

/* Clean greedy decode from the prefilled base; keeps the logits of the first n_save steps. */
int sweep_clean_decode(run_ctx *r, example_state *s, int n_save) {
    int V = r->hp->n_vocab, n = s->prompt.n;
    if (!(s->clean = kvp_kv_clone(s->base, r->err))) return r->err->code;
    s->clean_tok = malloc((size_t)(r->max_new + 1) * sizeof *s->clean_tok);
    s->clean_logits = malloc((size_t)(n_save > 0 ? n_save : 1) * V * sizeof(float));
    float *lg = malloc((size_t)V * sizeof(float));
    if (!s->clean_tok || !s->clean_logits || !lg) {
        free(lg);
        return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    }
    int32_t x = s->prompt.ids[n - 1];
    for (int step = 0; step < r->max_new; step++) {
        kvp_row row = {x, n - 1 + step, s->clean, lg};
        if (kvp_forward(r->ctx, &row, 1, r->err)) {
            free(lg);
            return r->err->code;
        }
        s->clean_steps = step + 1;
        if (step < n_save) memcpy(s->clean_logits + (size_t)step * V, lg, (size_t)V * sizeof(float)), s->n_saved = step + 1;
        x = kvp_argmax(lg, V);
        if (sweep_is_end(r, x)) {
            s->clean_eog = 1;
            break;
        }
        s->clean_tok[s->n_clean++] = x;
    }
    free(lg);
    return 0;
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
    if (*first_div < 0 && s->clean_eog != c->eog) *first_div = c->W + len;
    *agree = len ? (double)same / len : (s->clean_eog == c->eog ? 1.0 : 0.0);
}

/* Decode cells together until all finish; write each record as it finishes (in cell order).
 * Cells may have different W: each feeds its own next token at its own position. */
int sweep_decode_cells(run_ctx *r, example_state *s, const kvp_example *ex, cell *cells, int n_cells) {
    int V = r->hp->n_vocab, n = s->prompt.n, B = kvp_ctx_max_batch(r->ctx);
    kvp_row *rows = malloc((size_t)B * sizeof *rows);
    cell **act = malloc((size_t)B * sizeof *act);
    if (!rows || !act) {
        free(rows);
        free(act);
        return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    }
    int rc = 0;
    while (!rc) {
        int any = 0;
        for (int i = 0; i < n_cells; i++) any |= !cells[i].done;
        if (!any) break;
        for (int i0 = 0; i0 < n_cells && !rc; i0 += B) { /* batches of at most B rows */
            int n_act = 0;
            for (int i = i0; i < n_cells && i < i0 + B; i++) {
                cell *c = &cells[i];
                if (c->done) continue;
                int step = c->n_tok; /* tokens so far, the clean ones before W included */
                int32_t x = step == 0 ? s->prompt.ids[n - 1] : c->tok[step - 1];
                rows[n_act] = (kvp_row){x, n - 1 + step, c->kv, c->logits};
                act[n_act++] = c;
            }
            if (!n_act) continue;
            if (r->o->unbatched)
                for (int k = 0; k < n_act && !rc; k++) rc = kvp_forward(r->ctx, &rows[k], 1, r->err);
            else
                rc = kvp_forward(r->ctx, rows, n_act, r->err);
            for (int k = 0; k < n_act && !rc; k++) {
                cell *c = act[k];
                int step = c->n_tok;
                if (step < c->W + r->kl_steps && step < s->n_saved) {
                    c->kl_sum += kl_logits(s->clean_logits + (size_t)step * V, c->logits, V);
                    c->kl_n++;
                }
                if (step == 0 && r->o->readout == KVP_READOUT_FIRST_TOKEN) c->readout = sweep_readout(r, c->logits);
                int32_t t = kvp_argmax(c->logits, V);
                if (sweep_is_end(r, t)) c->eog = c->done = 1;
                else if ((c->tok[c->n_tok++] = t, c->n_tok >= r->max_new)) c->done = 1;
            }
        }
        for (int i = 0; i < n_cells && !rc; i++) { /* records of cells that just finished, in cell order */
            cell *c = &cells[i];
            if (!c->done || !c->kv) continue;
            double ag;
            int fd;
            agreement(s, c, &ag, &fd);
            rc = sweep_write_record(r, ex, kvp_condition_name(c->cond), c->L, c->W, c->tok, c->n_tok, c->eog, 1, c->kl_sum,
                              c->kl_n, ag, fd, n, c->readout, sweep_is_loglik(r->o->readout) ? c->cand_lp : NULL,
                              sweep_now_s() - c->t0);
            kvp_kv_free(c->kv);
            c->kv = NULL;
        }
    }
    free(rows);
    free(act);
    return rc;
}
