/* The Python binding's C side: the few entry points whose arguments are not plain scalars,
 * pointers and arrays (structs with strings, enums by name, sweep options), so the ctypes
 * layer never mirrors a C struct. Built into the package's shared library with the engine. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "kvprobe/kvprobe.h"

const char *kvp_py_version(void) { return KVPROBE_VERSION; }

/* n_layer, n_embd, n_head, n_head_kv, head_dim, head_dim_v, n_vocab, n_ctx_train, n_ff */
const char *kvp_py_hparams(const kvp_model *m, int out[9]) {
    const kvp_hparams *h = kvp_model_hparams(m);
    int v[9] = {h->n_layer, h->n_embd, h->n_head, h->n_head_kv, h->head_dim, h->head_dim_v, h->n_vocab, h->n_ctx_train, h->n_ff};
    memcpy(out, v, sizeof v);
    return h->arch_name;
}

kvp_ctx *kvp_py_ctx_new(const kvp_model *m, int threads, int max_batch, const char *precision, kvp_error *err) {
    kvp_ctx_params p = {threads, max_batch, KVP_PREC_Q8, 0, NULL};
    if (precision && kvp_precision_from_name(precision, &p.precision)) {
        kvp_fail(err, KVP_E_INVALID, "unknown precision '%s' (q8, q8x2, f32)", precision);
        return NULL;
    }
    return kvp_ctx_new(m, &p, err);
}

/* The model's chat template (detected from its GGUF, or by name), its name into name[32]. */
static int pick_template(const kvp_model *m, const char *name, int thinking, kvp_template *t, kvp_error *err) {
    if (kvp_template_detect(kvp_model_gguf(m), t, err) && !name) return err->code;
    if (name && kvp_template_select(t, name, err)) return err->code;
    t->enable_thinking = thinking;
    return 0;
}

const char *kvp_py_template_name(const kvp_model *m) {
    kvp_template t;
    kvp_error err = {0};
    return pick_template(m, NULL, 0, &t, &err) ? "?" : kvp_template_name(t.kind);
}

/* Text -> ids and segment labels (kvp_segment), malloc'd (free with kvp_py_free). chat: render
 * as a user turn (optional system message, generation prompt) in the template. */
int kvp_py_tokenize(const kvp_model *m, const kvp_tokenizer *tok, const char *text, int chat, const char *system,
                    const char *template_name, int thinking, int add_bos, int parse_special, int32_t **ids, uint8_t **seg,
                    int *n, kvp_error *err) {
    *ids = NULL, *seg = NULL, *n = 0;
    if (!chat) {
        kvp_tokens r;
        kvp_tok_opts o = {.add_bos = add_bos, .parse_special = parse_special};
        if (kvp_tokenize_ex(tok, text, strlen(text), &o, &r, err)) return err->code;
        *ids = malloc((size_t)(r.n ? r.n : 1) * sizeof **ids);
        *seg = malloc((size_t)(r.n ? r.n : 1));
        if (!*ids || !*seg) {
            kvp_tokens_free(&r);
            return kvp_fail(err, KVP_E_NOMEM, "out of memory");
        }
        memcpy(*ids, r.ids, (size_t)r.n * sizeof **ids);
        for (int i = 0; i < r.n; i++) (*seg)[i] = kvp_token_type(tok, r.ids[i]) == KVP_TOK_CONTROL ? KVP_SEG_SCAFFOLD : KVP_SEG_USER;
        *n = r.n;
        kvp_tokens_free(&r);
        return 0;
    }
    kvp_template t;
    if (pick_template(m, template_name, thinking, &t, err)) return err->code;
    kvp_message msgs[2];
    int nm = 0;
    if (system) msgs[nm++] = (kvp_message){"system", system};
    msgs[nm++] = (kvp_message){"user", text};
    kvp_prompt p;
    if (kvp_chat_prompt(tok, &t, msgs, nm, 1, &p, err)) return err->code;
    *ids = p.ids, *seg = p.seg, *n = p.n;
    p.ids = NULL, p.seg = NULL;
    kvp_prompt_free(&p);
    return 0;
}

void kvp_py_free(void *p) { free(p); }

int kvp_py_splice(kvp_kv *kv, const char *cond, int layer_from, const char *span, int n_prompt, const uint8_t *seg,
                  const kvp_kv *donor, uint64_t seed, kvp_error *err) {
    kvp_splice s = {.layer_from = layer_from, .n_prompt = n_prompt, .seg = seg, .donor = donor, .seed = seed};
    if (kvp_condition_from_name(cond, &s.cond))
        return kvp_fail(err, KVP_E_INVALID, "unknown condition '%s' (clean, blank, zero, mean, noise, other, drop, drop-content)", cond);
    if (kvp_span_from_name(span, &s.span))
        return kvp_fail(err, KVP_E_INVALID, "unknown span '%s' (all-prompt, user-content, scaffold)", span);
    if (kvp_condition_needs_donor(s.cond) && !donor)
        return kvp_fail(err, KVP_E_INVALID, "condition '%s' needs a donor cache", cond);
    return kvp_splice_apply(kv, &s, err);
}

