/* The splice sweep runner (include/kvprobe/sweep.h).
 *
 * Data flow per example: prompt -> tokens (chat template, labels) -> clean prefill -> clean
 * greedy decode (tokens, logits) -> per W: fork the clean cache at step W -> splice every
 * (condition, L) cell -> decode all cells of this W as one batch -> score -> records. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../util/readfile.h"
#include "../util/strmap.h"
#include "kvprobe/kvprobe.h"
#include "kvprobe/sweep.h"

/* Fork caches of one example decoding at once are capped at this many bytes (larger grids
 * decode in waves of whole W groups). */
#define KVP_SWEEP_FORK_BYTES ((size_t)4 << 30)

#define KVP_MAX_CAND 26 /* choices A..Z */
#define KVP_LOGLIK_MAX_TOKENS 64 /* a longer continuation is scored on its first 64 tokens */

/* ---- helpers ----------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sha256_hex(const void *data, size_t n, char out[65]) {
    unsigned char md[32];
    unsigned int len = 0;
    EVP_Digest(data, n, md, &len, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", md[i]);
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

static const char *readout_name(kvp_readout ro) {
    return ro == KVP_READOUT_LOGLIK        ? "loglik"
           : ro == KVP_READOUT_LOGLIK_NORM ? "loglik-norm"
           : ro == KVP_READOUT_FIRST_TOKEN ? "first-token"
                                           : "text";
}

static int is_loglik(kvp_readout ro) { return ro == KVP_READOUT_LOGLIK || ro == KVP_READOUT_LOGLIK_NORM; }

/* ---- run state --------------------------------------------------------------------------- */

typedef struct run_ctx {
    const kvp_sweep_opts *o;
    kvp_model *m;
    const kvp_hparams *hp;
    kvp_tokenizer *tok;
    kvp_template tmpl;
    kvp_dataset ds;
    kvp_ctx *ctx;
    kvp_precision prec;
    int max_new;
    int kl_steps;
    kvp_condition conds[KVP_COND_COUNT];
    int n_conds;
    int layers[KVP_SWEEP_MAX_LAYERS], n_layers;
    int steps[KVP_SWEEP_MAX_STEPS], n_steps;
    char model_sha[65];
    FILE *out;
    strmap done;          /* keys of finished records */
    char **done_keys;
    int n_done, cap_done;
    /* --readout: this example's candidate answers, their first tokens (first-token) and their
     * continuations' tokens (loglik) */
    int n_cand;
    char cand[KVP_MAX_CAND][32];
    int32_t cand_tok[KVP_MAX_CAND][4];
    int cand_nv[KVP_MAX_CAND];
    int32_t *cont[KVP_MAX_CAND];
    int n_cont[KVP_MAX_CAND];
    size_t cont_bytes[KVP_MAX_CAND]; /* loglik-norm divides by the continuation's length in bytes */
    /* scores of this example's distinct outputs: cells often repeat the clean text, and a code
     * score costs a sandboxed Python run */
    const kvp_example *scored_ex;
    struct scored { char *text; kvp_score_result res; } *scored;
    int n_scored, cap_scored;
    /* progress */
    long cells_total, cells_finished, cells_this_run;
    double t_start, t_last_progress;
    kvp_error *err;
} run_ctx;

typedef struct cell {
    kvp_condition cond;
    int L, W;
    kvp_kv *kv;
    int32_t *tok;         /* generated tokens from step 0 (clean prefix before W) */
    int n_tok;
    int done, eog, applied;
    double kl_sum;
    int kl_n;
    float *logits;
    double t0;
    int readout;          /* --readout: the candidate chosen (-1: none) */
    double cand_lp[KVP_MAX_CAND]; /* --readout loglik: each candidate's log-probability */
} cell;

static void cell_key(char *buf, size_t cap, const char *id, const char *cond, int L, int W) {
    snprintf(buf, cap, "%s\t%s\t%d\t%d", id, cond, L, W);
}

