/* Read-outs of label and multiple-choice tasks: the candidates, the first-token read-out, and
 * --readout loglik / loglik-norm by teacher forcing. */
#include "sweep_impl.h"

const char *sweep_readout_name(kvp_readout ro) {
    return ro == KVP_READOUT_LOGLIK        ? "loglik"
           : ro == KVP_READOUT_LOGLIK_NORM ? "loglik-norm"
           : ro == KVP_READOUT_FIRST_TOKEN ? "first-token"
                                           : "text";
}

int sweep_is_loglik(kvp_readout ro) { return ro == KVP_READOUT_LOGLIK || ro == KVP_READOUT_LOGLIK_NORM; }

/* The candidate answers of a label / multiple-choice example ("positive|negative", or the
 * letters A..), each with the first token of its spellings "x", " x", "X", " X". */
int sweep_readout_candidates(run_ctx *r, const kvp_example *ex) {
    for (int c = 0; c < r->n_cand; c++) free(r->cont[c]), r->cont[c] = NULL, r->n_cont[c] = 0;
    r->n_cand = 0;
    if (ex->kind == KVP_TASK_CHOICE) {
        for (int i = 0; i < ex->n_choices && i < KVP_MAX_CAND; i++) snprintf(r->cand[r->n_cand++], 32, "%c", 'A' + i);
    } else if (ex->kind == KVP_TASK_LABEL && ex->labels) {
        for (const char *p = ex->labels; *p && r->n_cand < KVP_MAX_CAND;) {
            size_t n = strcspn(p, "|");
            snprintf(r->cand[r->n_cand++], 32, "%.*s", (int)(n < 31 ? n : 31), p);
            p += n + (p[n] == '|');
        }
    }
    for (int c = 0; c < r->n_cand; c++) {
        r->cand_nv[c] = 0;
        for (int v = 0; v < 4; v++) {
            char text[40];
            snprintf(text, sizeof text, "%s%s", v & 1 ? " " : "", r->cand[c]);
            if (v & 2) text[v & 1] = (char)toupper((unsigned char)text[v & 1]);
            int32_t *ids = NULL;
            int n = 0;
            if (kvp_tokenize(r->tok, text, strlen(text), 0, 0, &ids, &n, r->err)) return r->err->code;
            int dup = 0;
            for (int k = 0; k < r->cand_nv[c]; k++) dup |= n > 0 && r->cand_tok[c][k] == ids[0];
            if (n > 0 && !dup) r->cand_tok[c][r->cand_nv[c]++] = ids[0];
            free(ids);
        }
        if (sweep_is_loglik(r->o->readout)) { /* continuation: the label word, or the option's text */
            const char *cand = ex->kind != KVP_TASK_CHOICE ? r->cand[c] : ex->choices ? ex->choices[c] : NULL;
            char *text = cand ? malloc(strlen(cand) + 2) : NULL;
            if (!text) return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
            /* cloze: the answer follows "Answer:" after a space, as in the demonstrations */
            sprintf(text, "%s%s", r->o->format == KVP_FORMAT_CLOZE ? " " : "", cand);
            r->cont_bytes[c] = strlen(text);
            int rc = kvp_tokenize(r->tok, text, strlen(text), 0, 0, &r->cont[c], &r->n_cont[c], r->err);
            free(text);
            if (rc) return rc;
            if (r->n_cont[c] == 0) return kvp_fail(r->err, KVP_E_INVALID, "example %s: candidate %s has no tokens", ex->id, r->cand[c]);
            if (r->n_cont[c] > KVP_LOGLIK_MAX_TOKENS) { /* scored on its first tokens: normalize by their bytes */
                r->n_cont[c] = KVP_LOGLIK_MAX_TOKENS;
                r->cont_bytes[c] = 0;
                for (int j = 0; j < r->n_cont[c]; j++) r->cont_bytes[c] += kvp_token_to_bytes(r->tok, r->cont[c][j], 0, NULL, 0);
            }
        }
    }
    return 0;
}

