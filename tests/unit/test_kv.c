/* The editable KV cache: fork (shared pages), truncate, range read/write/fill/copy, eviction
 * that releases memory, page sharing with a donor, and
 * sliding-window layers that stay editable per position. Uses the tiny gemma3 fixture
 * (window 8; layers 0-4 and 6 sliding, 5 global). */
#include <math.h>
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

    TEST("kv: eviction removes positions from attention and from the cache; a clone keeps them") {
        kvp_kv *kv = prefill(N_PROMPT, KVP_KV_F32, NULL);
        kvp_kv *keep = kvp_kv_clone(kv, &err), *ev = kvp_kv_clone(kv, &err);
        int kr = kvp_kv_row_size(kv, KVP_K);
        float before[256], after[256];
        CHECK(kr <= 256, "row");
        kvp_kv_read(kv, KVP_K, 3, 4, 19, 20, before, &err);
        CHECK(kvp_kv_evict(ev, 0, L, 16, 19, &err) == 0, "%s", err.msg);
        CHECK(!kvp_kv_holds(ev, 3, 17) && kvp_kv_holds(ev, 3, 19) && kvp_kv_holds(ev, 3, 15), "holds");
        CHECK(kvp_kv_held(ev, 3, 0) == N_PROMPT - 3, "held %d", kvp_kv_held(ev, 3, 0));
        CHECK(kvp_kv_read(ev, KVP_K, 3, 4, 19, 20, after, &err) == 0 && memcmp(before, after, (size_t)kr * 4) == 0,
              "a later position moved to another slot changed its values");
        CHECK(kvp_kv_read(ev, KVP_K, 3, 4, 16, 18, after, &err) != 0 && strstr(err.msg, "layer 3 position 16"),
              "reading an evicted position: %s", err.msg);
        CHECK(kvp_kv_fill(ev, KVP_KV_BOTH, 0, L, 17, 18, 0.0f, &err) != 0, "filling an evicted position succeeded");
        CHECK(kvp_kv_evict(ev, 0, L, 15, 18, &err) == 0 && kvp_kv_held(ev, 0, 0) == N_PROMPT - 4,
              "evicting a range that is partly evicted already");
        next_logits(kv, 42, a);
        next_logits(ev, 42, b);
        next_logits(keep, 42, c);
        CHECK(!same(a, b), "evicting 4 recent positions changed nothing");
        CHECK(same(a, c), "a clone taken before the eviction changed");
        CHECK(kvp_kv_holds(ev, 3, N_PROMPT) && kvp_kv_len(ev) == N_PROMPT + 1, "decode after eviction appends");
        kvp_kv *one = kvp_kv_clone(kv, &err);
        CHECK(kvp_kv_evict_heads(one, 2, 3, 0, 1, 0, 5, &err) == 0, "%s", err.msg);
        CHECK(kvp_kv_held(one, 2, 0) == N_PROMPT + 1 - 5 && kvp_kv_held(one, 2, kvp_kv_n_head_kv(one) - 1) ==
                  (kvp_kv_n_head_kv(one) > 1 ? N_PROMPT + 1 : N_PROMPT + 1 - 5), "per-head eviction");
        CHECK(kvp_kv_evict_heads(one, 2, 3, 0, 9, 0, 5, &err) != 0, "a KV head out of range was accepted");
        kvp_kv_free(kv);
        kvp_kv_free(ev);
        kvp_kv_free(keep);
        kvp_kv_free(one);
    }

    TEST("kv: clones share pages until they write; eviction and truncation release memory") {
        kvp_kv *kv = prefill(N_PROMPT, KVP_KV_F32, NULL);
        kvp_kv_mem m0, m1, m2;
        kvp_kv_memory(kv, &m0);
        int lists = L * kvp_kv_n_head_kv(kv);
        /* 20 positions: two pages of 16 per (layer, KV head) */
        CHECK(m0.pages == 2 * lists && m0.shared_pages == 0 && m0.slots == (long)N_PROMPT * lists, "pages %d", m0.pages);
        kvp_kv *fork = kvp_kv_clone(kv, &err);
        kvp_kv_memory(fork, &m1);
        CHECK(m1.pages == m0.pages && m1.shared_pages == m0.pages, "a fresh clone shares every page");
        const kvp_kv *both[2] = {kv, fork};
        size_t total = 0;
        CHECK(kvp_kv_bytes_total(both, 2, &total, &err) == 0, "%s", err.msg);
        CHECK(total < m0.bytes + m1.bytes && total >= (size_t)m0.pages * m0.page_bytes, "shared pages counted once");
        next_logits(fork, 42, a); /* writes position 20: the second page of each list is copied */
        kvp_kv_memory(fork, &m2);
        CHECK(m2.pages == m0.pages && m2.shared_pages == lists, "after one token the fork owns its last pages (%d shared)",
              m2.shared_pages);
        kvp_kv_memory(kv, &m1);
        CHECK(m1.shared_pages == lists, "the source shares its first pages only");
        CHECK(kvp_kv_evict(fork, 0, L, 0, 16, &err) == 0, "%s", err.msg);
        kvp_kv_memory(fork, &m2);
        CHECK(m2.pages == lists && m2.shared_pages == 0 && m2.slots == 5L * lists, "evicting 16 positions released a page per list");
        kvp_kv_memory(kv, &m1);
        CHECK(m1.shared_pages == 0, "the source's pages are its own again");
        CHECK(kvp_kv_truncate(kv, 10, &err) == 0, "%s", err.msg);
        kvp_kv_memory(kv, &m1);
        CHECK(m1.pages == lists && m1.slots == 10L * lists && m1.bytes < m0.bytes, "truncation released the second pages");
        kvp_kv_free(kv);
        kvp_kv_free(fork);
    }

    TEST("kv: share_range points at the donor's pages and equals copy_range") {
        float *d = malloc((size_t)V * sizeof(float));
        kvp_kv *kv = prefill(N_PROMPT, KVP_KV_F32, NULL);
        kvp_kv *donor = kvp_kv_new(M, 64, KVP_KV_F32, &err);
        int32_t other[N_PROMPT];
        for (int i = 0; i < N_PROMPT; i++) other[i] = (PROMPT[i] * 7 + 3) % V;
        CHECK(kvp_decode(C, donor, other, N_PROMPT, NULL, NULL, &err) == 0, "%s", err.msg);
        kvp_kv *copied = kvp_kv_clone(kv, &err), *shared = kvp_kv_clone(kv, &err);
        CHECK(kvp_kv_copy_range(copied, donor, KVP_KV_BOTH, 3, L, 0, N_PROMPT - 1, &err) == 0, "%s", err.msg);
        CHECK(kvp_kv_share_range(shared, donor, 3, L, 0, N_PROMPT - 1, &err) == 0, "%s", err.msg);
        kvp_kv_mem m;
        kvp_kv_memory(shared, &m);
        int upper = (L - 3) * kvp_kv_n_head_kv(kv), lower = 3 * kvp_kv_n_head_kv(kv);
        /* upper layers: page 0 (positions 0-15) is now the donor's, page 1 was copied into;
         * lower layers: both pages are still kv's */
        CHECK(m.shared_pages == upper + 2 * lower, "shared pages %d, expected %d", m.shared_pages, upper + 2 * lower);
        kvp_kv_free(donor);
        float x[256], y[256];
        int kr = kvp_kv_row_size(kv, KVP_K);
        CHECK(kr <= 256, "row");
        int ok = 1;
        for (int l = 0; l < L; l++)
            for (int p = 0; p < N_PROMPT; p++) {
                kvp_kv_read(copied, KVP_K, l, l + 1, p, p + 1, x, &err);
                kvp_kv_read(shared, KVP_K, l, l + 1, p, p + 1, y, &err);
                ok &= memcmp(x, y, (size_t)kr * 4) == 0;
            }
        CHECK(ok, "shared and copied caches differ");
        next_logits(copied, 42, a);
        next_logits(shared, 42, d);
        CHECK(same(a, d), "next-token logits differ after share_range vs copy_range");
        kvp_kv_free(kv);
        kvp_kv_free(copied);
        kvp_kv_free(shared);
        free(d);
    }

    TEST("kv: attention scores: each query adds its probabilities; keep() evicts by slot") {
        kvp_kv *kv = kvp_kv_new(M, 64, KVP_KV_F32, &err);
        CHECK(kv && kvp_kv_score(kv, 1, &err) == 0, "%s", err.msg);
        CHECK(kvp_decode(C, kv, PROMPT, N_PROMPT, NULL, NULL, &err) == 0, "%s", err.msg);
        int nkv = kvp_kv_n_head_kv(kv), group = hp->n_head / nkv;
        int32_t pos[64];
        float sc[64];
        int ok = 1;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < nkv; h++) {
                CHECK(kvp_kv_slots(kv, l, h, pos, sc, &err) == 0, "%s", err.msg);
                double sum = 0;
                for (int i = 0; i < N_PROMPT; i++) sum += sc[i], ok &= pos[i] == i && sc[i] >= 0;
                /* every query's probabilities sum to 1 per query head, window or not */
                ok &= fabs(sum - (double)N_PROMPT * group) < 1e-3;
            }
        CHECK(ok, "scores do not add up to queries x query heads");
        /* the last position is attended by itself only; position 0 by every query of a global layer */
        kvp_kv_slots(kv, 5, 0, pos, sc, &err);
        CHECK(sc[N_PROMPT - 1] <= group + 1e-5 && sc[0] > sc[N_PROMPT - 1], "score order");
        /* same scores with one thread and in one-token steps as in a 2-thread prefill */
        kvp_ctx_params cp1 = {.n_threads = 1, .max_batch = 16};
        kvp_ctx *c1 = kvp_ctx_new(M, &cp1, &err);
        kvp_kv *k1 = kvp_kv_new(M, 64, KVP_KV_F32, &err);
        kvp_kv_score(k1, 1, &err);
        for (int i = 0; i < N_PROMPT; i++) kvp_decode(c1, k1, PROMPT + i, 1, NULL, NULL, &err);
        float s1[64];
        kvp_kv_slots(k1, 5, 0, NULL, s1, &err);
        double md = 0;
        for (int i = 0; i < N_PROMPT; i++) md = fmax(md, fabs(s1[i] - sc[i]));
        CHECK(md < 1e-5, "scores differ between batched and stepwise decoding by %g", md);
        uint8_t keep[64];
        for (int i = 0; i < N_PROMPT; i++) keep[i] = i % 3 == 0;
        CHECK(kvp_kv_keep(kv, 5, 0, keep, &err) == 0, "%s", err.msg);
        float s2[64];
        kvp_kv_slots(kv, 5, 0, pos, s2, &err);
        ok = kvp_kv_held(kv, 5, 0) == 7;
        for (int i = 0; i < 7 && ok; i++) ok &= pos[i] == 3 * i && s2[i] == sc[3 * i];
        CHECK(ok, "keep() kept the wrong slots or lost their scores");
        CHECK(kvp_kv_holds(kv, 4, 1) && (nkv > 1 || !kvp_kv_holds(kv, 5, 1)), "holds after keep");
        CHECK(kvp_kv_slots(kv, L, 0, pos, sc, &err) != 0, "layer out of range accepted");
        kvp_kv_free(kv);
        kvp_kv_free(k1);
        kvp_ctx_free(c1);
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
