/* What each example feeds the model: the instruct prompt (chat template, few-shot turns), the
 * cloze prompt of base models, the OTHER donor, and --prompts-only. */
#include "sweep_impl.h"

/* The cloze prompt: optional system text, each demonstration's cloze text followed by " " and
 * its gold candidate, then the example's cloze text. Frames are scaffolding. */
static int cloze_prompt(run_ctx *r, const kvp_example *ex, kvp_prompt *p) {
    int nd = r->ds.n_demos, n = 0;
    kvp_piece *pc = calloc((size_t)((nd + 1) * (KVP_CLOZE_PARTS + 3) + 2), sizeof *pc);
    if (!pc) return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    if (r->o->system) pc[n++] = (kvp_piece){r->o->system, KVP_SEG_SYSTEM}, pc[n++] = (kvp_piece){"\n\n", KVP_SEG_SCAFFOLD};
    for (int i = 0; i <= nd; i++) {
        const kvp_example *e = i < nd ? &r->ds.demos[i] : ex;
        for (int k = 0; k < KVP_CLOZE_PARTS && e->cloze[k]; k++)
            pc[n++] = (kvp_piece){e->cloze[k], k & 1 ? KVP_SEG_USER : KVP_SEG_SCAFFOLD};
        if (i == nd) break;
        int g = e->kind == KVP_TASK_CHOICE ? e->answer[0] - 'A' : -1;
        const char *gold = g < 0 ? e->answer : g < e->n_choices ? e->choices[g] : NULL; /* NULL: refused by the pieces */
        pc[n++] = (kvp_piece){" ", KVP_SEG_ASSISTANT};
        pc[n++] = (kvp_piece){gold, KVP_SEG_ASSISTANT};
        pc[n++] = (kvp_piece){"\n\n", KVP_SEG_SCAFFOLD};
    }
    int rc = kvp_prompt_pieces(r->tok, pc, n, p, r->err);
    free(pc);
    return rc;
}

/* The prompt: optional system turn, the few-shot demonstrations as user/assistant turns, then
 * the example's user turn and the opening of the assistant's (its response prefix, if any).
 * Without a chat template, turns are separated by blank lines. */
int sweep_user_prompt(run_ctx *r, const kvp_example *ex, kvp_prompt *p) {
    if (r->o->format == KVP_FORMAT_CLOZE) return cloze_prompt(r, ex, p);
    int nd = r->ds.n_demos, n = 0, raw = r->tmpl.kind == KVP_TMPL_NONE, rc;
    kvp_message *msgs = calloc((size_t)(2 * nd + 2), sizeof *msgs);
    char **owned = calloc((size_t)(2 * nd + 1), sizeof *owned);
    int n_owned = 0;
    if (!msgs || !owned) {
        free(msgs);
        free(owned);
        return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    }
    if (r->o->system) msgs[n++] = (kvp_message){"system", r->o->system};
    for (int i = 0; i < nd; i++) {
        const kvp_example *d = &r->ds.demos[i];
        const char *q = d->prompt, *a = kvp_example_demo(d);
        if (raw) {
            size_t lq = strlen(q) + 2, la = strlen(a) + 3;
            char *qq = malloc(lq), *aa = malloc(la);
            if (qq) snprintf(qq, lq, "%s\n", q);
            if (aa) snprintf(aa, la, "%s\n\n", a);
            owned[n_owned++] = qq, owned[n_owned++] = aa;
            q = qq, a = aa;
            if (!q || !a) break;
        }
        msgs[n++] = (kvp_message){"user", q};
        msgs[n++] = (kvp_message){"assistant", a};
    }
    const char *last = ex->prompt;
    if (raw && nd) {
        size_t l = strlen(last) + 2;
        char *qq = malloc(l);
        if (qq) snprintf(qq, l, "%s\n", last);
        owned[n_owned++] = qq;
        last = qq;
    }
    msgs[n++] = (kvp_message){"user", last};
    int ok = 1;
    for (int i = 0; i < n; i++) ok &= msgs[i].content != NULL;
    rc = !ok                 ? kvp_fail(r->err, KVP_E_NOMEM, "out of memory")
         : ex->response_prefix ? kvp_chat_prompt_prefixed(r->tok, &r->tmpl, msgs, n, ex->response_prefix, p, r->err)
                               : kvp_chat_prompt(r->tok, &r->tmpl, msgs, n, 1, p, r->err);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(msgs);
    return rc;
}

