/* Real models (make models): greedy continuations of a fixed prompt agree with Hugging Face
 * transformers loading the same GGUF (dequantized to fp32; tools/make_real_goldens.py) on
 * the first 32 tokens, logits are close, and our tokenizer produces HF's prompt ids. */
#include <stdint.h>

#include "golden.h"
#include "harness.h"
#include "kvprobe/kvprobe.h"

/* Tolerance on |delta logit| for the real quantized models: the reference runs in fp32 on
 * the same dequantized weights, so differences come only from fp32 summation order over
 * 576..2048-wide dot products and 18-30 layers (logits reach ~25). */
#define TOL 1e-3
/* The fast path rounds every matmul input to 8 bits per 32-element block (relative step up
 * to 1/254), 18-30 layers deep: measured max |delta| 0.51 / 0.96 (Gemma / SmolLM2, logits
 * up to ~25), greedy flips only where the reference's top-2 gap is below 0.25. */
#define TOL_FAST 1.5
#define TIE_FAST 0.5
/* q8x2 rounds 254x finer (max |x| / 64516 per block): measured max |delta| below 0.01 on every
 * real model, no greedy flip. */
#define TOL_Q8X2 0.05
#define TIE_Q8X2 0.05

typedef struct real_case {
    const char *model, *golden, *name;
    int optional; /* fetched only by `make models MODELS=all`: skipped (and said so) when absent */
} real_case;

static const real_case CASES[] = {
    {"models/gemma-3-270m-q4_k_m.gguf", "tests/golden/real-gemma3-270m.ref.gguf", "gemma3-270m Q4_K_M", 0},
    {"models/SmolLM2-135M-Instruct.Q4_1.gguf", "tests/golden/real-smollm2-135m.ref.gguf", "smollm2-135m Q4_1", 0},
    {"models/qwen2.5-coder-0.5b-instruct.gguf", "tests/golden/real-qwen2.5-coder-0.5b.ref.gguf",
     "qwen2.5-coder-0.5b-instruct", 0},
    {"models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "tests/golden/real-qwen2.5-coder-1.5b.ref.gguf",
     "qwen2.5-coder-1.5b-instruct Q4_K_M", 1},
};

/* Prefill HF's prompt, then feed HF's tokens (so errors cannot compound) and compare the
 * logits at step 0 (full vocabulary) and the reference top-K at each of the 32 steps (8 at
 * the quick scale). */
static void compare(const real_case *rc, kvp_model *m, const int32_t *prompt, int n_prompt, const int32_t *gen, int n_gen,
                    const gguf_tensor *l0, const gguf_tensor *tid, const gguf_tensor *tlg, const gguf_tensor *gap,
                    kvp_precision prec, int emulate, double tol, double tie) {
    kvp_error err = {0};
    int V = kvp_model_hparams(m)->n_vocab, K = (int)tid->ne[0];
    kvp_ctx_params cp = {0, 64, prec, emulate, NULL};
    kvp_ctx *c = kvp_ctx_new(m, &cp, &err);
    kvp_kv *kv = kvp_kv_new(m, n_prompt + n_gen, KVP_KV_F32, &err);
    float *lg = malloc((size_t)V * sizeof(float));
    double d0 = 0, dtop = 0;
    int disagree = 0, near_ties = 0;
    int steps = test_quick() ? 8 : n_gen; /* quick scale: the first 8 of the 32 steps */
    CHECK(kvp_decode(c, kv, prompt, n_prompt, NULL, lg, &err) == 0, "%s", err.msg);
    for (int i = 0; i < V; i++) d0 = fmax(d0, fabs(lg[i] - ((const float *)l0->data)[i]));
    for (int s = 0; s < steps; s++) {
        if (s > 0) kvp_decode(c, kv, &gen[s - 1], 1, NULL, lg, &err);
        const int32_t *ti = (const int32_t *)tid->data + (size_t)s * K;
        const float *tl = (const float *)tlg->data + (size_t)s * K;
        for (int k = 0; k < K; k++) dtop = fmax(dtop, fabs(lg[ti[k]] - tl[k]));
        if (kvp_argmax(lg, V) != gen[s]) {
            float g_s = ((const float *)gap->data)[s];
            /* A disagreement is only excusable where the reference itself has a near-tie. */
            if (g_s < tie) near_ties++;
            else disagree++;
            NOTE("step %d: kvprobe %d, transformers %d (reference top-2 gap %.4f)", s, kvp_argmax(lg, V), gen[s], g_s);
        }
    }
    CHECK(d0 <= tol, "first-step max |delta logit| %.3g", d0);
    CHECK(dtop <= tol, "top-%d logits max |delta| %.3g", K, dtop);
    CHECK(disagree == 0, "%d greedy tokens differ outside near-ties", disagree);
    NOTE("%s, %s (%s): max |delta logit| %.3g (full vocabulary, step 0), %.3g (reference top-%d, %d steps); "
         "greedy agreement %d/%d (%d near-tie flips)", rc->name, kvp_precision_name(prec),
         prec == KVP_PREC_F32 ? "f32 kernels" : emulate ? "emulated in f32" : kvp_qdot_isa(), d0, dtop, K, steps,
         steps - disagree - near_ties, steps, near_ties);
    free(lg);
    kvp_kv_free(kv);
    kvp_ctx_free(c);
}

