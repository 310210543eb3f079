/* The KV splice against a transformers reference that edits HF's cache at the same step
 * (tools/make_splice_goldens.py): clean, zero, blank, drop and drop-content over a grid of
 * 3 layer cutoffs x 3 steps on the tiny models of each family. The engine decodes with the
 * reference's tokens (teacher forcing), applies the edit right before step W, and must match
 * the reference logits of steps W..W+7 within the foundation tolerance and agree on every
 * greedy token. Plus: semantics of the mean/noise/other conditions and span selection. */
#include <stdint.h>

#include "golden.h"
#include "harness.h"
#include "kvprobe/kvprobe.h"

#define TOL 1e-3
#define SPAN_LO 4
#define SPAN_HI 20

static const char *ARCHS[] = {"llama", "qwen2", "qwen3", "gemma3"};

static void check_arch(const char *arch) {
    char path[256], title[160];
    kvp_error err = {0};
    snprintf(path, sizeof path, "tests/golden/splice/tiny-%s.splice.gguf", arch);
    gguf_file *g = gguf_open(path, &err);
    snprintf(path, sizeof path, "tests/fixtures/tiny-%s-f32.gguf", arch);
    kvp_model *m = kvp_model_load(path, &err);
    int n_p = 0, n_d = 0;
    int32_t *P = g ? golden_int_array(g, "ref.prompt", &n_p) : NULL, *D = g ? golden_int_array(g, "ref.donor", &n_d) : NULL;
    const gguf_kv *cells = g ? gguf_find_kv(g, "ref.cells") : NULL;
    snprintf(title, sizeof title, "splice %s: every cell matches the transformers reference", arch);
    TEST(title) {
        CHECK(g && m && P && D && cells && n_p == n_d, "inputs: %s", err.msg);
        if (!(g && m && P && D && cells)) continue;
        const kvp_hparams *hp = kvp_model_hparams(m);
        int V = hp->n_vocab, n_cells = (int)cells->value.v.arr.n;
        kvp_ctx_params cp = {2, 32, KVP_PREC_F32, 0, NULL};
        kvp_ctx *c = kvp_ctx_new(m, &cp, &err);
        uint8_t *seg = malloc((size_t)n_p);
        for (int i = 0; i < n_p; i++) seg[i] = i >= SPAN_LO && i < SPAN_HI ? KVP_SEG_USER : KVP_SEG_SCAFFOLD;
        kvp_kv *base = kvp_kv_new(m, n_p + 32, KVP_KV_F32, &err), *donor = kvp_kv_new(m, n_p + 32, KVP_KV_F32, &err);
        kvp_decode(c, base, P, n_p - 1, NULL, NULL, &err);
        kvp_decode(c, donor, D, n_d - 1, NULL, NULL, &err);
        float *lg = malloc((size_t)V * sizeof(float));
        double worst = 0;
        int bad_tokens = 0, checked = 0;
        for (int ci = 0; ci < n_cells; ci++) {
            gguf_str name = cells->value.v.arr.elems[ci].v.s;
            char cname[64], cond[32], key[96];
            snprintf(cname, sizeof cname, "%.*s", (int)name.len, name.ptr);
            int L, W;
            const char *dotL = strstr(cname, ".L");
            if (!dotL || sscanf(dotL, ".L%d.W%d", &L, &W) != 2) continue;
            snprintf(cond, sizeof cond, "%.*s", (int)(dotL - cname), cname);
            kvp_splice sp = {.layer_from = L, .span = KVP_SPAN_ALL_PROMPT, .n_prompt = n_p, .seg = seg, .donor = donor};
            CHECK(kvp_condition_from_name(cond, &sp.cond) == 0, "condition %s", cond);
            snprintf(key, sizeof key, "%s.tokens", cname);
            int n_tok = 0;
            int32_t *tok = golden_int_array(g, key, &n_tok);
            snprintf(key, sizeof key, "%s.logits", cname);
            const gguf_tensor *ref = gguf_find_tensor(g, key);
            if (!tok || !ref || n_tok != W + 8) {
                CHECK(0, "cell %s incomplete", cname);
                free(tok);
                continue;
            }
            kvp_kv *kv = kvp_kv_clone(base, &err);
            double cell_worst = 0;
            for (int w = 0; w < W + 8; w++) {
                if (w == W && kvp_splice_apply(kv, &sp, &err)) CHECK(0, "%s: %s", cname, err.msg);
                int32_t x = w == 0 ? P[n_p - 1] : tok[w - 1];
                kvp_decode(c, kv, &x, 1, NULL, lg, &err);
                if (w >= W) {
                    const float *r = (const float *)ref->data + (size_t)(w - W) * V;
                    for (int i = 0; i < V; i++) cell_worst = fmax(cell_worst, fabs(lg[i] - r[i]));
                }
                if (kvp_argmax(lg, V) != tok[w]) bad_tokens++;
            }
            checked++;
            if (cell_worst > TOL) NOTE("%s: max |delta logit| %.3g", cname, cell_worst);
            worst = fmax(worst, cell_worst);
            kvp_kv_free(kv);
            free(tok);
        }
        CHECK(worst <= TOL, "max |delta logit| %.3g", worst);
        CHECK(bad_tokens == 0, "%d greedy tokens differ", bad_tokens);
        CHECK(checked >= 3 * 3 * 4, "only %d cells", checked);
        NOTE("%s: %d cells (clean, zero, blank, drop, drop-content x 3 L x 3 W), max |delta logit| %.3g, "
             "greedy tokens identical", arch, checked, worst);
        free(lg);
        free(seg);
        kvp_kv_free(base);
        kvp_kv_free(donor);
        kvp_ctx_free(c);
    }
    free(P);
    free(D);
    gguf_close(g);
    kvp_model_free(m);
}