static int is_done(const run_ctx *r, const char *id, const char *cond, int L, int W) {
    char key[512];
    cell_key(key, sizeof key, id, cond, L, W);
    return strmap_get(&r->done, key, strlen(key)) >= 0;
}

static int mark_done(run_ctx *r, const char *key) {
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

/* ---- resume: read finished records, drop a torn last line -------------------------------- */

static int load_done(run_ctx *r, const char *path) {
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
        cell_key(key, sizeof key, id->valuestring, c->valuestring, L->valueint, W->valueint);
        if (mark_done(r, key)) {
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
static int check_config(run_ctx *r, const char *dir) {
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
    if (o->readout) cJSON_AddStringToObject(c, "readout", readout_name(o->readout));
    if (o->format == KVP_FORMAT_CLOZE) cJSON_AddStringToObject(c, "format", "cloze");
    if (r->tmpl.kind == KVP_TMPL_NONE && kvp_raw_bos(r->tok)) cJSON_AddBoolToObject(c, "bos", 1);
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    char path[4096];
    snprintf(path, sizeof path, "%s/run.json", dir);
    int rc = 0;
    size_t n;
    char *old = kvp_read_file(path, &n);
    FILE *f;
    if (old) {
        if (strcmp(old, text) != 0)
            rc = kvp_fail(r->err, KVP_E_INVALID,
                          "%s holds a sweep with different settings (see %s); use another --out directory", dir, path);
        free(old);
    } else if (!(f = fopen(path, "wb")) || fputs(text, f) < 0 || fclose(f) != 0) {
        rc = kvp_fail(r->err, KVP_E_IO, "%s: cannot write", path);
    }
    free(text);
    return rc;
}

/* ---- records ----------------------------------------------------------------------------- */

/* The candidate answers of a label / multiple-choice example ("positive|negative", or the
 * letters A..), each with the first token of its spellings "x", " x", "X", " X". */
static int readout_candidates(run_ctx *r, const kvp_example *ex) {
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
        if (is_loglik(r->o->readout)) { /* continuation: the label word, or the option's text */
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
static int readout(const run_ctx *r, const float *logits) {
    int best = -1;
    float bl = -INFINITY;
    for (int c = 0; c < r->n_cand; c++)
        for (int k = 0; k < r->cand_nv[c]; k++)
            if (logits[r->cand_tok[c][k]] > bl) bl = logits[r->cand_tok[c][k]], best = c;
    return best;
}

static void forget_scores(run_ctx *r) {
    for (int i = 0; i < r->n_scored; i++) free(r->scored[i].text);
    r->n_scored = 0;
    r->scored_ex = NULL;
}

/* kvp_score, once per distinct output text of an example (the same text scores the same). */
static int score_cached(run_ctx *r, const kvp_example *ex, const char *text, kvp_score_result *sc) {
    if (r->scored_ex != ex) forget_scores(r);
    r->scored_ex = ex;
    for (int i = 0; i < r->n_scored; i++)
        if (!strcmp(r->scored[i].text, text)) {
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
    if (copy) r->scored[r->n_scored++] = (struct scored){copy, *sc};
    return 0;
}

static int write_record(run_ctx *r, const kvp_example *ex, const char *cond, int L, int W, const int32_t *tok, int n_tok,
                        int eog, int applied, double kl, int kl_n, double agreement, int first_div, int n_prompt,
                        int ro, const double *cand_lp, double seconds) {
    char *text = NULL;
    size_t tlen;
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
    cJSON_AddStringToObject(j, "condition", cond);
    cJSON_AddNumberToObject(j, "L", L);
    cJSON_AddNumberToObject(j, "W", W);
    cJSON_AddStringToObject(j, "span", kvp_span_name(r->o->span));
    cJSON_AddBoolToObject(j, "edit_applied", applied);
    cJSON_AddStringToObject(j, "text", text);
    cJSON *ids = cJSON_AddArrayToObject(j, "tokens");
    for (int i = 0; i < n_tok; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(tok[i]));
    cJSON_AddStringToObject(j, "extracted", sc.extracted);
    cJSON_AddStringToObject(j, "gold", ex->answer);
    if (r->o->readout) { /* the score is the read-out's; the text's is kept beside it */
        const char *pick = ro >= 0 ? r->cand[ro] : "";
        cJSON_AddStringToObject(j, "readout", pick);
        if (cand_lp) {
            cJSON *lp = cJSON_AddObjectToObject(j, "logprobs");
            for (int c = 0; c < r->n_cand; c++) cJSON_AddNumberToObject(lp, r->cand[c], round(cand_lp[c] * 1e4) / 1e4);
        }
        cJSON_AddNumberToObject(j, "text_score", sc.score);
        sc.score = ro >= 0 && !strcasecmp(pick, ex->answer);
    }
    cJSON_AddNumberToObject(j, "score", sc.score);
    cJSON_AddNumberToObject(j, "decode_steps", n_tok + (eog ? 1 : 0));
    cJSON_AddBoolToObject(j, "stopped_at_eog", eog);
    cJSON_AddNumberToObject(j, "prompt_tokens", n_prompt);
    if (kl_n > 0) cJSON_AddNumberToObject(j, "kl_mean", kl / kl_n);
    else cJSON_AddNullToObject(j, "kl_mean");
    cJSON_AddNumberToObject(j, "kl_steps", kl_n);
    cJSON_AddNumberToObject(j, "agreement", agreement);
    cJSON_AddNumberToObject(j, "first_divergence", first_div);
    cJSON_AddStringToObject(j, "model_sha256", r->model_sha);
    cJSON_AddStringToObject(j, "kvprobe_version", KVPROBE_VERSION);
    cJSON_AddStringToObject(j, "activations", kvp_precision_name(r->prec));
    cJSON *t = cJSON_AddObjectToObject(j, "timing");
    cJSON_AddNumberToObject(t, "seconds", round(seconds * 1e4) / 1e4);
    char *line = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    free(text);
    if (!line) return kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    int bad = fprintf(r->out, "%s\n", line) < 0 || fflush(r->out) != 0;
    free(line);
    if (bad) return kvp_fail(r->err, KVP_E_IO, "results.jsonl: write failed: %s", strerror(errno));
    char key[512];
    cell_key(key, sizeof key, ex->id, cond, L, W);
    mark_done(r, key);
    r->cells_finished++;
    r->cells_this_run++;
    return 0;
}

static void progress(run_ctx *r, int ex_done, int force) {
    if (r->o->quiet) return;
    double t = now_s();
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

/* ---- one example ------------------------------------------------------------------------- */

typedef struct example_state {
    kvp_prompt prompt, blank, other;
    kvp_kv *base, *donor_blank, *donor_other, *clean;
    int32_t *clean_tok;
    int n_clean, clean_eog, clean_steps; /* steps = forward passes the clean run made */
    float *clean_logits;                 /* [n_saved][V] logits of steps 0..n_saved-1 */
    int n_saved;
    int clean_readout;                   /* --readout: the clean run's candidate */
    double clean_lp[KVP_MAX_CAND];       /* --readout loglik: clean log-probability per candidate */
    kvp_kv *cont_kv[KVP_MAX_CAND];       /* --readout loglik: the prompt + each continuation, clean */
    double *cont_lp[KVP_MAX_CAND];       /*   and the clean log-probability of each of its tokens */
} example_state;

static void free_state(example_state *s) {
    kvp_prompt_free(&s->prompt);
    kvp_prompt_free(&s->blank);
    kvp_prompt_free(&s->other);
    kvp_kv_free(s->base);
    kvp_kv_free(s->donor_blank);
    kvp_kv_free(s->donor_other);
    kvp_kv_free(s->clean);
    free(s->clean_tok);
    free(s->clean_logits);
    for (int c = 0; c < KVP_MAX_CAND; c++) kvp_kv_free(s->cont_kv[c]), free(s->cont_lp[c]);
}

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
 * the example's user turn. Without a chat template, turns are separated by blank lines. */
static int user_prompt(run_ctx *r, const kvp_example *ex, kvp_prompt *p) {
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
    rc = ok ? kvp_chat_prompt(r->tok, &r->tmpl, msgs, n, 1, p, r->err) : kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(msgs);
    return rc;
}

/* The OTHER donor: this prompt with its user tokens replaced by another example's user
 * tokens, cycled to the same count, so every position lines up. */
static int other_donor(run_ctx *r, const kvp_prompt *p, const kvp_example *other, kvp_prompt *d) {
    kvp_prompt op;
    if (user_prompt(r, other, &op)) return r->err->code;
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

static kvp_kv *prefill(run_ctx *r, const int32_t *ids, int n, int n_ctx) {
    kvp_kv *kv = kvp_kv_new(r->m, n_ctx, KVP_KV_F32, r->err);
    if (kv && kvp_decode(r->ctx, kv, ids, n, NULL, NULL, r->err)) {
        kvp_kv_free(kv);
        return NULL;
    }
    return kv;
}

static int is_end(const run_ctx *r, int32_t t) { return kvp_token_is_eog(r->tok, t); }

/* Clean greedy decode from the prefilled base; keeps the logits of the first n_save steps. */
static int clean_decode(run_ctx *r, example_state *s, int n_save) {
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
        if (is_end(r, x)) {
            s->clean_eog = 1;
            break;
        }
        s->clean_tok[s->n_clean++] = x;
    }
    free(lg);
    return 0;
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

/* ---- --readout loglik: candidates scored by teacher forcing ------------------------------- */

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
static int loglik_clean(run_ctx *r, example_state *s) {
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
static int loglik_cell(run_ctx *r, const example_state *s, const kvp_splice *sp, int W, double *cand_lp, int *pick) {
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

/* Decode cells together until all finish; write each record as it finishes (in cell order).
 * Cells may have different W: each feeds its own next token at its own position. */
static int decode_cells(run_ctx *r, example_state *s, const kvp_example *ex, cell *cells, int n_cells) {
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
                if (step == 0 && r->o->readout == KVP_READOUT_FIRST_TOKEN) c->readout = readout(r, c->logits);
                int32_t t = kvp_argmax(c->logits, V);
                if (is_end(r, t)) c->eog = c->done = 1;
                else if ((c->tok[c->n_tok++] = t, c->n_tok >= r->max_new)) c->done = 1;
            }
        }
        for (int i = 0; i < n_cells && !rc; i++) { /* records of cells that just finished, in cell order */
            cell *c = &cells[i];
            if (!c->done || !c->kv) continue;
            double ag;
            int fd;
            agreement(s, c, &ag, &fd);
            rc = write_record(r, ex, kvp_condition_name(c->cond), c->L, c->W, c->tok, c->n_tok, c->eog, 1, c->kl_sum,
                              c->kl_n, ag, fd, n, c->readout, is_loglik(r->o->readout) ? c->cand_lp : NULL,
                              now_s() - c->t0);
            kvp_kv_free(c->kv);
            c->kv = NULL;
        }
    }
    free(rows);
    free(act);
    return rc;
}

static int max_step(const run_ctx *r) {
    int m = 0;
    for (int i = 0; i < r->n_steps; i++) m = r->steps[i] > m ? r->steps[i] : m;
    return m;
}

static int run_example(run_ctx *r, int ei) {
    const kvp_example *ex = &r->ds.ex[ei];
    const char *clean_name = kvp_condition_name(KVP_COND_CLEAN);
    int todo = !is_done(r, ex->id, clean_name, r->hp->n_layer, 0);
    for (int w = 0; w < r->n_steps; w++)
        for (int c = 0; c < r->n_conds; c++)
            for (int l = 0; l < r->n_layers; l++)
                if (r->conds[c] != KVP_COND_CLEAN)
                    todo |= !is_done(r, ex->id, kvp_condition_name(r->conds[c]), r->layers[l], r->steps[w]);
    if (!todo) return 0;

    example_state s;
    memset(&s, 0, sizeof s);
    int rc = 0, V = r->hp->n_vocab;
    double t0 = now_s();
    if (user_prompt(r, ex, &s.prompt)) return kvp_wrap(r->err, "example %s", ex->id);
    int n = s.prompt.n, n_gen = r->max_new;
    if (is_loglik(r->o->readout) && n_gen < KVP_LOGLIK_MAX_TOKENS) n_gen = KVP_LOGLIK_MAX_TOKENS;
    int n_ctx = n + n_gen + 1;
    if (n < 2) {
        free_state(&s);
        return kvp_fail(r->err, KVP_E_INVALID, "example %s: the prompt has fewer than 2 tokens", ex->id);
    }
    if (n_ctx > r->hp->n_ctx_train && r->hp->n_ctx_train > 0) {
        free_state(&s);
        return kvp_fail(r->err, KVP_E_INVALID, "example %s: prompt (%d) + max new tokens exceeds the context (%d)", ex->id,
                        n, r->hp->n_ctx_train);
    }
    int need_blank = 0, need_other = 0;
    for (int c = 0; c < r->n_conds; c++) {
        need_blank |= r->conds[c] == KVP_COND_BLANK;
        need_other |= r->conds[c] == KVP_COND_OTHER;
    }
    /* Prefills: the prompt without its last token (that token is decode step 0), donors. */
    if (!(s.base = prefill(r, s.prompt.ids, n - 1, n_ctx))) goto fail;
    if (need_blank && (kvp_prompt_blank(r->tok, &s.prompt, r->o->filler, KVP_FILLER_SAME_LENGTH, &s.blank, NULL, r->err) ||
                       !(s.donor_blank = prefill(r, s.blank.ids, n - 1, n_ctx))))
        goto fail;
    if (need_other && (other_donor(r, &s.prompt, &r->ds.ex[(ei + 1) % r->ds.n], &s.other) ||
                       !(s.donor_other = prefill(r, s.other.ids, n - 1, n_ctx))))
        goto fail;
    if (clean_decode(r, &s, max_step(r) + r->kl_steps)) goto fail;
    if (r->o->readout && readout_candidates(r, ex)) goto fail;
    const int loglik = is_loglik(r->o->readout);
    if (loglik ? loglik_clean(r, &s) : (s.clean_readout = readout(r, s.clean_logits), 0)) goto fail;
    if (!is_done(r, ex->id, clean_name, r->hp->n_layer, 0) &&
        (rc = write_record(r, ex, clean_name, r->hp->n_layer, 0, s.clean_tok, s.n_clean, s.clean_eog, 0, 0, 0, 1.0, -1,
                           n, s.clean_readout, loglik ? s.clean_lp : NULL, now_s() - t0)))
        goto out;

    /* Every cell forks the finished clean run at its own W, so cells of all W decode together
     * as one batch (one forward pass per step for all of them) — in waves when their caches
     * would not fit in KVP_SWEEP_FORK_BYTES. Edits past the end of the clean run are recorded
     * as not applied (the clean continuation). */
    int max_cells = r->n_steps * r->n_conds * r->n_layers, n_cells = 0;
    cell *cells = calloc((size_t)(max_cells ? max_cells : 1), sizeof *cells);
    if (!cells) {
        rc = kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
        goto out;
    }
    size_t fork_bytes = kvp_kv_bytes(s.clean), wave_bytes = 0;
    double tw = now_s();
    for (int w = 0; w <= r->n_steps && !rc; w++) {
        int W = w < r->n_steps ? r->steps[w] : 0, group = 0;
        for (int c = 0; c < r->n_conds && w < r->n_steps; c++)
            for (int l = 0; l < r->n_layers; l++)
                group += r->conds[c] != KVP_COND_CLEAN && !is_done(r, ex->id, kvp_condition_name(r->conds[c]), r->layers[l], W) &&
                         W < s.clean_steps;
        /* decode the wave so far if this W's cells would overflow it (or at the end) */
        if (n_cells && (w == r->n_steps || wave_bytes + (size_t)group * fork_bytes > KVP_SWEEP_FORK_BYTES)) {
            rc = decode_cells(r, &s, ex, cells, n_cells);
            for (int i = 0; i < n_cells; i++) {
                kvp_kv_free(cells[i].kv);
                free(cells[i].tok);
                free(cells[i].logits);
            }
            memset(cells, 0, (size_t)n_cells * sizeof *cells);
            n_cells = 0;
            wave_bytes = 0;
            tw = now_s();
            progress(r, ei, 0);
        }
        if (w == r->n_steps) break;
        for (int c = 0; c < r->n_conds && !rc; c++) {
            if (r->conds[c] == KVP_COND_CLEAN) continue;
            for (int l = 0; l < r->n_layers && !rc; l++) {
                const char *cn = kvp_condition_name(r->conds[c]);
                if (is_done(r, ex->id, cn, r->layers[l], W)) continue;
                kvp_splice sp = {.cond = r->conds[c], .layer_from = r->layers[l], .span = r->o->span, .n_prompt = n,
                                 .seg = s.prompt.seg, .seed = r->o->seed ^ (uint64_t)ei * 0x9E3779B97F4A7C15ull,
                                 .donor = r->conds[c] == KVP_COND_OTHER ? s.donor_other : s.donor_blank};
                if (W >= s.clean_steps) { /* the clean run ended before step W: nothing to edit */
                    int pick = s.clean_readout;
                    double lp[KVP_MAX_CAND];
                    if (loglik && (rc = loglik_cell(r, &s, &sp, W, lp, &pick))) break;
                    rc = write_record(r, ex, cn, r->layers[l], W, s.clean_tok, s.n_clean, s.clean_eog, 0, 0, 0, 1.0, -1,
                                      n, pick, loglik ? lp : NULL, 0.0);
                    continue;
                }
                cell *ce = &cells[n_cells++];
                ce->cond = r->conds[c];
                ce->L = r->layers[l];
                ce->W = W;
                ce->t0 = tw;
                ce->applied = 1;
                ce->tok = malloc((size_t)(r->max_new + 1) * sizeof *ce->tok);
                ce->logits = malloc((size_t)V * sizeof(float));
                if (!ce->tok || !ce->logits || !(ce->kv = kvp_kv_clone(s.clean, r->err)) ||
                    kvp_kv_truncate(ce->kv, n - 1 + W, r->err)) {
                    rc = r->err->code ? r->err->code : kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
                    break;
                }
                wave_bytes += fork_bytes;
                memcpy(ce->tok, s.clean_tok, (size_t)W * sizeof *ce->tok); /* tokens before W are clean */
                ce->n_tok = W;
                rc = kvp_splice_apply(ce->kv, &sp, r->err);
                ce->readout = W == 0 ? -1 : s.clean_readout; /* first-token: set at step 0 if W = 0 */
                if (!rc && loglik) rc = loglik_cell(r, &s, &sp, W, ce->cand_lp, &ce->readout);
            }
        }
    }
    for (int i = 0; i < n_cells; i++) {
        kvp_kv_free(cells[i].kv);
        free(cells[i].tok);
        free(cells[i].logits);
    }
    free(cells);
    goto out;
fail:
    rc = r->err->code ? r->err->code : KVP_E_NOMEM;
out:
    free_state(&s);
    if (rc) kvp_wrap(r->err, "example %s", ex->id);
    return rc;
}

/* ---- set-up ------------------------------------------------------------------------------ */

static int setup(run_ctx *r) {
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
                                readout_name(o->readout), r->ds.ex[i].id);
    if (o->format == KVP_FORMAT_CLOZE) {
        if (!is_loglik(o->readout))
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
    int batch = cells_per_w * r->n_steps; /* all cells of an example decode together */
    r->prec = KVP_SWEEP_PRECISION;
    if (o->precision && kvp_precision_from_name(o->precision, &r->prec))
        return kvp_fail(err, KVP_E_INVALID, "unknown precision '%s' (q8, q8x2, f32)", o->precision);
    kvp_ctx_params cp = {o->threads, batch > 64 ? batch : 64, r->prec, 0};
    if (!(r->ctx = kvp_ctx_new(r->m, &cp, err))) return err->code;
    sha256_hex(g->map, g->size, r->model_sha);
    r->cells_total = (long)r->ds.n * (1 + (long)r->n_steps * cells_per_w);
    return 0;
}

static void free_run(run_ctx *r) {
    forget_scores(r);
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

int kvp_sweep_prompts(const kvp_sweep_opts *o, FILE *out, kvp_error *err) {
    run_ctx r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.err = err;
    if (!o->dataset || !o->model_path) return kvp_fail(err, KVP_E_INVALID, "prompts need a model and a dataset");
    int rc = setup(&r);
    static const char seg_letter[] = "syua";
    for (int i = 0; i < r.ds.n && !rc; i++) {
        const kvp_example *ex = &r.ds.ex[i];
        kvp_prompt p, d;
        memset(&d, 0, sizeof d);
        if ((rc = user_prompt(&r, ex, &p))) break;
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
                if (is_end(&r, t)) cJSON_AddItemToArray(stop, cJSON_CreateNumber(t));
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
    free_run(&r);
    return rc;
}

int kvp_sweep_run(const kvp_sweep_opts *o, kvp_error *err) {
    run_ctx r;
    memset(&r, 0, sizeof r);
    r.o = o;
    r.err = err;
    if (!o->out_dir || !o->dataset || !o->model_path)
        return kvp_fail(err, KVP_E_INVALID, "sweep needs a model, a dataset and an output directory");
    int rc = setup(&r);
    char path[4096];
    if (!rc && mkdir(o->out_dir, 0755) != 0 && errno != EEXIST)
        rc = kvp_fail(err, KVP_E_IO, "%s: cannot create: %s", o->out_dir, strerror(errno));
    if (!rc && strmap_init(&r.done, 1024)) rc = kvp_fail(err, KVP_E_NOMEM, "out of memory");
    if (!rc) rc = check_config(&r, o->out_dir);
    snprintf(path, sizeof path, "%s/results.jsonl", o->out_dir);
    if (!rc) rc = load_done(&r, path);
    if (!rc && !(r.out = fopen(path, "ab"))) rc = kvp_fail(err, KVP_E_IO, "%s: %s", path, strerror(errno));
    if (!rc) {
        r.cells_finished = r.n_done;
        r.t_start = r.t_last_progress = now_s();
        if (!o->quiet)
            fprintf(stderr, "[sweep] %s on %s: %d examples, %d conditions, %d layer cutoffs, %d steps; %ld of %ld cells done\n",
                    o->model_path, r.ds.name, r.ds.n, r.n_conds, r.n_layers, r.n_steps, r.cells_finished, r.cells_total);
        for (int i = 0; i < r.ds.n && !rc; i++) rc = run_example(&r, i);
        progress(&r, r.ds.n, 1);
    }
    if (r.out && fclose(r.out) != 0 && !rc) rc = kvp_fail(err, KVP_E_IO, "%s: close failed", path);
    if (!rc && !o->no_report) rc = kvp_sweep_report(o->out_dir, err);
    free_run(&r);
    return rc;
}