/* The logits of the prompt's prefill, of 20 tokens in one batch (every row: the packed and AMX
 * tiles) and of 4 single-row steps (the decode kernel) with kernel variant k: VARIANT_ROWS rows. */
#define VARIANT_ROWS (1 + 20 + 4)
static int variant_logits(kvp_model *m, const kvp_qkernels *k, kvp_precision prec, const int32_t *prompt, int n_prompt,
                          const int32_t *gen, float *out, kvp_error *err) {
    int V = kvp_model_hparams(m)->n_vocab, rc;
    kvp_ctx_params cp = {1, 64, prec, 0, k->name};
    kvp_ctx *c = kvp_ctx_new(m, &cp, err);
    kvp_kv *kv = c ? kvp_kv_new(m, n_prompt + 32, KVP_KV_F32, err) : NULL;
    rc = !kv || kvp_decode(c, kv, prompt, n_prompt, NULL, out, err) || kvp_decode(c, kv, gen, 20, out + V, NULL, err);
    for (int s = 0; s < 4 && !rc; s++) rc = kvp_decode(c, kv, &gen[20 + s], 1, NULL, out + (size_t)(21 + s) * V, err);
    kvp_kv_free(kv);
    kvp_ctx_free(c);
    return rc;
}

/* Every kernel variant this CPU runs computes the same bits (kvp_qkernels). At the quick scale
 * (sanitizers, the other builds) on the smallest model only. */
static void check_variants(const real_case *rc, kvp_model *m, const int32_t *prompt, int n_prompt, const int32_t *gen) {
    if (test_quick() && !strstr(rc->name, "smollm2")) {
        NOTE("%s: kernel variants compared at the full scale only", rc->name);
        return;
    }
    const kvp_qkernels *ks[8];
    int nk = kvp_qkernels_available(ks, 8), V = kvp_model_hparams(m)->n_vocab;
    size_t n = (size_t)VARIANT_ROWS * V;
    float *ref = malloc(n * sizeof *ref), *lg = malloc(n * sizeof *lg);
    kvp_error err = {0};
    char names[160] = "";
    for (int i = 0; i < nk; i++) snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", ks[i]->name);
    /* The same model in the file's layout (no load-time repack, KVPROBE_REPACK=0), where the
     * engine repacks some of its weights (kvp_repack_type). */
    setenv("KVPROBE_REPACK", "0", 1);
    kvp_model *file_layout = kvp_model_load(rc->model, &err);
    unsetenv("KVPROBE_REPACK");
    CHECK(file_layout != NULL, "%s", err.msg);
    for (int p = KVP_PREC_Q8; p <= KVP_PREC_Q8X2 && ref && lg; p++) {
        CHECK(variant_logits(m, ks[0], (kvp_precision)p, prompt, n_prompt, gen, ref, &err) == 0, "%s", err.msg);
        for (int i = 1; i < nk && !err.code; i++) {
            CHECK(variant_logits(m, ks[i], (kvp_precision)p, prompt, n_prompt, gen, lg, &err) == 0, "%s", err.msg);
            CHECK(!memcmp(ref, lg, n * sizeof *lg), "%s %s: logits differ from %s's", kvp_precision_name((kvp_precision)p),
                  ks[i]->name, ks[0]->name);
        }
        if (file_layout && !err.code) {
            CHECK(variant_logits(file_layout, ks[0], (kvp_precision)p, prompt, n_prompt, gen, lg, &err) == 0, "%s", err.msg);
            CHECK(!memcmp(ref, lg, n * sizeof *lg), "%s: logits differ without the load-time repack",
                  kvp_precision_name((kvp_precision)p));
        }
    }
    kvp_model_free(file_layout);
    NOTE("%s: kernel variants %s give bit-identical logits, and so does the file's weight layout (q8, q8x2; a "
         "%d-token prefill, a 20-token batch, 4 decode steps)", rc->name, names, n_prompt);
    free(ref);
    free(lg);
}