/* Semantics of the conditions without a transformers counterpart. */
static void check_semantics(void) {
    kvp_error err = {0};
    kvp_model *m = kvp_model_load("tests/fixtures/tiny-qwen3-f32.gguf", &err);
    kvp_ctx_params cp = {1, 32, KVP_PREC_F32, 0, NULL};
    kvp_ctx *c = m ? kvp_ctx_new(m, &cp, &err) : NULL;
    const int n = 12;
    int32_t P[12] = {5, 17, 300, 42, 99, 7, 250, 8, 13, 77, 501, 3};
    uint8_t seg[12] = {0, 0, 0, 2, 2, 2, 2, 2, 0, 0, 0, 0};
    TEST("splice: mean sets every span slot to the span's mean; noise matches mean and std, seeded") {
        CHECK(c != NULL, "%s", err.msg);
        if (!c) continue;
        kvp_kv *kv = kvp_kv_new(m, 32, KVP_KV_F32, &err);
        kvp_decode(c, kv, P, n - 1, NULL, NULL, &err);
        int row = kvp_kv_row_size(kv, KVP_K), L = kvp_kv_n_layer(kv);
        float *before = malloc((size_t)n * row * sizeof(float)), *after = malloc((size_t)n * row * sizeof(float));
        kvp_kv *a = kvp_kv_clone(kv, &err), *b = kvp_kv_clone(kv, &err), *b2 = kvp_kv_clone(kv, &err);
        kvp_splice sp = {.cond = KVP_COND_MEAN, .layer_from = 1, .span = KVP_SPAN_USER_CONTENT, .n_prompt = n, .seg = seg};
        CHECK(kvp_splice_apply(a, &sp, &err) == 0, "%s", err.msg);
        kvp_kv_read(kv, KVP_K, 2, 3, 0, n - 1, before, &err);
        kvp_kv_read(a, KVP_K, 2, 3, 0, n - 1, after, &err);
        int ok = 1;
        for (int d = 0; d < row; d++) {
            double mean = 0;
            for (int p = 3; p < 8; p++) mean += before[p * row + d] / 5.0;
            for (int p = 0; p < n - 1; p++) {
                float want = (p >= 3 && p < 8) ? (float)mean : before[p * row + d];
                ok &= fabsf(after[p * row + d] - want) < 1e-5f;
            }
        }
        CHECK(ok, "mean condition wrote the wrong values");
        kvp_kv_read(kv, KVP_K, 0, 1, 0, n - 1, before, &err);
        kvp_kv_read(a, KVP_K, 0, 1, 0, n - 1, after, &err);
        CHECK(!memcmp(before, after, (size_t)(n - 1) * row * sizeof(float)), "layer 0 < L was edited");
        sp.cond = KVP_COND_NOISE;
        sp.seed = 42;
        kvp_splice_apply(b, &sp, &err);
        kvp_splice_apply(b2, &sp, &err);
        size_t all = (size_t)L * (n - 1) * (row + kvp_kv_row_size(kv, KVP_V));
        float *x = malloc(all * sizeof(float)), *y = malloc(all * sizeof(float));
        kvp_kv_read(b, KVP_KV_BOTH, 0, L, 0, n - 1, x, &err);
        kvp_kv_read(b2, KVP_KV_BOTH, 0, L, 0, n - 1, y, &err);
        CHECK(!memcmp(x, y, all * sizeof(float)), "same seed, different noise");
        /* noise keeps the span's per-dimension mean and std (5 samples: loose bounds) */
        kvp_kv_read(kv, KVP_K, 0, L, 0, n - 1, x, &err);
        kvp_kv_read(b, KVP_K, 0, L, 0, n - 1, y, &err);
        int changed = 0, kept = 1;
        for (int l = 0; l < L; l++)
            for (int p = 0; p < n - 1; p++)
                for (int d = 0; d < row; d++) {
                    size_t i = ((size_t)l * (n - 1) + p) * row + d;
                    int in_span = l >= 1 && p >= 3 && p < 8;
                    if (in_span) changed += x[i] != y[i];
                    else kept &= x[i] == y[i];
                }
        CHECK(changed > 0 && kept, "noise edited %d span values, outside span untouched %d", changed, kept);
        free(x);
        free(y);
        free(before);
        free(after);
        kvp_kv_free(a);
        kvp_kv_free(b);
        kvp_kv_free(b2);
        kvp_kv_free(kv);
    }
    TEST("splice: span selection, last prompt token never edited, bad inputs rejected") {
        uint8_t mask[12];
        kvp_splice sp = {.cond = KVP_COND_ZERO, .span = KVP_SPAN_SCAFFOLD, .n_prompt = n, .seg = seg};
        kvp_splice_positions(&sp, mask);
        CHECK(mask[0] && !mask[3] && mask[8] && mask[10] && !mask[11], "scaffold span");
        sp.span = KVP_SPAN_ALL_PROMPT;
        kvp_splice_positions(&sp, mask);
        CHECK(mask[0] && mask[5] && mask[10] && !mask[11], "all-prompt span");
        sp.cond = KVP_COND_DROP_CONTENT;
        kvp_splice_positions(&sp, mask);
        CHECK(!mask[0] && mask[3] && mask[7] && !mask[8], "drop-content ignores --span");
        sp.keep_recent = 5; /* positions 6..10 stay: user content 3..5 edited */
        kvp_splice_positions(&sp, mask);
        CHECK(mask[3] && mask[5] && !mask[6] && !mask[7], "drop-content with a recent window");
        sp.cond = KVP_COND_ZERO;
        kvp_splice_positions(&sp, mask);
        CHECK(mask[0] && mask[5] && !mask[6] && !mask[10] && !mask[11], "all-prompt with a recent window");
        sp.keep_recent = 100;
        kvp_splice_positions(&sp, mask);
        CHECK(!memchr(mask, 1, (size_t)n), "a window longer than the span edits nothing");
        sp.keep_recent = 0;
        if (!c) continue;
        kvp_kv *kv = kvp_kv_new(m, 32, KVP_KV_F32, &err);
        kvp_decode(c, kv, P, 4, NULL, NULL, &err);
        kvp_splice bad = {.cond = KVP_COND_ZERO, .n_prompt = n, .seg = seg};
        CHECK(kvp_splice_apply(kv, &bad, &err) != 0 && strstr(err.msg, "cache holds"), "prompt longer than cache: %s", err.msg);
        kvp_splice nodonor = {.cond = KVP_COND_BLANK, .n_prompt = 4, .seg = seg};
        CHECK(kvp_splice_apply(kv, &nodonor, &err) != 0 && strstr(err.msg, "donor"), "blank without donor: %s", err.msg);
        kvp_kv_free(kv);
    }
    kvp_ctx_free(c);
    kvp_model_free(m);
}

int main(void) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++) check_arch(ARCHS[i]);
    check_semantics();
    return harness_finish();
}
