/* Resume: run.json pins the settings, results.jsonl's finished cells are skipped and a torn
 * last line (kill -9) is dropped. */
#include "sweep_impl.h"

void sweep_cell_key(char *buf, size_t cap, const char *id, const char *cond, int L, int W) {
    snprintf(buf, cap, "%s\t%s\t%d\t%d", id, cond, L, W);
}

int sweep_is_done(const run_ctx *r, const char *id, const char *cond, int L, int W) {
    char key[512];
    sweep_cell_key(key, sizeof key, id, cond, L, W);
    return strmap_get(&r->done, key, strlen(key)) >= 0;
}

int sweep_mark_done(run_ctx *r, const char *key) {
    if (r->n_done == r->cap_done) {
        int cap = r->cap_done ? 2 * r->cap_done : 1024;
        char **k = realloc(r->done_keys, (size_t)cap * sizeof *k);
        if (!k) return -1;
        r->done_keys = k;
        r->cap_done = cap;
    }
    char *copy = strdup(key);
    if (!copy) return -1;
    r->done_keys[r->n_done++] = copy;
    return strmap_put(&r->done, copy, strlen(copy), 1);
}

int sweep_load_done(run_ctx *r, const char *path) {
    FILE *f = fopen(path, "r+b");
    if (!f) return errno == ENOENT ? 0 : kvp_fail(r->err, KVP_E_IO, "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long good_end = 0;
    int lineno = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (line[len - 1] != '\n') break; /* torn write from an interrupted run */
        cJSON *j = cJSON_Parse(line);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "example_id"), *c = cJSON_GetObjectItemCaseSensitive(j, "condition");
        const cJSON *L = cJSON_GetObjectItemCaseSensitive(j, "L"), *W = cJSON_GetObjectItemCaseSensitive(j, "W");
        if (!cJSON_IsString(id) || !cJSON_IsString(c) || !cJSON_IsNumber(L) || !cJSON_IsNumber(W)) {
            cJSON_Delete(j);
            free(line);
            fclose(f);
            return kvp_fail(r->err, KVP_E_FORMAT, "%s:%d: not a kvprobe record", path, lineno);
        }
        char key[512];
        sweep_cell_key(key, sizeof key, id->valuestring, c->valuestring, L->valueint, W->valueint);
        if (sweep_mark_done(r, key)) {
            cJSON_Delete(j);
            free(line);
            fclose(f);
            return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
        }
        cJSON_Delete(j);
        good_end = ftell(f);
    }
    free(line);
    fseek(f, 0, SEEK_END);
    if (ftell(f) != good_end && ftruncate(fileno(f), good_end) != 0) {
        fclose(f);
        return kvp_fail(r->err, KVP_E_IO, "%s: cannot drop the torn last record", path);
    }
    fclose(f);
    return 0;
}

/* run.json pins the configuration: resuming with different settings is refused. */
int sweep_check_config(run_ctx *r, const char *dir) {
    const kvp_sweep_opts *o = r->o;
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "model_sha256", r->model_sha);
    cJSON_AddStringToObject(c, "dataset", o->dataset);
    cJSON *a = cJSON_AddArrayToObject(c, "conditions");
    for (int i = 0; i < r->n_conds; i++) cJSON_AddItemToArray(a, cJSON_CreateString(kvp_condition_name(r->conds[i])));
    cJSON *l = cJSON_AddArrayToObject(c, "layers");
    for (int i = 0; i < r->n_layers; i++) cJSON_AddItemToArray(l, cJSON_CreateNumber(r->layers[i]));
    cJSON *s = cJSON_AddArrayToObject(c, "steps");
    for (int i = 0; i < r->n_steps; i++) cJSON_AddItemToArray(s, cJSON_CreateNumber(r->steps[i]));
    if (r->n_policies) { /* absent otherwise, so runs from before policies resume */
        cJSON *p = cJSON_AddArrayToObject(c, "kv_policies");
        for (int i = 0; i < r->n_policies; i++) cJSON_AddItemToArray(p, cJSON_CreateString(r->policy_name[i]));
    }
    cJSON_AddNumberToObject(c, "max_new_tokens", r->max_new);
    cJSON_AddStringToObject(c, "span", kvp_span_name(o->span));
    cJSON_AddStringToObject(c, "filler", o->filler ? o->filler : KVP_DEFAULT_FILLER);
    cJSON_AddStringToObject(c, "system", o->system ? o->system : "");
    cJSON_AddStringToObject(c, "template", kvp_template_name(r->tmpl.kind));
    cJSON_AddBoolToObject(c, "thinking", o->thinking);
    cJSON_AddNumberToObject(c, "seed", (double)o->seed);
    cJSON_AddNumberToObject(c, "kl_steps", r->kl_steps);
    cJSON_AddStringToObject(c, "activations", kvp_precision_name(r->prec));
    if (o->shots) cJSON_AddNumberToObject(c, "shots", o->shots);
    if (o->readout) cJSON_AddStringToObject(c, "readout", sweep_readout_name(o->readout));
    if (o->format == KVP_FORMAT_CLOZE) cJSON_AddStringToObject(c, "format", "cloze");
    if (r->tmpl.kind == KVP_TMPL_NONE && kvp_raw_bos(r->tok)) cJSON_AddBoolToObject(c, "bos", 1);
    char *text = cJSON_Print(c);
    char path[4096];
    snprintf(path, sizeof path, "%s/run.json", dir);
    int rc = 0, old_max = 0;
    size_t n;
    char *old = kvp_read_file(path, &n);
    if (old && strcmp(old, text) != 0) {
        /* the same settings but a smaller token limit? (--extend continues such a run) */
        cJSON *oj = cJSON_Parse(old), *m = cJSON_GetObjectItemCaseSensitive(c, "max_new_tokens");
        const cJSON *om = cJSON_GetObjectItemCaseSensitive(oj, "max_new_tokens");
        if (cJSON_IsNumber(om) && om->valueint > 0 && om->valueint < r->max_new) {
            cJSON_SetNumberValue(m, om->valueint);
            char *as_old = cJSON_Print(c);
            if (as_old && !strcmp(as_old, old)) old_max = om->valueint;
            free(as_old);
        }
        cJSON_Delete(oj);
        if (!old_max || !o->extend)
            rc = kvp_fail(r->err, KVP_E_INVALID, "%s holds a sweep with different settings (see %s); use another --out directory%s",
                          dir, path, old_max ? " (only --max-new-tokens is larger: --extend continues the run, redoing "
                                               "what the old limit cut)" : "");
    }
    cJSON_Delete(c);
    FILE *f;
    if (!rc && old_max) rc = sweep_extend_records(r, dir, old_max);
    if (!rc && (!old || old_max) && (!(f = fopen(path, "wb")) || fputs(text, f) < 0 || fclose(f) != 0))
        rc = kvp_fail(r->err, KVP_E_IO, "%s: cannot write", path);
    free(old);
    free(text);
    return rc;
}
