/* Examples in flight: which cells decode together.
 *
 * Every cell forks an example's finished clean run at its own W, so the cells of all W decode
 * as one batch (one forward pass per step for all of them), in waves when their caches would
 * not fit in the fork budget (fork_budget). Cells stop at different steps: most at their answer's end,
 * a few (token loops) only at the token limit, and a batch of those few reads every weight for
 * little work. So once fewer than an example's cells are left decoding, the next example is
 * prepared and its cells join the same forward passes (up to KVP_SWEEP_FLIGHTS examples in
 * flight): wider batches run the batch kernels nearer their best (0.5B HumanEval race grid, 6
 * examples, AMD Zen 4, 2 threads: 157 tok/s, where joining below half an example's cells with
 * 2 in flight gave 148). A cell's tokens and record do not depend on the rows beside it; only
 * the order of the records in results.jsonl interleaves between the examples in flight. */
#include "sweep_impl.h"

/* The fork caches decoding at once (of every example in flight) are capped at a third of the
 * machine's memory, within [1, 16] GiB; larger grids decode in waves of whole W groups. A fork
 * is counted as the whole clean cache it shares pages with, about what a cell that stops
 * near the clean run's length comes to own. The 1.5B model's HumanEval grid (133 cells of
 * 10-68 MB) fits one wave for 162 of 164 examples with 8 GiB, where 4 GiB split 41 of them
 * in two waves, each with its own tail of long cells. */
static size_t fork_budget(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t b = pages > 0 && page > 0 ? (size_t)pages / 3 * (size_t)page : (size_t)4 << 30;
    const size_t lo = (size_t)1 << 30, hi = (size_t)16 << 30;
    return b < lo ? lo : b > hi ? hi : b;
}

typedef struct flight {
    int ei;
    example_state s;
    cell *cells; /* the current wave */
    int n_cells;
    int w;       /* the next W group (index into r->steps) to fork */
    size_t fork_bytes; /* what one fork of the clean cache is counted for */
} flight;

static void flight_free(flight *f) {
    for (int i = 0; i < f->n_cells; i++) sweep_free_cell(&f->cells[i]);
    free(f->cells);
    sweep_free_state(&f->s);
    memset(f, 0, sizeof *f);
}

/* An edited cell: the clean cache forked at step W, spliced. */
static int fork_cell(run_ctx *r, flight *f, const kvp_splice *sp, int L, int W, double t0, cell *ce) {
    const example_state *s = &f->s;
    int n = s->prompt.n;
    ce->cond = sp->cond;
    ce->policy = -1;
    ce->L = L;
    ce->W = W;
    ce->t0 = t0;
    ce->applied = 1;
    if (sweep_cell_buffers(r, &r->ds.ex[f->ei], s, W, ce) || !(ce->kv = kvp_kv_clone(s->clean, r->err)) ||
        kvp_kv_truncate(ce->kv, n - 1 + W, r->err))
        return r->err->code;
    memcpy(ce->tok, s->clean_tok, (size_t)W * sizeof *ce->tok); /* tokens before W are clean */
    memcpy(ce->margin, s->clean_margin, (size_t)W * sizeof *ce->margin);
    ce->n_tok = W;
    int rc = kvp_splice_apply(ce->kv, sp, r->err);
    ce->prompt_own = sweep_prompt_kv_own(ce->kv, sp, n);
    ce->readout = W == 0 ? -1 : s->clean_readout; /* first-token: set at step 0 if W = 0 */
    if (!rc && sweep_is_loglik(r->o->readout)) rc = sweep_loglik_cell(r, s, sp, W, ce->cand_lp, &ce->readout);
    return rc;
}

/* Edited cell (condition c, layer l, step W) has no record yet. */
static int cell_pending(run_ctx *r, const kvp_example *ex, int c, int l, int W) {
    return r->conds[c] != KVP_COND_CLEAN && !sweep_is_done(r, ex->id, kvp_condition_name(r->conds[c]), r->layers[l], W);
}

