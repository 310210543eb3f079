/* Throughput under a KV memory cap: how many sequences a KV policy fits in CAP MiB of KV cache,
 * and the tokens/s they decode together (issue 13: "this is where sharing pays").
 *
 *   kv-throughput -m MODEL --prompts FILE [--cap-mib 1024] [--steps 64] [-t N] [--batch 64]
 *                 [--policy SPEC]...            (default: full)
 *
 * FILE: `kvprobe sweep --prompts-only` output (one JSON line per example: ids, seg). For each
 * policy, distinct prompts are admitted in file order, each prefilled and compressed by the
 * policy (scaffold: its upper layers then point at the shared scaffold cache), as long as the
 * KV memory of every admitted sequence and of the scaffold cache (shared pages counted once,
 * kvp_kv_bytes_total) plus the pages their next STEPS tokens will take stays within the cap.
 * Then all of them decode STEPS greedy tokens together (forward passes of up to BATCH rows),
 * timed. Printed per policy: sequences admitted, KV MiB held after decoding (measured; the
 * scaffold cache's share of it, its long filler run sized to the longest user content), decode
 * tokens/s in total and per sequence, and the prefill time. Prompts are never repeated, so no
 * two requests share pages but through the scaffold cache. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvprobe/kvprobe.h"

#define MAX_POLICIES 16

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct prompts {
    kvp_prompt *p;
    int n;
} prompts;

/* seg letters of --prompts-only: s scaffold, y system, u user, a assistant */
static int load_prompts(const char *path, prompts *out) {
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "kv-throughput: %s: cannot open\n", path), -1;
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    while (!rc && getline(&line, &cap, f) > 0) {
        lineno++;
        cJSON *j = cJSON_Parse(line);
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(j, "ids"), *seg = cJSON_GetObjectItemCaseSensitive(j, "seg");
        int n = cJSON_GetArraySize(ids);
        if (!cJSON_IsArray(ids) || !cJSON_IsString(seg) || n < 2 || (int)strlen(seg->valuestring) != n) {
            fprintf(stderr, "kv-throughput: %s:%d: not a --prompts-only line (ids, seg)\n", path, lineno);
            rc = -1;
        } else {
            kvp_prompt *np = realloc(out->p, (size_t)(out->n + 1) * sizeof *np);
            if (!np) rc = -1;
            else {
                out->p = np;
                kvp_prompt *p = &out->p[out->n++];
                memset(p, 0, sizeof *p);
                p->n = n;
                p->ids = malloc((size_t)n * sizeof *p->ids);
                p->seg = malloc((size_t)n);
                if (!p->ids || !p->seg) rc = -1;
                for (int i = 0; i < n && !rc; i++) {
                    p->ids[i] = (int32_t)cJSON_GetArrayItem(ids, i)->valuedouble;
                    char c = seg->valuestring[i];
                    p->seg[i] = c == 's' ? KVP_SEG_SCAFFOLD : c == 'y' ? KVP_SEG_SYSTEM : c == 'a' ? KVP_SEG_ASSISTANT : KVP_SEG_USER;
                }
            }
        }
        cJSON_Delete(j);
    }
    free(line);
    fclose(f);
    return rc;
}

typedef struct seq {
    kvp_kv *kv;
    kvp_policy_run run;
    int32_t next; /* the token fed at the next step */
    int pos;      /* its position */
    int generated;
} seq;

/* Pages the next `steps` tokens of a sequence will add: each (layer, KV head) list appends them
 * after its held slots (kv.h: evicted slots are compacted), 16 to a page. */
static size_t growth_bytes(const kvp_kv *kv, int steps, size_t page_bytes) {
    size_t pages = 0;
    for (int l = 0; l < kvp_kv_n_layer(kv); l++)
        for (int h = 0; h < kvp_kv_n_head_kv(kv); h++) {
            int held = kvp_kv_held(kv, l, h);
            pages += (size_t)((held + steps + 15) / 16 - (held + 15) / 16);
        }
    return pages * page_bytes;
}