/* The sweep with its options as a JSON object (the CLI's option names, '-' as '_'). */
static int json_ints(const cJSON *a, int *out, int max, int *n) {
    *n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (!cJSON_IsNumber(x) || *n >= max) return -1;
        out[(*n)++] = x->valueint;
    }
    return 0;
}

/* Options from j (strings point into it). */
static int parse_opts(const cJSON *j, kvp_sweep_opts *po, kvp_error *err) {
    kvp_sweep_opts o;
    memset(&o, 0, sizeof o);
    o.out_dir = "sweep-out";
    o.seed = 1;
    o.quiet = 1;
    int rc = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, j) {
        const char *k = x->string, *s = cJSON_IsString(x) ? x->valuestring : NULL;
        int num = cJSON_IsNumber(x) || cJSON_IsBool(x), v = cJSON_IsBool(x) ? cJSON_IsTrue(x) : x->valueint;
        if (!strcmp(k, "model") && s) o.model_path = s;
        else if (!strcmp(k, "dataset") && s) o.dataset = s;
        else if (!strcmp(k, "out") && s) o.out_dir = s;
        else if (!strcmp(k, "data_dir") && s) o.data_dir = s;
        else if (!strcmp(k, "filler") && s) o.filler = s;
        else if (!strcmp(k, "system") && s) o.system = s;
        else if (!strcmp(k, "template") && s) o.template_name = s;
        else if (!strcmp(k, "precision") && s) o.precision = s;
        else if (!strcmp(k, "max_new_tokens") && num) o.max_new_tokens = v;
        else if (!strcmp(k, "threads") && num) o.threads = v;
        else if (!strcmp(k, "shots") && num) o.shots = v;
        else if (!strcmp(k, "seed") && num) o.seed = (uint64_t)x->valuedouble;
        else if (!strcmp(k, "thinking") && num) o.thinking = v;
        else if (!strcmp(k, "margins") && num) o.margins = v;
        else if (!strcmp(k, "quiet") && num) o.quiet = v;
        else if (!strcmp(k, "skip_bad_rows") && num) o.skip_bad_rows = v;
        else if (!strcmp(k, "no_report") && num) o.no_report = v;
        else if (!strcmp(k, "layers") && cJSON_IsArray(x)) rc = json_ints(x, o.layers, KVP_SWEEP_MAX_LAYERS, &o.n_layers);
        else if (!strcmp(k, "steps") && cJSON_IsArray(x)) rc = json_ints(x, o.steps, KVP_SWEEP_MAX_STEPS, &o.n_steps);
        else if (!strcmp(k, "span") && s) rc = kvp_span_from_name(s, &o.span);
        else if (!strcmp(k, "format") && s) {
            if (!strcmp(s, "cloze")) o.format = KVP_FORMAT_CLOZE;
            else rc = strcmp(s, "instruct") ? -1 : 0;
        } else if (!strcmp(k, "readout") && s) {
            static const char *const ro[] = {"text", "first-token", "loglik", "loglik-norm"};
            rc = -1;
            for (int i = 0; i < 4; i++)
                if (!strcmp(s, ro[i])) o.readout = (kvp_readout)i, rc = 0;
        } else if (!strcmp(k, "conditions") && cJSON_IsArray(x)) {
            const cJSON *c;
            cJSON_ArrayForEach(c, x) {
                if (!cJSON_IsString(c) || o.n_conds >= KVP_COND_COUNT ||
                    kvp_condition_from_name(c->valuestring, &o.conds[o.n_conds++])) {
                    rc = kvp_fail(err, KVP_E_INVALID, "sweep: unknown condition '%s'", cJSON_IsString(c) ? c->valuestring : "?");
                    break;
                }
            }
        } else {
            rc = kvp_fail(err, KVP_E_INVALID, "sweep: unknown option or wrong type: '%s'", k);
        }
        if (rc) {
            if (!err->code) kvp_fail(err, KVP_E_INVALID, "sweep: bad value for '%s'", k);
            return err->code;
        }
    }
    *po = o;
    return 0;
}

/* The sweep, or (prompts_path) what it would feed the model, as JSON lines in that file. */
int kvp_py_sweep(const char *opts_json, const char *prompts_path, kvp_error *err) {
    cJSON *j = cJSON_Parse(opts_json);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return kvp_fail(err, KVP_E_INVALID, "sweep options: not a JSON object");
    }
    kvp_sweep_opts o;
    int rc = parse_opts(j, &o, err);
    if (!rc && !prompts_path) rc = kvp_sweep_run(&o, err);
    if (!rc && prompts_path) {
        FILE *f = fopen(prompts_path, "wb");
        if (!f) rc = kvp_fail(err, KVP_E_IO, "%s: cannot write", prompts_path);
        else {
            rc = kvp_sweep_prompts(&o, f, err);
            if (fclose(f) != 0 && !rc) rc = kvp_fail(err, KVP_E_IO, "%s: write failed", prompts_path);
        }
    }
    cJSON_Delete(j);
    return rc ? err->code : 0;
}
