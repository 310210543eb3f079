/* The sweep's plan: model, tokenizer, template, dataset, the condition x L x W grid with its
 * defaults, and the execution context. */
#include "sweep_impl.h"

/* The model file's sha256, read from the file: the mapping's weight pages were released after
 * the engine repacked them (kvp_model_load), and reading them there would map them again. */
static int sha256_file(const char *path, char out[65], kvp_error *err) {
    FILE *f = fopen(path, "rb");
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned char buf[1 << 16], digest[32];
    unsigned int len = 0;
    int ok = f && md && EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, f)) > 0) ok = EVP_DigestUpdate(md, buf, n);
    ok = ok && !ferror(f) && EVP_DigestFinal_ex(md, digest, &len);
    if (f) fclose(f);
    EVP_MD_CTX_free(md);
    if (!ok) return kvp_fail(err, KVP_E_IO, "%s: cannot read the model to hash it", path);
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", digest[i]);
    return 0;
}

int sweep_setup(run_ctx *r) {
    const kvp_sweep_opts *o = r->o;
    kvp_error *err = r->err;
    if (!(r->m = kvp_model_load(o->model_path, err))) return err->code;
    r->hp = kvp_model_hparams(r->m);
    const gguf_file *g = kvp_model_gguf(r->m);
    if (!(r->tok = kvp_tokenizer_load(g, err))) return err->code;
    if (kvp_template_detect(g, &r->tmpl, err) && !o->template_name) return err->code;
    if (o->template_name && kvp_template_select(&r->tmpl, o->template_name, err)) return err->code;
    r->tmpl.enable_thinking = o->thinking;
    if (o->shots < 0) return kvp_fail(err, KVP_E_INVALID, "--shots must be >= 0");
    if (kvp_dataset_load_shots(o->dataset, o->data_dir, o->skip_bad_rows, o->shots, &r->ds, err)) return err->code;
    if (r->ds.n_skipped && !o->quiet) fprintf(stderr, "[sweep] skipped %d malformed rows\n", r->ds.n_skipped);
    r->max_new = o->max_new_tokens > 0 ? o->max_new_tokens : r->ds.max_new_tokens;
    if (o->readout)
        for (int i = 0; i < r->ds.n; i++)
            if (r->ds.ex[i].kind != KVP_TASK_LABEL && r->ds.ex[i].kind != KVP_TASK_CHOICE)
                return kvp_fail(err, KVP_E_INVALID, "--readout %s needs a label or multiple-choice dataset (%s is not)",
                                sweep_readout_name(o->readout), r->ds.ex[i].id);
    if (o->format == KVP_FORMAT_CLOZE) {
        if (!sweep_is_loglik(o->readout))
            return kvp_fail(err, KVP_E_INVALID, "--format cloze is read out by log-likelihood: add --readout loglik or loglik-norm");
        if (r->tmpl.kind != KVP_TMPL_NONE && o->template_name)
            return kvp_fail(err, KVP_E_INVALID, "--format cloze renders raw text: it takes no chat template (--template %s)",
                            o->template_name);
        r->tmpl.kind = KVP_TMPL_NONE;
        for (int i = 0; i < r->ds.n + r->ds.n_demos; i++) {
            const kvp_example *e = i < r->ds.n ? &r->ds.ex[i] : &r->ds.demos[i - r->ds.n];
            if (!e->cloze[0])
                return kvp_fail(err, KVP_E_INVALID, "--format cloze: %s has no cloze form (arc-easy, arc-challenge, sst2, "
                                "boolq and multiple-choice .jsonl rows have one)", e->id);
        }
    }
    r->kl_steps = o->kl_steps > 0 ? o->kl_steps : 8;
    if (o->n_conds) {
        memcpy(r->conds, o->conds, (size_t)o->n_conds * sizeof *r->conds);
        r->n_conds = o->n_conds;
    } else {
        kvp_condition def[] = {KVP_COND_CLEAN, KVP_COND_BLANK, KVP_COND_ZERO};
        memcpy(r->conds, def, sizeof def);
        r->n_conds = 3;
    }
    int NL = r->hp->n_layer;
    if (o->n_layers) {
        for (int i = 0; i < o->n_layers; i++) {
            if (o->layers[i] < 0 || o->layers[i] > NL)
                return kvp_fail(err, KVP_E_INVALID, "--layers: %d is outside 0..%d", o->layers[i], NL);
            r->layers[i] = o->layers[i];
        }
        r->n_layers = o->n_layers;
    } else { /* about 8 cutoffs evenly spaced from 0 to n_layer-1 */
        for (int i = 0; i < 8; i++) {
            int L = (int)lround(i * (NL - 1) / 7.0);
            if (!r->n_layers || r->layers[r->n_layers - 1] != L) r->layers[r->n_layers++] = L;
        }
    }
    if (o->n_steps) {
        for (int i = 0; i < o->n_steps; i++) {
            if (o->steps[i] < 0) return kvp_fail(err, KVP_E_INVALID, "--steps: %d is negative", o->steps[i]);
            r->steps[i] = o->steps[i];
        }
        r->n_steps = o->n_steps;
    } else {
        int def[] = {0, 1, 2, 4, 8, 16, 32};
        memcpy(r->steps, def, sizeof def);
        r->n_steps = 7;
    }
    int cells_per_w = 0;
    for (int c = 0; c < r->n_conds; c++) cells_per_w += r->conds[c] != KVP_COND_CLEAN ? r->n_layers : 0;
    for (int i = 0; i < o->n_policies; i++) {
        const kvp_kv_policy *p = &o->policies[i];
        if (p->kind == KVP_POLICY_FULL || (kvp_kv_policy_is_edit(p) && p->recent <= 0))
            return kvp_fail(err, KVP_E_INVALID,
                            "--kv-policy %s: in a sweep, full is the clean cell and scaffold:L,W / drop-content:L,W are the "
                            "cells of --conditions blank / drop-content at (L, W), the same K/V bit for bit; --kv-policy "
                            "takes streaming, h2o, snapkv, and scaffold / drop-content with a recent window (recent=N)",
                            kvp_policy_name(p->kind));
        if (sweep_is_loglik(o->readout))
            return kvp_fail(err, KVP_E_INVALID, "--kv-policy: not with the loglik read-outs (the policies are cells of their own)");
        kvp_kv_policy_format(p, r->policy_name[i], sizeof r->policy_name[i]);
        for (int j = 0; j < i; j++)
            if (!strcmp(r->policy_name[i], r->policy_name[j]))
                return kvp_fail(err, KVP_E_INVALID, "--kv-policy %s given twice", r->policy_name[i]);
    }
    r->n_policies = o->n_policies;
    r->cells_per_example = cells_per_w * r->n_steps + r->n_policies;
    /* Cells of several examples decode together (schedule.c), except where the run keeps
     * per-example read-out state (candidates) or decodes cell by cell. An example joins only
     * while fewer than one example's cells decode, so fewer than two examples' cells ever do. */
    r->flights = o->readout == KVP_READOUT_TEXT && !o->unbatched ? KVP_SWEEP_FLIGHTS : 1;
    int batch = r->cells_per_example * (r->flights > 1 ? 2 : 1); /* all cells in flight decode together */
    r->prec = KVP_SWEEP_PRECISION;
    if (o->precision && kvp_precision_from_name(o->precision, &r->prec))
        return kvp_fail(err, KVP_E_INVALID, "unknown precision '%s' (q8, q8x2, f32)", o->precision);
    kvp_ctx_params cp = {o->threads, batch > 64 ? batch : 64, r->prec, 0, NULL};
    if (!(r->ctx = kvp_ctx_new(r->m, &cp, err))) return err->code;
    if (sha256_file(o->model_path, r->model_sha, err)) return err->code;
    r->cells_total = (long)r->ds.n * (1 + (long)r->n_steps * cells_per_w + r->n_policies);
    return 0;
}

void sweep_free_run(run_ctx *r) {
    sweep_forget_scores(r, NULL);
    for (int c = 0; c < KVP_MAX_CAND; c++) free(r->cont[c]);
    free(r->scored);
    for (int i = 0; i < r->n_done; i++) free(r->done_keys[i]);
    free(r->done_keys);
    strmap_free(&r->done);
    kvp_ctx_free(r->ctx);
    kvp_dataset_free(&r->ds);
    kvp_tokenizer_free(r->tok);
    kvp_model_free(r->m);
}