static int total_bytes(seq *s, int n, const kvp_kv **donors, int n_donors, size_t *bytes, kvp_error *err) {
    const kvp_kv **all = malloc((size_t)(n + n_donors + 1) * sizeof *all);
    if (!all) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) all[i] = s[i].kv;
    for (int i = 0; i < n_donors; i++) all[n + i] = donors[i];
    int rc = kvp_kv_bytes_total((const kvp_kv *const *)all, n + n_donors, bytes, err);
    free(all);
    return rc;
}

static int run_policy(kvp_model *m, kvp_ctx *ctx, const kvp_tokenizer *tok, const prompts *pr, const kvp_kv_policy *pol,
                      const char *spec, size_t cap, int steps, kvp_error *err) {
    const kvp_hparams *hp = kvp_model_hparams(m);
    int B = kvp_ctx_max_batch(ctx), V = hp->n_vocab, n = 0, n_donors = 0, rc = 0;
    seq *s = calloc((size_t)pr->n, sizeof *s);
    const kvp_kv **donors = calloc((size_t)pr->n, sizeof *donors);
    float *logits = malloc((size_t)B * V * sizeof *logits);
    kvp_row *rows = malloc((size_t)B * sizeof *rows);
    kvp_scaffold *sc = NULL;
    if (!s || !donors || !logits || !rows) rc = kvp_fail(err, KVP_E_NOMEM, "out of memory");
    /* the scaffold cache's long filler run covers the longest user content (kvp_scaffold_new) */
    int max_user = 0;
    for (int i = 0; i < pr->n; i++)
        for (int a = 0, b; a < pr->p[i].n; a = b) {
            for (b = a; b < pr->p[i].n && pr->p[i].seg[b] == pr->p[i].seg[a]; b++) {}
            if (pr->p[i].seg[a] == KVP_SEG_USER && b - a > max_user) max_user = b - a;
        }
    if (!rc && pol->kind == KVP_POLICY_SCAFFOLD && !(sc = kvp_scaffold_new(m, ctx, tok, NULL, max_user, pol->layer_from, KVP_KV_F32, err)))
        rc = err->code;
    size_t held = 0, growth = 0, page_bytes = 0;
    double t0 = now_s();
    /* admission: each prompt prefilled under the policy, kept if the cap still holds */
    for (int i = 0; i < pr->n && !rc; i++) {
        const kvp_prompt *p = &pr->p[i];
        seq *q = &s[n];
        if (!(q->kv = kvp_kv_new(m, p->n + steps + 1, KVP_KV_F32, err))) {
            rc = err->code;
            break;
        }
        q->run = (kvp_policy_run){pol, ctx, q->kv, p, sc, 0};
        if ((rc = kvp_policy_prefill(&q->run, err)) || (rc = kvp_policy_step(&q->run, 0, err))) break;
        const kvp_kv *d = NULL;
        if (sc && !(d = kvp_scaffold_donor(sc, p, err))) { /* (already computed: the policy step used it) */
            rc = err->code;
            break;
        }
        int dup = 0;
        for (int k = 0; k < n_donors; k++) dup |= donors[k] == d;
        if (d && !dup) donors[n_donors++] = d;
        kvp_kv_mem mem;
        kvp_kv_memory(q->kv, &mem);
        page_bytes = mem.page_bytes;
        size_t now;
        if ((rc = total_bytes(s, n + 1, donors, n_donors, &now, err))) break;
        size_t g = growth + growth_bytes(q->kv, steps, page_bytes);
        if (now + g > cap) { /* does not fit: the last admitted set stands */
            kvp_kv_free(q->kv);
            q->kv = NULL;
            break;
        }
        held = now, growth = g;
        q->next = p->ids[p->n - 1];
        q->pos = p->n - 1;
        n++;
    }
    double t_prefill = now_s() - t0, t_dec = 0;
    /* decoding: every sequence one token per step, BATCH rows per forward pass */
    t0 = now_s();
    for (int step = 0; step < steps && !rc && n; step++)
        for (int i0 = 0; i0 < n && !rc; i0 += B) {
            int k = n - i0 < B ? n - i0 : B;
            for (int j = 0; j < k && !rc; j++) {
                seq *q = &s[i0 + j];
                rc = kvp_policy_step(&q->run, q->generated, err);
                rows[j] = (kvp_row){q->next, q->pos, q->kv, logits + (size_t)j * V};
            }
            if (!rc) rc = kvp_forward(ctx, rows, k, err);
            for (int j = 0; j < k && !rc; j++) {
                seq *q = &s[i0 + j];
                q->next = kvp_argmax(logits + (size_t)j * V, V);
                q->pos++, q->generated++;
            }
        }
    t_dec = now_s() - t0;
    size_t after = 0, shared = 0;
    if (!rc && n) rc = total_bytes(s, n, donors, n_donors, &after, err);
    if (!rc && sc) rc = kvp_scaffold_bytes(sc, &shared, err);
    if (!rc)
        printf("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.2f | %.1f |\n", spec, n, held / 1048576.0, after / 1048576.0,
               shared / 1048576.0, t_dec > 0 ? (double)n * steps / t_dec : 0, t_dec > 0 ? steps / t_dec : 0, t_prefill);
    fflush(stdout);
    for (int i = 0; i < n; i++) kvp_kv_free(s[i].kv);
    kvp_scaffold_free(sc);
    free(s);
    free(donors);
    free(logits);
    free(rows);
    return rc;
}