/* The candidate whose best spelling has the highest logit (ties: the first). */
int sweep_readout(const run_ctx *r, const float *logits) {
    int best = -1;
    float bl = -INFINITY;
    for (int c = 0; c < r->n_cand; c++)
        for (int k = 0; k < r->cand_nv[c]; k++)
            if (logits[r->cand_tok[c][k]] > bl) bl = logits[r->cand_tok[c][k]], best = c;
    return best;
}

static double token_logprob(const float *lg, int V, int32_t t) {
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++) m = fmax(m, lg[i]);
    for (int i = 0; i < V; i++) sum += exp(lg[i] - m);
    return lg[t] - m - log(sum);
}

/* Feed candidate c's continuation into kv (which holds the n-1+from positions before) from its
 * token `from` on: input j is the last prompt token (j = 0) or continuation token j-1, so the
 * pass at input j predicts continuation token j — the same step numbering as generation. */
static int force_continuation(run_ctx *r, const example_state *s, kvp_kv *kv, int c, int from, double *lp) {
    int k = r->n_cont[c], m = k - from, V = r->hp->n_vocab, n = s->prompt.n;
    if (m <= 0) return 0;
    int32_t *in = calloc((size_t)m, sizeof *in);
    float *lg = malloc((size_t)m * V * sizeof(float));
    int rc = in && lg ? 0 : kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    for (int j = from; j < k && !rc; j++) in[j - from] = j == 0 ? s->prompt.ids[n - 1] : r->cont[c][j - 1];
    if (!rc) rc = kvp_decode(r->ctx, kv, in, m, lg, NULL, r->err);
    for (int j = from; j < k && !rc; j++) lp[j] = token_logprob(lg + (size_t)(j - from) * V, V, r->cont[c][j]);
    free(in);
    free(lg);
    return rc;
}

/* The candidate with the highest log-probability, or per byte for loglik-norm (ties: the first). */
static int best_candidate(const run_ctx *r, const double *lp) {
    int best = -1;
    double bs = -INFINITY;
    for (int c = 0; c < r->n_cand; c++) {
        double v = r->o->readout == KVP_READOUT_LOGLIK_NORM ? lp[c] / (double)r->cont_bytes[c] : lp[c];
        if (best < 0 || v > bs) best = c, bs = v;
    }
    return best;
}

/* The clean scores, keeping each continuation's cache for the cells to fork. */
int sweep_loglik_clean(run_ctx *r, example_state *s) {
    for (int c = 0; c < r->n_cand; c++) {
        if (!(s->cont_lp[c] = malloc((size_t)r->n_cont[c] * sizeof(double)))) return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
        if (!(s->cont_kv[c] = kvp_kv_clone(s->base, r->err))) return r->err->code;
        if (force_continuation(r, s, s->cont_kv[c], c, 0, s->cont_lp[c])) return r->err->code;
        s->clean_lp[c] = 0;
        for (int j = 0; j < r->n_cont[c]; j++) s->clean_lp[c] += s->cont_lp[c][j];
    }
    s->clean_readout = best_candidate(r, s->clean_lp);
    return 0;
}

/* One cell's scores: tokens before W are clean; the edit lands before the pass predicting
 * token W (a continuation shorter than W + 1 tokens is never edited). */
int sweep_loglik_cell(run_ctx *r, const example_state *s, const kvp_splice *sp, int W, double *cand_lp, int *pick) {
    int n = s->prompt.n;
    double lp[KVP_LOGLIK_MAX_TOKENS];
    for (int c = 0; c < r->n_cand; c++) {
        cand_lp[c] = s->clean_lp[c];
        if (W >= r->n_cont[c]) continue;
        kvp_kv *kv = kvp_kv_clone(s->cont_kv[c], r->err);
        int rc = !kv || kvp_kv_truncate(kv, n - 1 + W, r->err) || kvp_splice_apply(kv, sp, r->err) ||
                 force_continuation(r, s, kv, c, W, lp);
        kvp_kv_free(kv);
        if (rc) return r->err->code ? r->err->code : KVP_E_NOMEM;
        cand_lp[c] = 0;
        for (int j = 0; j < r->n_cont[c]; j++) cand_lp[c] += j < W ? s->cont_lp[c][j] : lp[j];
    }
    *pick = best_candidate(r, cand_lp);
    return 0;
}
