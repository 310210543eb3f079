/* The editable KV cache: fork, truncate, range read/write/fill/copy, eviction flags, and
 * sliding-window layers that stay editable per position. Uses the tiny gemma3 fixture
 * (window 8; layers 0-4 and 6 sliding, 5 global). */
#include <stdint.h>

#include "harness.h"
#include "kvprobe/kvprobe.h"

#define N_PROMPT 20

static kvp_model *M;
static kvp_ctx *C;
static int V;
static const int32_t PROMPT[N_PROMPT] = {5, 17, 300, 42, 99, 7, 250, 8, 13, 77, 501, 3, 64, 128, 200, 9, 11, 400, 33, 21};

static kvp_kv *prefill(int n, kvp_kv_type t, float *logits) {
    kvp_error err = {0};
    kvp_kv *kv = kvp_kv_new(M, 64, t, &err);
    if (!kv || kvp_decode(C, kv, PROMPT, n, NULL, logits, &err)) {
        NOTE("prefill: %s", err.msg);
        kvp_kv_free(kv);
        return NULL;
    }
    return kv;
}

static int next_logits(kvp_kv *kv, int32_t tok, float *out) {
    kvp_error err = {0};
    int rc = kvp_decode(C, kv, &tok, 1, NULL, out, &err);
    if (rc) NOTE("decode: %s", err.msg);
    return rc;
}

static int same(const float *a, const float *b) { return memcmp(a, b, (size_t)V * sizeof(float)) == 0; }

