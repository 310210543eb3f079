/* The cloze format and its log-likelihood read-outs, end to end through kvp_sweep_run,
 * against an independent computation with the public API: the prompt written out by hand
 * and tokenized plainly, each option scored by one forward pass over prompt + " option"
 * (clean), or by a cache zeroed by hand before the pass that predicts option token W. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <unistd.h>

#include "harness.h"
#include "kvprobe/kvprobe.h"
#include "kvprobe/sweep.h"
#include "../../src/util/readfile.h"

#define MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define DIR "/tmp/kvprobe-test-cloze"

static const char *const DEMO_Q = "Which part of a plant takes in water from the soil?";
static const char *const DEMO_A = "the roots";
static const struct {
    const char *q, *opts[3];
} EX[2] = {
    {"What do bees make from nectar?", {"honey", "small grey stones found in rivers", "milk"}},
    {"Which season is the coldest of the year in Canada?", {"summer", "winter", "the season between summer and autumn"}},
};

typedef struct env {
    kvp_model *m;
    kvp_ctx *ctx;
    kvp_tokenizer *tok;
    int V, NL;
} env;

static double token_lp(const float *lg, int V, int32_t t) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < V; i++) mx = fmax(mx, lg[i]);
    for (int i = 0; i < V; i++) s += exp(lg[i] - mx);
    return lg[t] - mx - log(s);
}

/* Log-probability of " option" after the prompt; with zero_at >= 0 the K/V of prompt positions
 * [0, n-1) at every layer >= L are zeroed right before the pass predicting option token zero_at. */
static double option_lp(env *e, const int32_t *prompt, int n, const char *opt, int zero_at, int L, kvp_error *err) {
    char text[128];
    snprintf(text, sizeof text, " %s", opt);
    int32_t *cont = NULL, all[512];
    int k = 0;
    if (kvp_tokenize(e->tok, text, strlen(text), 0, 0, &cont, &k, err) || n + k > 512) return NAN;
    memcpy(all, prompt, (size_t)n * sizeof *all);
    memcpy(all + n, cont, (size_t)k * sizeof *all);
    float *lg = malloc((size_t)(n + k) * e->V * sizeof(float));
    kvp_kv *kv = kvp_kv_new(e->m, n + k + 1, KVP_KV_F32, err);
    double lp = 0;
    int W = zero_at >= 0 && zero_at < k ? zero_at : k; /* tokens before W are scored clean */
    /* the pass at input n-1+j predicts option token j */
    if (kvp_decode(e->ctx, kv, all, n + W, lg, NULL, err)) lp = NAN;
    for (int j = 0; j < W; j++) lp += token_lp(lg + (size_t)(n - 1 + j) * e->V, e->V, cont[j]);
    if (W < k) {
        kvp_kv_truncate(kv, n - 1 + W, err);
        kvp_kv_fill(kv, KVP_KV_BOTH, L, e->NL, 0, n - 1, 0.0f, err);
        if (kvp_decode(e->ctx, kv, all + n - 1 + W, k - W, lg, NULL, err)) lp = NAN;
        for (int j = W; j < k; j++) lp += token_lp(lg + (size_t)(j - W) * e->V, e->V, cont[j]);
    }
    kvp_kv_free(kv);
    free(lg);
    free(cont);
    return lp;
}

static const cJSON *find(cJSON **recs, int n, const char *id, const char *cond, int L, int W) {
    for (int i = 0; i < n; i++) {
        const cJSON *r = recs[i];
        if (!strcmp(cJSON_GetObjectItem(r, "example_id")->valuestring, id) &&
            !strcmp(cJSON_GetObjectItem(r, "condition")->valuestring, cond) && cJSON_GetObjectItem(r, "L")->valueint == L &&
            cJSON_GetObjectItem(r, "W")->valueint == W)
            return r;
    }
    return NULL;
}

/* The cloze prompts and clean option log-probabilities of arc-easy:8 against transformers
 * (tests/golden/cloze/, tools/make_cloze_goldens.py), on the exact (f32 activation) path; the
 * first 2 examples at the quick scale. */
