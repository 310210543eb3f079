/* Records: each cell scored (once per distinct output) and written to results.jsonl as one
 * JSON line; the progress line. */
#include "sweep_impl.h"

void sweep_forget_scores(run_ctx *r, const kvp_example *ex) {
    int k = 0;
    for (int i = 0; i < r->n_scored; i++) {
        if (!ex || r->scored[i].ex == ex) free(r->scored[i].text);
        else r->scored[k++] = r->scored[i];
    }
    r->n_scored = k;
}

/* kvp_score, once per distinct output text of an example (the same text scores the same). */
static int score_cached(run_ctx *r, const kvp_example *ex, const char *text, kvp_score_result *sc) {
    for (int i = 0; i < r->n_scored; i++)
        if (r->scored[i].ex == ex && !strcmp(r->scored[i].text, text)) {
            *sc = r->scored[i].res;
            return 0;
        }
    int rc = kvp_score(ex, text, NULL, sc, r->err);
    if (rc) return rc;
    if (r->n_scored == r->cap_scored) {
        int cap = r->cap_scored ? 2 * r->cap_scored : 64;
        struct scored *p = realloc(r->scored, (size_t)cap * sizeof *p);
        if (!p) return 0; /* not remembering it costs time only */
        r->scored = p;
        r->cap_scored = cap;
    }
    char *copy = strdup(text);
    if (copy) r->scored[r->n_scored++] = (struct scored){ex, copy, *sc};
    return 0;
}

static const char *stop_name(stop_reason s) {
    return s == STOP_EOG ? "eog" : s == STOP_SEQUENCE ? "stop_sequence" : "max_tokens";
}

/* A generation cut by the token limit that ends repeating itself: its last LOOP_SPAN tokens
 * equal the tokens p earlier, for a period p of at most LOOP_SPAN / 2 (the study's "token
 * loops under ZERO"). */
#define LOOP_SPAN 64
static int looped(const outcome *o) {
    if (o->stop != STOP_MAX_TOKENS || o->n_tok < 2 * LOOP_SPAN) return 0;
    const int32_t *t = o->tok + o->n_tok - LOOP_SPAN;
    for (int p = 1; p <= LOOP_SPAN / 2; p++) {
        int k = 0;
        while (k < LOOP_SPAN && t[k] == t[k - p]) k++;
        if (k == LOOP_SPAN) return 1;
    }
    return 0;
}

