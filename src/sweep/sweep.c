/* The splice sweep runner (include/kvprobe/sweep.h).
 *
 * Data flow per example: prompt -> tokens (chat template, labels) -> clean prefill -> clean
 * greedy decode (tokens, logits) -> per W: fork the clean cache at step W -> splice every
 * (condition, L) cell -> decode the cells as one batch, beside those of the example before
 * (schedule.c) -> score -> records. */
#include "sweep_impl.h"

/* Clean baselines decode this many examples side by side. */
#define KVP_CLEAN_GROUP 32

double sweep_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void sweep_free_state(example_state *s) {
    kvp_prompt_free(&s->prompt);
    kvp_prompt_free(&s->blank);
    kvp_prompt_free(&s->other);
    kvp_kv_free(s->base);
    kvp_kv_free(s->donor_blank);
    kvp_kv_free(s->donor_other);
    kvp_kv_free(s->clean);
    free(s->clean_tok);
    free(s->clean_margin);
    free(s->clean_logits);
    for (int c = 0; c < KVP_MAX_CAND; c++) kvp_kv_free(s->cont_kv[c]), free(s->cont_lp[c]);
}

void sweep_free_cell(cell *c) {
    kvp_kv_free(c->kv);
    free(c->tok);
    free(c->margin);
    free(c->text.p);
    free(c->logits);
}

int sweep_max_step(const run_ctx *r) {
    int m = 0;
    for (int i = 0; i < r->n_steps; i++) m = r->steps[i] > m ? r->steps[i] : m;
    return m;
}

int sweep_has_work(const run_ctx *r, int ei) {
    const char *id = r->ds.ex[ei].id;
    int todo = !sweep_is_done(r, id, kvp_condition_name(KVP_COND_CLEAN), r->hp->n_layer, 0);
    for (int w = 0; w < r->n_steps; w++)
        for (int c = 0; c < r->n_conds; c++)
            for (int l = 0; l < r->n_layers; l++)
                if (r->conds[c] != KVP_COND_CLEAN)
                    todo |= !sweep_is_done(r, id, kvp_condition_name(r->conds[c]), r->layers[l], r->steps[w]);
    for (int i = 0; i < r->n_policies; i++) {
        int L, W;
        sweep_policy_cell_at(r, i, &L, &W);
        todo |= !sweep_is_done(r, id, r->policy_name[i], L, W);
    }
    return todo;
}

/* The prompt without its last token (that token is decode step 0) is prefilled. */
int sweep_prepare(run_ctx *r, int ei, example_state *s) {
    const kvp_example *ex = &r->ds.ex[ei];
    memset(s, 0, sizeof *s);
    s->t0 = sweep_now_s();
    if (sweep_user_prompt(r, ex, &s->prompt)) return r->err->code;
    int n = s->prompt.n, n_gen = r->max_new;
    if (sweep_is_loglik(r->o->readout) && n_gen < KVP_LOGLIK_MAX_TOKENS) n_gen = KVP_LOGLIK_MAX_TOKENS;
    int n_ctx = n + n_gen + 1;
    if (n < 2) return kvp_fail(r->err, KVP_E_INVALID, "the prompt has fewer than 2 tokens");
    if (n_ctx > r->hp->n_ctx_train && r->hp->n_ctx_train > 0)
        return kvp_fail(r->err, KVP_E_INVALID, "prompt (%d) + max new tokens exceeds the context (%d)", n, r->hp->n_ctx_train);
    int need_blank = 0, need_other = 0;
    for (int c = 0; c < r->n_conds; c++) {
        need_blank |= r->conds[c] == KVP_COND_BLANK;
        need_other |= r->conds[c] == KVP_COND_OTHER;
    }
    for (int i = 0; i < r->n_policies; i++) need_blank |= r->o->policies[i].kind == KVP_POLICY_SCAFFOLD;
    if (!(s->base = sweep_prefill(r, s->prompt.ids, n - 1, n_ctx))) return r->err->code;
    if (need_blank && (kvp_prompt_blank(r->tok, &s->prompt, r->o->filler, KVP_FILLER_SAME_LENGTH, &s->blank, NULL, r->err) ||
                       !(s->donor_blank = sweep_prefill(r, s->blank.ids, n - 1, n_ctx))))
        return r->err->code;
    if (need_other && (sweep_other_donor(r, &s->prompt, &r->ds.ex[(ei + 1) % r->ds.n], &s->other) ||
                       !(s->donor_other = sweep_prefill(r, s->other.ids, n - 1, n_ctx))))
        return r->err->code;
    return 0;
}