/* The OTHER donor: this prompt with its user tokens replaced by another example's user
 * tokens, cycled to the same count, so every position lines up. */
int sweep_other_donor(run_ctx *r, const kvp_prompt *p, const kvp_example *other, kvp_prompt *d) {
    kvp_prompt op;
    if (sweep_user_prompt(r, other, &op)) return r->err->code;
    int n_user = 0;
    for (int i = 0; i < op.n; i++) n_user += op.seg[i] == KVP_SEG_USER;
    memset(d, 0, sizeof *d);
    d->ids = malloc((size_t)p->n * sizeof *d->ids);
    d->seg = malloc((size_t)p->n);
    if (!d->ids || !d->seg) {
        kvp_prompt_free(&op);
        kvp_prompt_free(d);
        return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    }
    int k = 0;
    for (int i = 0; i < p->n; i++) {
        d->seg[i] = p->seg[i];
        d->ids[i] = p->ids[i];
        if (p->seg[i] == KVP_SEG_USER && n_user) {
            while (op.seg[k % op.n] != KVP_SEG_USER) k++;
            d->ids[i] = op.ids[k % op.n];
            k++;
        }
    }
    d->n = p->n;
    kvp_prompt_free(&op);
    return 0;
}

int kvp_sweep_prompts(const kvp_sweep_opts *o, FILE *out, kvp_error *err) {
    run_ctx r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.err = err;
    if (!o->dataset || !o->model_path) return kvp_fail(err, KVP_E_INVALID, "prompts need a model and a dataset");
    int rc = sweep_setup(&r);
    static const char seg_letter[] = "syua";
    for (int i = 0; i < r.ds.n && !rc; i++) {
        const kvp_example *ex = &r.ds.ex[i];
        kvp_prompt p, d;
        memset(&d, 0, sizeof d);
        if ((rc = sweep_user_prompt(&r, ex, &p))) break;
        rc = kvp_prompt_blank(r.tok, &p, o->filler, KVP_FILLER_SAME_LENGTH, &d, NULL, err);
        char *segs = malloc((size_t)p.n + 1);
        cJSON *j = cJSON_CreateObject();
        if (!rc && segs && j) {
            cJSON_AddStringToObject(j, "example_id", ex->id);
            cJSON_AddStringToObject(j, "gold", ex->answer);
            cJSON_AddStringToObject(j, "text", p.text);
            cJSON *ids = cJSON_AddArrayToObject(j, "ids"), *bl = cJSON_AddArrayToObject(j, "blank_ids");
            for (int k = 0; k < p.n; k++) {
                cJSON_AddItemToArray(ids, cJSON_CreateNumber(p.ids[k]));
                cJSON_AddItemToArray(bl, cJSON_CreateNumber(d.ids[k]));
                segs[k] = seg_letter[p.seg[k] & 3];
            }
            segs[p.n] = 0;
            cJSON_AddStringToObject(j, "seg", segs);
            cJSON_AddNumberToObject(j, "max_new_tokens", r.max_new);
            cJSON *stop = cJSON_AddArrayToObject(j, "stop_ids");
            for (int t = 0; t < kvp_tokenizer_n_vocab(r.tok); t++)
                if (sweep_is_end(&r, t)) cJSON_AddItemToArray(stop, cJSON_CreateNumber(t));
            char *line = cJSON_PrintUnformatted(j);
            if (!line || fprintf(out, "%s\n", line) < 0) rc = kvp_fail(err, KVP_E_IO, "cannot write the prompts");
            free(line);
        } else if (!rc) {
            rc = kvp_fail(err, KVP_E_NOMEM, "out of memory");
        }
        cJSON_Delete(j);
        free(segs);
        kvp_prompt_free(&p);
        kvp_prompt_free(&d);
        if (rc) kvp_wrap(err, "example %s", ex->id);
    }
    sweep_free_run(&r);
    return rc;
}