/* Policy i's cell has no record yet (it joins the first W group's wave). */
static int policy_pending(run_ctx *r, const kvp_example *ex, int i, int w) {
    int L, W;
    sweep_policy_cell_at(r, i, &L, &W);
    return w == 0 && !sweep_is_done(r, ex->id, r->policy_name[i], L, W);
}

/* The next wave of the example's cells: the W groups from f->w on that fit in budget bytes of
 * forks together (at least one). Edits past the end of the clean run are recorded at once as
 * not applied (the clean continuation). f->n_cells = 0: no cell left to decode. */
static int next_wave(run_ctx *r, flight *f, size_t budget) {
    const kvp_example *ex = &r->ds.ex[f->ei];
    const example_state *s = &f->s;
    const int loglik = sweep_is_loglik(r->o->readout);
    int rc = 0, n = s->prompt.n;
    for (int i = 0; i < f->n_cells; i++) sweep_free_cell(&f->cells[i]);
    memset(f->cells, 0, (size_t)f->n_cells * sizeof *f->cells);
    f->n_cells = 0;
    size_t fork_bytes = f->fork_bytes, wave_bytes = 0;
    double tw = sweep_now_s();
    for (; f->w < r->n_steps && !rc; f->w++) {
        int w = f->w, W = r->steps[w], group = 0;
        for (int c = 0; c < r->n_conds; c++) /* the group's forks (past the clean run: none) */
            for (int l = 0; l < r->n_layers; l++) group += cell_pending(r, ex, c, l, W) && W < s->clean_steps;
        for (int i = 0; i < r->n_policies; i++) group += policy_pending(r, ex, i, w);
        if (f->n_cells && wave_bytes + (size_t)group * fork_bytes > budget) break;
        for (int i = 0; i < r->n_policies && !rc; i++) {
            if (!policy_pending(r, ex, i, w)) continue;
            const kvp_kv_policy *p = &r->o->policies[i];
            if (kvp_kv_policy_is_edit(p) && p->step >= s->clean_steps) { /* as an edited cell past the clean run */
                outcome o = sweep_clean_outcome(r, s, r->policy_name[i], p->layer_from, p->step);
                rc = sweep_write_record(r, ex, &o);
                continue;
            }
            cell *ce = &f->cells[f->n_cells++];
            if (kvp_kv_policy_is_edit(p)) { /* the clean run's fork, spliced from the example's own donor */
                kvp_splice sp = kvp_kv_policy_splice(p, &s->prompt, s->donor_blank);
                rc = fork_cell(r, f, &sp, p->layer_from, p->step, tw, ce);
                ce->policy = i;
            } else {
                rc = sweep_policy_cell(r, s, ex, i, ce);
                ce->t0 = tw;
            }
            wave_bytes += fork_bytes;
        }
        for (int c = 0; c < r->n_conds && !rc; c++) {
            const char *cn = kvp_condition_name(r->conds[c]);
            for (int l = 0; l < r->n_layers && !rc; l++) {
                if (!cell_pending(r, ex, c, l, W)) continue;
                kvp_splice sp = {.cond = r->conds[c], .layer_from = r->layers[l], .span = r->o->span, .n_prompt = n,
                                 .seg = s->prompt.seg, .seed = r->o->seed ^ (uint64_t)f->ei * 0x9E3779B97F4A7C15ull,
                                 .donor = r->conds[c] == KVP_COND_OTHER ? s->donor_other : s->donor_blank};
                if (W >= s->clean_steps) { /* the clean run ended before step W: nothing to edit */
                    outcome o = sweep_clean_outcome(r, s, cn, r->layers[l], W);
                    double lp[KVP_MAX_CAND];
                    if (loglik && (rc = sweep_loglik_cell(r, s, &sp, W, lp, &o.readout))) break;
                    if (loglik) o.cand_lp = lp;
                    rc = sweep_write_record(r, ex, &o);
                    continue;
                }
                rc = fork_cell(r, f, &sp, r->layers[l], W, tw, &f->cells[f->n_cells++]);
                wave_bytes += fork_bytes;
            }
        }
    }
    return rc;
}