int sweep_begin_example(run_ctx *r, int ei, example_state *s) {
    const kvp_example *ex = &r->ds.ex[ei];
    const char *clean_name = kvp_condition_name(KVP_COND_CLEAN);
    if (r->o->readout && sweep_readout_candidates(r, ex)) return r->err->code ? r->err->code : KVP_E_NOMEM;
    if (sweep_is_loglik(r->o->readout) ? sweep_loglik_clean(r, s) : (s->clean_readout = sweep_readout(r, s->clean_logits), 0))
        return r->err->code ? r->err->code : KVP_E_NOMEM;
    outcome clean = sweep_clean_outcome(r, s, clean_name, r->hp->n_layer, 0);
    clean.seconds = sweep_now_s() - s->t0;
    if (sweep_is_done(r, ex->id, clean_name, r->hp->n_layer, 0)) return 0;
    return sweep_write_record(r, ex, &clean);
}

/* A grid without edited cells (a clean baseline): up to the batch size of examples decode side
 * by side, one forward pass per step for all of them (the same records as one at a time). */
static int run_clean_group(run_ctx *r, int e0, int e1) {
    int n = 0, rc = 0, idx[KVP_CLEAN_GROUP];
    example_state st[KVP_CLEAN_GROUP], *sp[KVP_CLEAN_GROUP];
    const kvp_example *exs[KVP_CLEAN_GROUP];
    for (int ei = e0; ei < e1 && !rc; ei++) {
        if (!sweep_has_work(r, ei)) continue;
        idx[n] = ei, sp[n] = &st[n], exs[n] = &r->ds.ex[ei];
        rc = sweep_prepare(r, ei, &st[n++]);
        if (rc) kvp_wrap(r->err, "example %s", r->ds.ex[ei].id);
    }
    if (!rc && n) rc = sweep_clean_decode_group(r, exs, sp, n, 0);
    for (int i = 0; i < n && !rc; i++)
        if ((rc = sweep_begin_example(r, idx[i], &st[i]))) kvp_wrap(r->err, "example %s", r->ds.ex[idx[i]].id);
    for (int i = 0; i < n; i++) sweep_free_state(&st[i]), sweep_forget_scores(r, &r->ds.ex[idx[i]]);
    return rc;
}

int kvp_sweep_run(const kvp_sweep_opts *o, kvp_error *err) {
    run_ctx r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.err = err;
    if (!o->out_dir || !o->dataset || !o->model_path)
        return kvp_fail(err, KVP_E_INVALID, "sweep needs a model, a dataset and an output directory");
    int rc = sweep_setup(&r);
    char path[4096];
    if (!rc && mkdir(o->out_dir, 0755) != 0 && errno != EEXIST)
        rc = kvp_fail(err, KVP_E_IO, "%s: cannot create: %s", o->out_dir, strerror(errno));
    if (!rc && strmap_init(&r.done, 1024)) rc = kvp_fail(err, KVP_E_NOMEM, "out of memory");
    if (!rc) rc = sweep_check_config(&r, o->out_dir);
    snprintf(path, sizeof path, "%s/results.jsonl", o->out_dir);
    if (!rc) rc = sweep_load_done(&r, path);
    if (!rc && !(r.out = fopen(path, "ab"))) rc = kvp_fail(err, KVP_E_IO, "%s: %s", path, strerror(errno));
    if (!rc) {
        r.cells_finished = r.n_done;
        r.t_start = r.t_last_progress = sweep_now_s();
        int cells = 0, group = kvp_ctx_max_batch(r.ctx) < KVP_CLEAN_GROUP ? kvp_ctx_max_batch(r.ctx) : KVP_CLEAN_GROUP;
        for (int c = 0; c < r.n_conds; c++) cells += r.conds[c] != KVP_COND_CLEAN;
        if (!o->quiet) {
            char grid[96] = "clean only";
            if (cells) snprintf(grid, sizeof grid, "%d edited conditions x %d layer cutoffs x %d steps", cells, r.n_layers, r.n_steps);
            fprintf(stderr, "[sweep] %s on %s: %d examples, %s, %d policy cells; %ld of %ld cells done\n", o->model_path,
                    r.ds.name, r.ds.n, grid, r.n_policies, r.cells_finished, r.cells_total);
        }
        cells += r.n_policies;
        if (cells || o->unbatched || sweep_is_loglik(o->readout)) group = 1;
        if (group == 1) rc = sweep_run_examples(&r);
        for (int i = 0; group > 1 && i < r.ds.n && !rc; i += group) {
            rc = run_clean_group(&r, i, i + group < r.ds.n ? i + group : r.ds.n);
            sweep_progress(&r, i + group < r.ds.n ? i + group : r.ds.n, 0);
        }
        sweep_progress(&r, r.ds.n, 1);
    }
    if (r.out && fclose(r.out) != 0 && !rc) rc = kvp_fail(err, KVP_E_IO, "%s: close failed", path);
    if (!rc && !o->no_report) rc = kvp_sweep_report(o->out_dir, err);
    sweep_free_run(&r);
    return rc;
}