static void check_golden(const char *model, const char *golden) {
    char title[160];
    snprintf(title, sizeof title, "cloze vs transformers: %s prompt ids and option log-probabilities (exact path)", golden);
    TEST(title) {
        kvp_error err = {0};
        size_t len;
        char *gtext = kvp_read_file(golden, &len);
        cJSON *g = gtext ? cJSON_Parse(gtext) : NULL, *gex = cJSON_GetObjectItem(g, "examples");
        CHECK(cJSON_GetArraySize(gex) == 8, "%s: golden missing or malformed", golden);
        int n_ex = test_quick() ? 2 : 8;
        char dataset[32];
        snprintf(dataset, sizeof dataset, "arc-easy:%d", n_ex);
        kvp_sweep_opts o = {.model_path = model, .dataset = dataset, .out_dir = DIR "-hf", .threads = 2, .quiet = 1,
                            .readout = KVP_READOUT_LOGLIK, .format = KVP_FORMAT_CLOZE, .precision = "f32",
                            .conds = {KVP_COND_CLEAN}, .n_conds = 1, .layers = {0}, .n_layers = 1, .steps = {0},
                            .n_steps = 1, .max_new_tokens = 1, .no_report = 1};
        system("rm -rf " DIR "-hf");
        FILE *pf = tmpfile();
        CHECK(pf && kvp_sweep_prompts(&o, pf, &err) == 0, "prompts: %s", err.msg);
        CHECK(kvp_sweep_run(&o, &err) == 0, "sweep: %s", err.msg);
        char *recs = kvp_read_file(DIR "-hf/results.jsonl", &len);
        double max_diff = 0;
        int n_opt = 0;
        char line[1 << 16];
        if (pf) rewind(pf);
        for (int i = 0; i < n_ex && i < cJSON_GetArraySize(gex) && pf && recs; i++) {
            const cJSON *ge = cJSON_GetArrayItem(gex, i), *gids = cJSON_GetObjectItem(ge, "prompt_ids");
            const char *id = cJSON_GetObjectItem(ge, "id")->valuestring;
            cJSON *p = fgets(line, sizeof line, pf) ? cJSON_Parse(line) : NULL, *ids = cJSON_GetObjectItem(p, "ids");
            int same = cJSON_GetArraySize(ids) == cJSON_GetArraySize(gids);
            for (int k = 0; same && k < cJSON_GetArraySize(ids); k++)
                same = cJSON_GetArrayItem(ids, k)->valueint == cJSON_GetArrayItem(gids, k)->valueint;
            CHECK(same && !strcmp(cJSON_GetObjectItem(p, "example_id")->valuestring, id), "%s: prompt ids differ", id);
            cJSON_Delete(p);
            char key[160];
            snprintf(key, sizeof key, "\"example_id\":\"%s\"", id);
            const char *at = strstr(recs, key), *nl = at ? strchr(at, '\n') : NULL, *bol = at;
            while (bol && bol > recs && bol[-1] != '\n') bol--;
            char *rline = at && nl ? strndup(bol, (size_t)(nl - bol)) : NULL;
            cJSON *r = rline ? cJSON_Parse(rline) : NULL, *lp = cJSON_GetObjectItem(r, "logprobs");
            const cJSON *gopt = cJSON_GetObjectItem(ge, "options");
            CHECK(cJSON_GetArraySize(lp) == cJSON_GetArraySize(gopt), "%s: %d options recorded", id, cJSON_GetArraySize(lp));
            for (int k = 0; k < cJSON_GetArraySize(lp) && k < cJSON_GetArraySize(gopt); k++) {
                double want = cJSON_GetObjectItem(cJSON_GetArrayItem(gopt, k), "logprob")->valuedouble;
                double d = fabs(cJSON_GetArrayItem(lp, k)->valuedouble - want);
                max_diff = d > max_diff ? d : max_diff;
                n_opt++;
                CHECK(d < 1e-3, "%s option %d: %.5f vs transformers %.5f", id, k, cJSON_GetArrayItem(lp, k)->valuedouble, want);
            }
            cJSON_Delete(r);
            free(rline);
        }
        NOTE("%s: %d options, max |logprob - transformers| = %.2g (records round to 1e-4)", golden, n_opt, max_diff);
        CHECK(n_opt >= 3 * n_ex, "%d options compared", n_opt);
        if (pf) fclose(pf);
        free(recs);
        cJSON_Delete(g);
        free(gtext);
        system("rm -rf " DIR "-hf");
    }
}