int sweep_write_record(run_ctx *r, const kvp_example *ex, const outcome *o) {
    char *text = NULL;
    size_t tlen;
    const int32_t *tok = o->tok;
    int n_tok = o->n_tok, ro = o->readout, eog = o->stop == STOP_EOG;
    if (kvp_detokenize(r->tok, tok, n_tok, 0, &text, &tlen)) return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    /* A generation cut at the token limit can end inside a UTF-8 sequence (and byte tokens can
     * form invalid ones): replace those like HF's decode does, so records stay valid JSON. */
    char *clean;
    size_t clen;
    int n_bad;
    if (kvp_utf8_clean(text, tlen, &clean, &clen, &n_bad)) {
        free(text);
        return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    }
    free(text);
    text = clean;
    kvp_score_result sc;
    int rc = score_cached(r, ex, text, &sc);
    if (rc) {
        free(text);
        return rc;
    }
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "dataset", r->ds.name);
    cJSON_AddStringToObject(j, "example_id", ex->id);
    cJSON_AddStringToObject(j, "condition", o->cond);
    cJSON_AddNumberToObject(j, "L", o->L);
    cJSON_AddNumberToObject(j, "W", o->W);
    cJSON_AddStringToObject(j, "span", kvp_span_name(r->o->span));
    cJSON_AddBoolToObject(j, "edit_applied", o->applied);
    if (o->kv_bytes) { /* what the cell's cache referenced at its end (pages shared with others included) */
        cJSON_AddNumberToObject(j, "kv_bytes", (double)o->kv_bytes);
        cJSON_AddNumberToObject(j, "kv_entries", (double)o->kv_entries);
    }
    /* the share of the prompt's K/V this sequence holds of its own after the edit (the x of the
     * KV-policy race; a donor's entries are shared, sweep_prompt_kv_own) */
    cJSON_AddNumberToObject(j, "prompt_kv_own", round(o->prompt_own * 1e6) / 1e6);
    cJSON_AddStringToObject(j, "text", text);
    cJSON *ids = cJSON_AddArrayToObject(j, "tokens");
    for (int i = 0; i < n_tok; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(tok[i]));
    cJSON_AddStringToObject(j, "extracted", sc.extracted);
    cJSON_AddStringToObject(j, "gold", ex->answer);
    if (r->o->readout) { /* the score is the read-out's; the text's is kept beside it */
        const char *pick = ro >= 0 ? r->cand[ro] : "";
        cJSON_AddStringToObject(j, "readout", pick);
        if (o->cand_lp) {
            cJSON *lp = cJSON_AddObjectToObject(j, "logprobs");
            for (int c = 0; c < r->n_cand; c++) cJSON_AddNumberToObject(lp, r->cand[c], round(o->cand_lp[c] * 1e4) / 1e4);
        }
        cJSON_AddNumberToObject(j, "text_score", sc.score);
        sc.score = ro >= 0 && !strcasecmp(pick, ex->answer);
    }
    cJSON_AddNumberToObject(j, "score", sc.score);
    cJSON_AddStringToObject(j, "error_class", sc.error);
    if (sc.exception[0]) cJSON_AddStringToObject(j, "exception", sc.exception);
    cJSON_AddNumberToObject(j, "decode_steps", n_tok + (eog ? 1 : 0));
    cJSON_AddBoolToObject(j, "stopped_at_eog", eog);
    cJSON_AddStringToObject(j, "stop_reason", stop_name(o->stop));
    cJSON_AddBoolToObject(j, "looped", looped(o));
    cJSON_AddNumberToObject(j, "prompt_tokens", o->n_prompt);
    if (o->kl_n > 0) cJSON_AddNumberToObject(j, "kl_mean", o->kl / o->kl_n);
    else cJSON_AddNullToObject(j, "kl_mean");
    cJSON_AddNumberToObject(j, "kl_steps", o->kl_n);
    cJSON_AddNumberToObject(j, "agreement", o->agreement);
    cJSON_AddNumberToObject(j, "first_divergence", o->first_div);
    if (o->margin) {
        cJSON *m = cJSON_AddArrayToObject(j, "margins");
        for (int i = 0; i < n_tok + eog; i++) cJSON_AddItemToArray(m, cJSON_CreateNumber(round(o->margin[i] * 1e4) / 1e4));
    }
    cJSON_AddStringToObject(j, "model_sha256", r->model_sha);
    cJSON_AddStringToObject(j, "kvprobe_version", KVPROBE_VERSION);
    cJSON_AddStringToObject(j, "activations", kvp_precision_name(r->prec));
    cJSON *t = cJSON_AddObjectToObject(j, "timing");
    cJSON_AddNumberToObject(t, "seconds", round(o->seconds * 1e4) / 1e4);
    char *line = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    free(text);
    if (!line) return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    int bad = fprintf(r->out, "%s\n", line) < 0 || fflush(r->out) != 0;
    free(line);
    if (bad) return kvp_fail(r->err, KVP_E_IO, "results.jsonl: write failed: %s", strerror(errno));
    char key[512];
    sweep_cell_key(key, sizeof key, ex->id, o->cond, o->L, o->W);
    sweep_mark_done(r, key);
    r->cells_finished++;
    r->cells_this_run++;
    return 0;
}

void sweep_progress(run_ctx *r, int ex_done, int force) {
    if (r->o->quiet) return;
    double t = sweep_now_s();
    if (!force && t - r->t_last_progress < (isatty(2) ? 0.5 : 10.0)) return;
    r->t_last_progress = t;
    double el = t - r->t_start, rate = r->cells_this_run / (el > 0 ? el : 1);
    long left = r->cells_total - r->cells_finished;
    double eta = rate > 0 ? left / rate : 0;
    fprintf(stderr, "%s[sweep] examples %d/%d, cells %ld/%ld, %.2f cells/s, ETA %dm%02ds%s", isatty(2) ? "\r" : "",
            ex_done, r->ds.n, r->cells_finished, r->cells_total, rate, (int)(eta / 60), (int)eta % 60,
            isatty(2) && !force ? "   " : "\n");
    fflush(stderr);
}