int main(int argc, char **argv) {
    const char *model = NULL, *pfile = NULL, *specs[MAX_POLICIES];
    int n_specs = 0, steps = 64, threads = 0, batch = 64;
    double cap_mib = 1024;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return fprintf(stderr, "kv-throughput: %s needs a value\n", a), 1;
        i++;
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "--prompts")) pfile = v;
        else if (!strcmp(a, "--cap-mib")) cap_mib = atof(v);
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "-t")) threads = atoi(v);
        else if (!strcmp(a, "--batch")) batch = atoi(v);
        else if (!strcmp(a, "--policy") && n_specs < MAX_POLICIES) specs[n_specs++] = v;
        else return fprintf(stderr, "kv-throughput: unknown option %s\n", a), 1;
    }
    if (!model || !pfile || steps < 1 || batch < 1 || cap_mib <= 0) {
        fprintf(stderr, "usage: kv-throughput -m MODEL --prompts FILE [--cap-mib MiB] [--steps N] [-t N] [--batch N] [--policy SPEC]...\n");
        return 1;
    }
    if (!n_specs) specs[n_specs++] = "full";
    kvp_error err = {0};
    prompts pr = {0};
    kvp_model *m = kvp_model_load(model, &err);
    kvp_tokenizer *tok = m ? kvp_tokenizer_load(kvp_model_gguf(m), &err) : NULL;
    kvp_ctx_params cp = {threads, batch, KVP_PREC_Q8X2, 0, NULL};
    kvp_ctx *ctx = tok ? kvp_ctx_new(m, &cp, &err) : NULL;
    int rc = !ctx || load_prompts(pfile, &pr);
    if (!rc) {
        printf("%s, %d prompts, cap %.0f MiB of KV (f32), %d decode steps, %d threads, q8x2\n\n", model, pr.n, cap_mib, steps,
               kvp_ctx_threads(ctx));
        printf("| policy | sequences | KV MiB admitted | KV MiB after decoding | of it, scaffold cache | decode tok/s (all) | "
               "tok/s per sequence | prefill s |\n|---|---|---|---|---|---|---|---|\n");
    }
    for (int i = 0; i < n_specs && !rc; i++) {
        kvp_kv_policy pol;
        rc = kvp_kv_policy_parse(specs[i], &pol, &err) ||
             run_policy(m, ctx, tok, &pr, &pol, specs[i], (size_t)(cap_mib * 1048576.0), steps, &err);
    }
    if (err.code) fprintf(stderr, "kv-throughput: %s\n", err.msg);
    for (int i = 0; i < pr.n; i++) free(pr.p[i].ids), free(pr.p[i].seg);
    free(pr.p);
    kvp_ctx_free(ctx);
    kvp_tokenizer_free(tok);
    kvp_model_free(m);
    return rc ? 1 : 0;
}