int main(void) {
    kvp_error err = {0};
    system("rm -rf " DIR);
    FILE *f = fopen(DIR ".jsonl", "w");
    for (int i = 0; i < 2; i++)
        fprintf(f, "{\"id\": \"q%d\", \"question\": \"%s\", \"choices\": [\"%s\", \"%s\", \"%s\"], \"answer\": %d}\n", i, EX[i].q,
                EX[i].opts[0], EX[i].opts[1], EX[i].opts[2], i);
    fprintf(f, "{\"id\": \"demo\", \"question\": \"%s\", \"choices\": [\"the leaves\", \"%s\"], \"answer\": \"B\"}\n", DEMO_Q, DEMO_A);
    fclose(f);

    kvp_sweep_opts o = {.model_path = MODEL, .dataset = DIR ".jsonl", .out_dir = DIR, .threads = 2, .quiet = 1,
                        .readout = KVP_READOUT_LOGLIK_NORM, .format = KVP_FORMAT_CLOZE, .shots = 1,
                        .conds = {KVP_COND_CLEAN, KVP_COND_ZERO}, .n_conds = 2, .layers = {0, 20}, .n_layers = 2,
                        .steps = {0, 1}, .n_steps = 2, .max_new_tokens = 2, .no_report = 1};
    int rc = kvp_sweep_run(&o, &err);
    TEST("cloze sweep runs") CHECK(rc == 0, "%s", err.msg);
    size_t len = 0;
    char *text = kvp_read_file(DIR "/results.jsonl", &len), *run = kvp_read_file(DIR "/run.json", &len);
    cJSON *recs[64];
    int n_rec = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line && n_rec < 64; line = strtok(NULL, "\n")) recs[n_rec++] = cJSON_Parse(line);
    TEST("cloze sweep: one record per example x cell, run.json names the format") {
        CHECK(n_rec == 2 * (1 + 2 * 2), "%d records", n_rec);
        CHECK(run && strstr(run, "\"format\":\t\"cloze\"") && strstr(run, "\"readout\":\t\"loglik-norm\"") &&
                  strstr(run, "\"template\":\t\"none\"") && !strstr(run, "\"bos\""),
              "run.json: %s", run ? run : "(none)");
    }

    env e = {0};
    e.m = kvp_model_load(MODEL, &err);
    kvp_ctx_params cp = {1, 64, KVP_SWEEP_PRECISION, 0, NULL}; /* the sweep's own path */
    e.ctx = e.m ? kvp_ctx_new(e.m, &cp, &err) : NULL;
    e.tok = e.m ? kvp_tokenizer_load(kvp_model_gguf(e.m), &err) : NULL;
    if (!e.tok) {
        TEST("cloze: model loads") CHECK(0, "%s", err.msg);
        return harness_finish();
    }
    e.V = kvp_model_hparams(e.m)->n_vocab;
    e.NL = kvp_model_hparams(e.m)->n_layer;

    for (int i = 0; i < 2 && n_rec; i++) {
        char prompt[512], id[16], title[128];
        snprintf(prompt, sizeof prompt, "Question: %s\nAnswer: %s\n\nQuestion: %s\nAnswer:", DEMO_Q, DEMO_A, EX[i].q);
        snprintf(id, sizeof id, "q%d", i);
        int32_t *ids = NULL;
        int n = 0;
        kvp_tokenize(e.tok, prompt, strlen(prompt), 0, 0, &ids, &n, &err);
        snprintf(title, sizeof title, "cloze %s: clean and zero log-likelihoods equal an independent computation", id);
        TEST(title) {
            const cJSON *clean = find(recs, n_rec, id, "clean", e.NL, 0);
            CHECK(clean && cJSON_GetObjectItem(clean, "prompt_tokens")->valueint == n, "the prompt is the demo + question, %d tokens",
                  n);
            struct {
                const char *cond;
                int L, W;
            } cells[] = {{"clean", e.NL, 0}, {"zero", 0, 0}, {"zero", 0, 1}, {"zero", 20, 0}, {"zero", 20, 1}};
            for (size_t c = 0; c < sizeof cells / sizeof cells[0]; c++) {
                const cJSON *r = find(recs, n_rec, id, cells[c].cond, cells[c].L, cells[c].W);
                const cJSON *lp = r ? cJSON_GetObjectItem(r, "logprobs") : NULL;
                CHECK(cJSON_GetArraySize(lp) == 3, "%s L%d W%d: logprobs", cells[c].cond, cells[c].L, cells[c].W);
                if (cJSON_GetArraySize(lp) != 3) continue;
                int best = -1;
                double best_v = -INFINITY;
                for (int k = 0; k < 3; k++) {
                    int zero_at = strcmp(cells[c].cond, "zero") ? -1 : cells[c].W;
                    double want = option_lp(&e, ids, n, EX[i].opts[k], zero_at, cells[c].L, &err);
                    double got = cJSON_GetArrayItem(lp, k)->valuedouble;
                    CHECK(fabs(got - want) < 2e-4, "%s L%d W%d option %d: record %.5f, independent %.5f", cells[c].cond,
                          cells[c].L, cells[c].W, k, got, want);
                    double per_byte = got / (double)(strlen(EX[i].opts[k]) + 1); /* the leading space counts */
                    if (per_byte > best_v) best_v = per_byte, best = k;
                }
                char pick[2] = {(char)('A' + best), 0};
                CHECK(!strcmp(cJSON_GetObjectItem(r, "readout")->valuestring, pick), "%s: read-out %s, per-byte best %s",
                      cells[c].cond, cJSON_GetObjectItem(r, "readout")->valuestring, pick);
                CHECK(cJSON_GetObjectItem(r, "score")->valuedouble == (best == i), "score follows the read-out");
            }
        }
        free(ids);
    }

    TEST("cloze: refused without a loglik read-out, with a chat template, or on a dataset without a cloze form") {
        kvp_sweep_opts b = o;
        b.out_dir = DIR "-bad";
        b.readout = KVP_READOUT_FIRST_TOKEN;
        CHECK(kvp_sweep_run(&b, &err) == KVP_E_INVALID && strstr(err.msg, "--readout loglik"), "%s", err.msg);
        b.readout = KVP_READOUT_LOGLIK;
        b.template_name = "chatml";
        CHECK(kvp_sweep_run(&b, &err) == KVP_E_INVALID && strstr(err.msg, "no chat template"), "%s", err.msg);
        b.template_name = NULL;
        b.dataset = "gsm8k:1";
        b.shots = 0;
        CHECK(kvp_sweep_run(&b, &err) != 0, "gsm8k accepted");
        b.dataset = "bbh/boolean_expressions:1";
        b.readout = KVP_READOUT_LOGLIK;
        CHECK(kvp_sweep_run(&b, &err) != 0, "bbh accepted");
    }
    check_golden("models/gemma-3-270m-q4_k_m.gguf", "tests/golden/cloze/gemma3-270m.arc-easy.json");
    check_golden(MODEL, "tests/golden/cloze/smollm2-135m.arc-easy.json");
    for (int i = 0; i < n_rec; i++) cJSON_Delete(recs[i]);
    free(text);
    free(run);
    kvp_tokenizer_free(e.tok);
    kvp_ctx_free(e.ctx);
    kvp_model_free(e.m);
    system("rm -rf " DIR " " DIR "-bad " DIR ".jsonl");
    return harness_finish();
}