/* Prepare example ei, decode its clean run, write its clean record and fork its first wave. */
static int start(run_ctx *r, int ei, flight *f, size_t budget) {
    memset(f, 0, sizeof *f);
    f->ei = ei;
    int max_cells = r->cells_per_example;
    if (!(f->cells = calloc((size_t)(max_cells ? max_cells : 1), sizeof *f->cells)))
        return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    int rc = sweep_prepare(r, ei, &f->s);
    if (!rc) rc = sweep_clean_decode(r, &r->ds.ex[ei], &f->s, sweep_max_step(r) + r->kl_steps);
    if (!rc) rc = sweep_begin_example(r, ei, &f->s);
    if (!rc) f->fork_bytes = kvp_kv_bytes(f->s.clean), rc = next_wave(r, f, budget);
    return rc;
}

/* An example with nothing left to decode: its scores forgotten, its state freed. */
static void retire(run_ctx *r, flight *f, int *finished) {
    sweep_forget_scores(r, &r->ds.ex[f->ei]);
    flight_free(f);
    sweep_progress(r, ++*finished, 0);
}

static int n_decoding(const flight *f) {
    int k = 0;
    for (int i = 0; i < f->n_cells; i++) k += !f->cells[i].done;
    return k;
}

/* The fork budget left beside the flights other than skip (a finished cell's fork is freed). */
static size_t budget_left(size_t budget, const flight *fl, int nf, const flight *skip) {
    size_t live = 0;
    for (int k = 0; k < nf; k++)
        if (&fl[k] != skip) live += (size_t)n_decoding(&fl[k]) * fl[k].fork_bytes;
    return live < budget ? budget - live : 0;
}

int sweep_run_examples(run_ctx *r) {
    flight fl[KVP_SWEEP_FLIGHTS];
    cell_group g[KVP_SWEEP_FLIGHTS];
    int nf = 0, next = 0, finished = 0, rc = 0;
    const size_t budget = fork_budget();
    while (!rc) {
        int decoding = 0;
        for (int k = 0; k < nf; k++) decoding += n_decoding(&fl[k]);
        /* the next example joins once fewer than an example's cells are decoding, and their
         * forks leave it half of the budget */
        while (!rc && next < r->ds.n && nf < r->flights &&
               (nf == 0 || (decoding < r->cells_per_example && 2 * budget_left(budget, fl, nf, NULL) >= budget))) {
            int ei = next++;
            if (!sweep_has_work(r, ei)) {
                sweep_progress(r, ++finished, 0);
                continue;
            }
            flight *f = &fl[nf];
            if ((rc = start(r, ei, f, budget_left(budget, fl, nf, NULL)))) {
                kvp_wrap(r->err, "example %s", r->ds.ex[ei].id);
                flight_free(f);
                break;
            }
            if (!f->n_cells) { /* every record written already */
                retire(r, f, &finished);
                continue;
            }
            decoding += n_decoding(f);
            nf++;
        }
        if (rc || !nf) break;
        for (int k = 0; k < nf; k++) g[k] = (cell_group){&fl[k].s, &r->ds.ex[fl[k].ei], fl[k].cells, fl[k].n_cells};
        if ((rc = sweep_decode_step(r, g, nf))) break; /* (it names the example) */
        for (int k = 0; k < nf && !rc;) { /* a finished wave: the example's next, or its end */
            flight *f = &fl[k];
            if (n_decoding(f)) {
                k++;
                continue;
            }
            if ((rc = next_wave(r, f, budget_left(budget, fl, nf, f)))) {
                kvp_wrap(r->err, "example %s", r->ds.ex[f->ei].id);
                break;
            }
            sweep_progress(r, finished, 0);
            if (f->n_cells) {
                k++;
                continue;
            }
            retire(r, f, &finished);
            memmove(&fl[k], &fl[k + 1], (size_t)(nf - k - 1) * sizeof *fl);
            nf--;
        }
    }
    for (int k = 0; k < nf; k++) flight_free(&fl[k]);
    return rc;
}