int main(void) {
    kvp_error err = {0};
    M = kvp_model_load("tests/fixtures/tiny-gemma3-f32.gguf", &err);
    if (!M) {
        printf("not ok - load tiny gemma3: %s\n", err.msg);
        return 1;
    }
    kvp_ctx_params cp = {.n_threads = 2, .max_batch = 16};
    C = kvp_ctx_new(M, &cp, &err);
    const kvp_hparams *hp = kvp_model_hparams(M);
    V = hp->n_vocab;
    float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float)),
          *c = malloc((size_t)V * sizeof(float));
    int L = hp->n_layer;

    TEST("kv: a clone continues exactly like the original") {
        kvp_kv *kv = prefill(N_PROMPT, KVP_KV_F32, a);
        kvp_kv *fork = kvp_kv_clone(kv, &err);
        CHECK(fork && kvp_kv_len(fork) == N_PROMPT, "clone");
        next_logits(kv, 42, a);
        next_logits(fork, 42, b);
        CHECK(same(a, b), "fork diverged");
        kvp_kv_free(kv);
        kvp_kv_free(fork);
    }

    TEST("kv: truncate then re-decode reproduces the logits bit for bit") {
        kvp_kv *kv = prefill(N_PROMPT, KVP_KV_F32, a);
        CHECK(kvp_kv_truncate(kv, 12, &err) == 0 && kvp_kv_len(kv) == 12, "truncate");
        CHECK(kvp_decode(C, kv, PROMPT + 12, N_PROMPT - 12, NULL, b, &err) == 0, "%s", err.msg);
        CHECK(same(a, b), "logits differ after truncate + re-decode");
        CHECK(kvp_kv_truncate(kv, N_PROMPT + 1, &err) != 0, "truncate beyond length accepted");
        kvp_kv_free(kv);
    }

    TEST("kv: read/write round-trip, zero fill changes logits, restore is exact") {
        kvp_kv *kv = prefill(N_PROMPT, KVP_KV_F32, NULL);
        kvp_kv *ref = kvp_kv_clone(kv, &err);
        int kr = kvp_kv_row_size(kv, KVP_K), vr = kvp_kv_row_size(kv, KVP_V);
        int l0 = 2, l1 = L, p0 = 1, p1 = N_PROMPT - 1;
        size_t nk = (size_t)(l1 - l0) * (p1 - p0) * kr, nv = (size_t)(l1 - l0) * (p1 - p0) * vr;
        float *save = malloc((nk + nv) * sizeof(float)), *again = malloc((nk + nv) * sizeof(float));
        CHECK(kvp_kv_read(kv, KVP_KV_BOTH, l0, l1, p0, p1, save, &err) == 0, "%s", err.msg);
        double norm = 0;
        for (size_t i = 0; i < nk + nv; i++) norm += fabs(save[i]);
        CHECK(norm > 0, "cache empty");
        next_logits(ref, 42, a);
        CHECK(kvp_kv_fill(kv, KVP_KV_BOTH, l0, l1, p0, p1, 0.0f, &err) == 0, "%s", err.msg);
        CHECK(kvp_kv_read(kv, KVP_K, l0, l1, p0, p1, again, &err) == 0 && again[0] == 0 && again[nk - 1] == 0, "fill");
        kvp_kv *zeroed = kvp_kv_clone(kv, &err);
        next_logits(zeroed, 42, b);
        CHECK(!same(a, b), "zeroing K/V at layers >= 2 left the logits unchanged");
        CHECK(kvp_kv_write(kv, KVP_KV_BOTH, l0, l1, p0, p1, save, &err) == 0, "%s", err.msg);
        next_logits(kv, 42, c);
        CHECK(same(a, c), "restoring the saved K/V did not restore the logits");
        CHECK(kvp_kv_read(kv, KVP_KV_BOTH, 0, L + 1, 0, 1, save, &err) != 0, "layer range past the end accepted");
        CHECK(kvp_kv_read(kv, KVP_KV_BOTH, 0, 1, 0, 100, save, &err) != 0, "position range past the length accepted");
        free(save);
        free(again);
        kvp_kv_free(kv);
        kvp_kv_free(ref);
        kvp_kv_free(zeroed);
    }

    TEST("kv: copy_range splices a donor's slots; splicing the cache into itself is a no-op") {
        kvp_kv *kv = prefill(N_PROMPT, KVP_KV_F32, NULL);
        kvp_kv *same_kv = kvp_kv_clone(kv, &err);
        kvp_error e2 = {0};
        kvp_kv *donor = kvp_kv_new(M, 64, KVP_KV_F32, &e2);
        int32_t other[N_PROMPT];
        for (int i = 0; i < N_PROMPT; i++) other[i] = (PROMPT[i] * 7 + 3) % V;
        kvp_decode(C, donor, other, N_PROMPT, NULL, NULL, &e2);
        CHECK(kvp_kv_copy_range(same_kv, kv, KVP_KV_BOTH, 0, L, 0, N_PROMPT, &err) == 0, "%s", err.msg);
        next_logits(kv, 42, a);
        next_logits(same_kv, 42, b);
        CHECK(same(a, b), "self splice changed logits");
        kvp_kv_truncate(kv, N_PROMPT, &err);
        CHECK(kvp_kv_copy_range(kv, donor, KVP_KV_BOTH, 3, L, 0, N_PROMPT - 1, &err) == 0, "%s", err.msg);
        next_logits(kv, 42, c);
        CHECK(!same(a, c), "donor splice left logits unchanged");
        float x[256], y[256];
        int vr = kvp_kv_row_size(kv, KVP_V);
        CHECK(vr <= 256, "row");
        kvp_kv_read(kv, KVP_V, 4, 5, 5, 6, x, &err);
        kvp_kv_read(donor, KVP_V, 4, 5, 5, 6, y, &err);
        CHECK(memcmp(x, y, (size_t)vr * sizeof(float)) == 0, "spliced slot differs from donor");
        kvp_kv_free(kv);
        kvp_kv_free(same_kv);
        kvp_kv_free(donor);
    }

    TEST("kv: evicted slots are skipped by attention and re-activation restores exactly") {
        kvp_kv *kv = prefill(N_PROMPT, KVP_KV_F32, NULL);
        kvp_kv *ev = kvp_kv_clone(kv, &err);
        CHECK(kvp_kv_set_active(ev, 0, L, 16, 19, 0, &err) == 0, "%s", err.msg);
        CHECK(!kvp_kv_is_active(ev, 3, 17) && kvp_kv_is_active(ev, 3, 19), "flags");
        kvp_kv *ev2 = kvp_kv_clone(ev, &err);
        next_logits(kv, 42, a);
        next_logits(ev, 42, b);
        CHECK(!same(a, b), "evicting 3 recent slots changed nothing");
        CHECK(kvp_kv_set_active(ev2, 0, L, 16, 19, 1, &err) == 0, "%s", err.msg);
        next_logits(ev2, 42, c);
        CHECK(same(a, c), "re-activation did not restore");
        kvp_kv_free(kv);
        kvp_kv_free(ev);
        kvp_kv_free(ev2);
    }

    TEST("kv: sliding-window layers keep every position editable; edits outside the window are invisible") {
        kvp_kv *kv = prefill(N_PROMPT, KVP_KV_F32, NULL);
        CHECK(hp->sliding_window == 8 && hp->layer_is_swa[0] && !hp->layer_is_swa[5], "fixture layout");
        float slot[256];
        int kr = kvp_kv_row_size(kv, KVP_K);
        CHECK(kr <= 256, "row");
        kvp_kv_read(kv, KVP_K, 0, 1, 0, 1, slot, &err);
        double norm = 0;
        for (int i = 0; i < kr; i++) norm += fabs(slot[i]);
        CHECK(norm > 0, "position 0 of a sliding layer was not kept");
        kvp_kv *ref = kvp_kv_clone(kv, &err), *glob = kvp_kv_clone(kv, &err);
        /* Next token sits at position 20: window covers 13..20. Position 2 is outside. */
        CHECK(kvp_kv_fill(kv, KVP_KV_BOTH, 0, 5, 2, 3, 0.0f, &err) == 0, "%s", err.msg); /* sliding layers only */
        CHECK(kvp_kv_fill(glob, KVP_KV_BOTH, 5, 6, 2, 3, 0.0f, &err) == 0, "%s", err.msg); /* global layer */
        next_logits(ref, 42, a);
        next_logits(kv, 42, b);
        next_logits(glob, 42, c);
        CHECK(same(a, b), "an edit outside the sliding window changed the logits");
        CHECK(!same(a, c), "an edit on the global layer changed nothing");
        kvp_kv_free(kv);
        kvp_kv_free(ref);
        kvp_kv_free(glob);
    }

    TEST("kv: f16 cache stores rounded values and reads them back") {
        kvp_kv *kv = prefill(N_PROMPT, KVP_KV_F16, NULL);
        float in[64], out[64];
        int kr = kvp_kv_row_size(kv, KVP_K);
        CHECK(kr <= 64, "row");
        for (int i = 0; i < kr; i++) in[i] = 0.1f * (float)i - 1.0f;
        kvp_kv_write(kv, KVP_K, 1, 2, 3, 4, in, &err);
        kvp_kv_read(kv, KVP_K, 1, 2, 3, 4, out, &err);
        int ok = 1;
        for (int i = 0; i < kr; i++) ok &= out[i] == kvp_fp16_to_f32(kvp_f32_to_fp16(in[i]));
        CHECK(ok, "f16 round trip");
        CHECK(kvp_kv_dtype(kv) == KVP_KV_F16, "dtype");
        kvp_kv_free(kv);
    }

    TEST("forward: rows of several caches in one batch equal separate calls") {
        kvp_kv *k1 = prefill(N_PROMPT, KVP_KV_F32, NULL), *k2 = prefill(N_PROMPT - 5, KVP_KV_F32, NULL);
        kvp_kv *r1 = kvp_kv_clone(k1, &err), *r2 = kvp_kv_clone(k2, &err);
        next_logits(r1, 42, a);
        next_logits(r2, 7, b);
        float *ba = malloc((size_t)V * sizeof(float)), *bb = malloc((size_t)V * sizeof(float));
        kvp_row rows[2] = {{42, N_PROMPT, k1, ba}, {7, N_PROMPT - 5, k2, bb}};
        CHECK(kvp_forward(C, rows, 2, &err) == 0, "%s", err.msg);
        CHECK(same(a, ba) && same(b, bb), "batched rows differ from single rows");
        kvp_row bad = {42, N_PROMPT + 5, k1, NULL};
        CHECK(kvp_forward(C, &bad, 1, &err) != 0, "a gap in positions was accepted");
        kvp_row badtok = {V, 3, k1, NULL};
        CHECK(kvp_forward(C, &badtok, 1, &err) != 0 && strstr(err.msg, "token id"), "bad token accepted");
        free(ba);
        free(bb);
        kvp_kv_free(k1);
        kvp_kv_free(k2);
        kvp_kv_free(r1);
        kvp_kv_free(r2);
    }

    free(a);
    free(b);
    free(c);
    kvp_ctx_free(C);
    kvp_model_free(M);
    return harness_finish();
}