static void run_case(const real_case *rc) {
    char title[160];
    kvp_error err = {0};
    kvp_model *m = NULL;
    gguf_file *g = NULL;
    int32_t *prompt = NULL, *gen = NULL, *ids = NULL;
    int n_prompt = 0, n_gen = 0, n_ids = 0;
    if (rc->optional && !file_exists(rc->model)) {
        NOTE("skipped %s: %s is fetched by 'make models MODELS=all'", rc->name, rc->model);
        return;
    }
    snprintf(title, sizeof title, "real %s: model and golden load", rc->name);
    TEST(title) {
        CHECK(file_exists(rc->model), "%s missing: run 'make models'", rc->model);
        m = kvp_model_load(rc->model, &err);
        CHECK(m != NULL, "%s", err.msg);
        g = gguf_open(rc->golden, &err);
        CHECK(g != NULL, "%s", err.msg);
        if (g) {
            prompt = golden_int_array(g, "ref.prompt_tokens", &n_prompt);
            gen = golden_int_array(g, "ref.generated_tokens", &n_gen);
            CHECK(prompt && gen && n_gen == 32, "golden arrays");
        }
    }
    if (!m || !g || !prompt || !gen) goto out;
    const kvp_hparams *hp = kvp_model_hparams(m);
    int V = hp->n_vocab;
    const gguf_tensor *l0 = gguf_find_tensor(g, "logits0"), *tid = gguf_find_tensor(g, "top_ids"),
                      *tlg = gguf_find_tensor(g, "top_logits"), *gap = gguf_find_tensor(g, "top_gap");

    snprintf(title, sizeof title, "real %s: tokenizer gives HF's prompt ids", rc->name);
    TEST(title) {
        kvp_tokenizer *t = kvp_tokenizer_load(kvp_model_gguf(m), &err);
        CHECK(t != NULL, "%s", err.msg);
        uint64_t chat = 0;
        char *text = golden_string(g, "ref.prompt_text");
        gguf_get_u64(g, "ref.chat", &chat, &err); /* absent in the raw-prompt goldens: 0 */
        CHECK(text != NULL, "ref.prompt_text");
        if (t && text && chat) { /* a user turn in the GGUF's own chat template */
            kvp_template tm;
            kvp_prompt p;
            kvp_message msg = {"user", text};
            CHECK(!kvp_template_detect(kvp_model_gguf(m), &tm, &err) && !kvp_chat_prompt(t, &tm, &msg, 1, 1, &p, &err),
                  "%s", err.msg);
            if (!err.code) {
                CHECK(p.n == n_prompt && !memcmp(p.ids, prompt, (size_t)p.n * sizeof *p.ids),
                      "chat prompt ids differ (%d vs %d tokens)", p.n, n_prompt);
                kvp_prompt_free(&p);
            }
        } else if (t && text && kvp_tokenize(t, text, strlen(text), kvp_tokenizer_add_bos(t), 0, &ids, &n_ids, &err) == 0) {
            CHECK(n_ids == n_prompt && !memcmp(ids, prompt, (size_t)n_ids * sizeof *ids), "ids differ (%d vs %d tokens)",
                  n_ids, n_prompt);
        }
        free(text);
        kvp_tokenizer_free(t);
    }

    snprintf(title, sizeof title, "real %s: 32 greedy tokens and logits agree with transformers", rc->name);
    TEST(title) {
        CHECK(l0 && tid && tlg && gap && l0->ne[0] == V && tid->ne[1] == n_gen, "golden tensors");
        if (l0 && tid && tlg && gap)
            compare(rc, m, prompt, n_prompt, gen, n_gen, l0, tid, tlg, gap, KVP_PREC_F32, 0, TOL, 2 * TOL);
    }
    snprintf(title, sizeof title, "real %s: fast path (8-bit activations) stays within %.2g of transformers", rc->name,
             TOL_FAST);
    TEST(title) {
        if (l0 && tid && tlg && gap)
            compare(rc, m, prompt, n_prompt, gen, n_gen, l0, tid, tlg, gap, KVP_PREC_Q8, 0, TOL_FAST, TIE_FAST);
    }
    snprintf(title, sizeof title, "real %s: q8x2 (two 8-bit planes) stays within %.2g of transformers", rc->name, TOL_Q8X2);
    TEST(title) {
        if (l0 && tid && tlg && gap)
            compare(rc, m, prompt, n_prompt, gen, n_gen, l0, tid, tlg, gap, KVP_PREC_Q8X2, 0, TOL_Q8X2, TIE_Q8X2);
    }
    snprintf(title, sizeof title, "real %s: every kernel variant this CPU runs gives the same logits, bit for bit", rc->name);
    TEST(title) { check_variants(rc, m, prompt, n_prompt, gen); }
    snprintf(title, sizeof title, "real %s: f32 emulation of the fast path stays within %.2g of transformers", rc->name,
             TOL_FAST);
    TEST(title) {
        if (l0 && tid && tlg && gap)
            compare(rc, m, prompt, n_prompt, gen, n_gen, l0, tid, tlg, gap, KVP_PREC_Q8, 1, TOL_FAST, TIE_FAST);
    }
out:
    free(ids);
    free(prompt);
    free(gen);
    gguf_close(g);
    kvp_model_free(m);
}

int main(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run_case(&CASES[i]);
    return harness_finish();
}
