/* KV cache policies (include/kvprobe/policy.h): the spec, what StreamingLLM / H2O / SnapKV
 * keep on hand-made attention patterns, what a request holds under each policy (tiny qwen2
 * fixture), and the shared scaffold cache on a real chat model: its donors equal the sweep's
 * per-request BLANK donors bit for bit, a request spliced from it equals the sweep's BLANK
 * cell, and N requests under it hold the memory the page accounting and the allocator say. */
#include <malloc.h>
#include <math.h>
#include <stdint.h>

/* Bytes the allocator has handed out: glibc's count, or ASan's (its allocator replaces glibc's,
 * whose mallinfo2 then stays at 0). */
#if defined(__SANITIZE_ADDRESS__)
#define KVP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVP_ASAN 1
#endif
#endif
#ifdef KVP_ASAN
size_t __sanitizer_get_current_allocated_bytes(void); /* <sanitizer/allocator_interface.h> */
static size_t allocated_bytes(void) { return __sanitizer_get_current_allocated_bytes(); }
#else
static size_t allocated_bytes(void) { return mallinfo2().uordblks; }
#endif

#include "harness.h"
#include "kvprobe/kvprobe.h"

static int kept_is(const uint8_t *keep, int n, const int *want, int n_want) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!keep[i]) continue;
        if (k >= n_want || want[k] != i) return 0;
        k++;
    }
    return k == n_want;
}

static kvp_kv *request(kvp_model *m, kvp_ctx *c, const kvp_prompt *p, const kvp_kv_policy *pol, kvp_scaffold *sc,
                       int n_gen, kvp_error *err) {
    kvp_kv *kv = kvp_kv_new(m, p->n + n_gen + 1, KVP_KV_F32, err);
    kvp_policy_run r = {pol, c, kv, p, sc, 0};
    if (!kv || kvp_policy_prefill(&r, err)) goto fail;
    float *lg = malloc((size_t)kvp_model_hparams(m)->n_vocab * sizeof *lg);
    int32_t x = p->ids[p->n - 1];
    for (int g = 0; g < n_gen; g++) { /* greedy */
        if (kvp_policy_step(&r, g, err) || kvp_decode(c, kv, &x, 1, NULL, lg, err)) {
            free(lg);
            goto fail;
        }
        x = kvp_argmax(lg, kvp_model_hparams(m)->n_vocab);
    }
    int rc = kvp_policy_step(&r, n_gen, err);
    free(lg);
    if (rc) goto fail;
    return kv;
fail:
    kvp_kv_free(kv);
    return NULL;
}

static int same_kv(const kvp_kv *a, const kvp_kv *b, int l0, int l1, int p0, int p1) {
    kvp_error err = {0};
    int rk = kvp_kv_row_size(a, KVP_K), rv = kvp_kv_row_size(a, KVP_V), ok = 1;
    float *x = malloc((size_t)(rk > rv ? rk : rv) * 2 * sizeof(float)), *y = x + (rk > rv ? rk : rv);
    for (int l = l0; l < l1 && ok; l++)
        for (int p = p0; p < p1 && ok; p++)
            for (int w = KVP_K; w <= KVP_V; w <<= 1) {
                int n = w == KVP_K ? rk : rv;
                ok &= kvp_kv_read(a, (kvp_kv_which)w, l, l + 1, p, p + 1, x, &err) == 0 &&
                      kvp_kv_read(b, (kvp_kv_which)w, l, l + 1, p, p + 1, y, &err) == 0 &&
                      memcmp(x, y, (size_t)n * sizeof(float)) == 0;
            }
    free(x);
    return ok;
}

static const char *TEXTS[] = {
    "What is the capital of France?",
    "Write a Python function that returns the sum of the squares of a list of integers, and explain how it works.",
    "Name three planets.",
    "Translate to German: the quick brown fox jumps over the lazy dog, twice, and then it rests under a tree.",
};

int main(void) {
    kvp_error err = {0};
    char buf[128];
    kvp_kv_policy p;

    TEST("policy: specs parse to their canonical form; bad specs name the bad part") {
        const char *good[][2] = {{"full", "full"},
                                 {"scaffold:L=12,W=4", "scaffold:L=12,W=4"},
                                 {"drop-content:W=0,L=3", "drop-content:L=3,W=0"},
                                 {"scaffold:L=12,W=0,recent=32", "scaffold:L=12,W=0,recent=32"},
                                 {"drop-content:L=3,W=4,recent=0", "drop-content:L=3,W=4"},
                                 {"streaming:budget=25%", "streaming:budget=0.25,sinks=4"},
                                 {"h2o:budget=0.5,recent=8", "h2o:budget=0.5,recent=8"},
                                 {"snapkv:tokens=64,window=16,kernel=5", "snapkv:tokens=64,window=16,kernel=5"}};
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
            int ok = kvp_kv_policy_parse(good[i][0], &p, &err) == 0;
            if (ok) kvp_kv_policy_format(&p, buf, sizeof buf);
            CHECK(ok && !strcmp(buf, good[i][1]), "%s -> %s (%s)", good[i][0], ok ? buf : "error", err.msg);
        }
        const char *bad[][2] = {{"lru:budget=0.5", "unknown policy 'lru'"}, {"h2o", "needs budget"},
                                {"scaffold:L=3", "needs L=.. and W=.."}, {"snapkv:budget=0.5,kernel=4", "odd"},
                                {"streaming:budget=1.5", "fraction"}, {"streaming:budget=0.5,L=3", "L applies"},
                                {"h2o:budget=0.5,window=3", "unknown parameter 'window'"}, {"full:x", "KEY=VALUE"},
                                {"scaffold:L=3,W=0,recent=-2", "recent must be"}, {"scaffold:L=3,W=0,sinks=4", "L, W, recent"}};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            CHECK(kvp_kv_policy_parse(bad[i][0], &p, &err) != 0 && strstr(err.msg, bad[i][1]), "%s: %s", bad[i][0],
                  err.msg);
        kvp_kv_policy_parse("h2o:budget=0.25", &p, &err);
        CHECK(kvp_kv_policy_kept(&p, 100) == 25 && kvp_kv_policy_kept(&p, 2) == 1, "kept count");
    }

    TEST("policy: kept sets on hand-made attention patterns") {
        uint8_t keep[16];
        /* StreamingLLM: 2 sinks and the 4 most recent of 10 */
        CHECK(kvp_keep_streaming(10, 6, 2, keep) == 6 && kept_is(keep, 10, (int[]){0, 1, 6, 7, 8, 9}, 6), "streaming");
        CHECK(kvp_keep_streaming(5, 9, 2, keep) == 5 && kept_is(keep, 5, (int[]){0, 1, 2, 3, 4}, 5), "budget >= n");
        /* H2O: the 2 most recent, then the 3 heaviest of the rest; a tie keeps the earlier */
        const float acc[10] = {5, 0, 9, 1, 1, 8, 0, 0, 2, 3};
        CHECK(kvp_keep_h2o(acc, 10, 5, 2, keep) == 5 && kept_is(keep, 10, (int[]){0, 2, 5, 8, 9}, 5), "h2o");
        const float tie[6] = {1, 2, 2, 2, 0, 0};
        CHECK(kvp_keep_h2o(tie, 6, 3, 1, keep) == 3 && kept_is(keep, 6, (int[]){1, 2, 5}, 3), "h2o tie order");
        /* SnapKV: window of 3 kept; a spike at 3 pooled over 3 neighbours selects 2, 3, 4,
         * where unpooled votes would take the spike, the small vote at 8 and position 0 */
        const float votes[9] = {0, 0, 0, 10, 0, 0, 0, 0, 1};
        CHECK(kvp_keep_snapkv(votes, 12, 6, 3, 3, keep) == 6 && kept_is(keep, 12, (int[]){2, 3, 4, 9, 10, 11}, 6),
              "snapkv pooled");
        CHECK(kvp_keep_snapkv(votes, 12, 6, 3, 1, keep) == 6 && kept_is(keep, 12, (int[]){0, 3, 8, 9, 10, 11}, 6),
              "snapkv unpooled");
        CHECK(kvp_keep_snapkv(votes, 12, 2, 3, 3, keep) == 2 && kept_is(keep, 12, (int[]){10, 11}, 2),
              "snapkv budget below the window keeps the most recent");
    }

    kvp_model *tm = kvp_model_load("tests/fixtures/tiny-qwen2-f32.gguf", &err);
    kvp_ctx_params cp = {.n_threads = 2, .max_batch = 16};
    kvp_ctx *tc = tm ? kvp_ctx_new(tm, &cp, &err) : NULL;
    TEST("policy: prefill policies keep their budget per layer and KV head and free the rest") {
        CHECK(tc, "tiny qwen2: %s", err.msg);
        const kvp_hparams *hp = kvp_model_hparams(tm);
        enum { N = 70 };
        int32_t ids[N];
        uint8_t seg[N];
        for (int i = 0; i < N; i++) ids[i] = (i * 37 + 11) % hp->n_vocab, seg[i] = i < 5 || i > N - 4 ? 0 : 2;
        kvp_prompt pr = {.ids = ids, .seg = seg, .n = N};
        kvp_kv_policy full;
        kvp_kv_policy_parse("full", &full, &err);
        kvp_kv *ref = request(tm, tc, &pr, &full, NULL, 3, &err);
        CHECK(ref, "%s", err.msg);
        kvp_kv_mem mf, mp;
        kvp_kv_memory(ref, &mf);
        const char *specs[] = {"streaming:budget=0.25", "h2o:budget=0.25", "snapkv:budget=0.25,window=8"};
        for (int s = 0; s < 3; s++) {
            kvp_kv_policy_parse(specs[s], &p, &err);
            kvp_kv *kv = request(tm, tc, &pr, &p, NULL, 3, &err);
            CHECK(kv, "%s: %s", specs[s], err.msg);
            int budget = kvp_kv_policy_kept(&p, N - 1), ok = 1;
            int32_t pos[N + 4];
            for (int l = 0; l < hp->n_layer; l++)
                for (int h = 0; h < hp->n_head_kv; h++) {
                    ok &= kvp_kv_held(kv, l, h) == budget + 3; /* + the last prompt token and 2 generated */
                    kvp_kv_slots(kv, l, h, pos, NULL, &err);
                    for (int i = budget; i < budget + 3; i++) ok &= pos[i] == N - 1 + (i - budget);
                    if (s == 0) ok &= pos[0] == 0 && pos[3] == 3 && pos[4] == N - 1 - (budget - 4);
                    if (s == 2) ok &= pos[budget - 8] == N - 9; /* the observation window */
                }
            CHECK(ok, "%s: kept positions", specs[s]);
            kvp_kv_memory(kv, &mp);
            /* 72 positions are 5 pages per list, 17 + 3 are 2 */
            CHECK(mp.pages * 5 == mf.pages * 2 && mp.bytes < mf.bytes / 2, "%s: pages %d of %d", specs[s], mp.pages,
                  mf.pages);
            kvp_kv_free(kv);
        }
        kvp_kv_policy_parse("drop-content:L=2,W=1", &p, &err);
        kvp_kv *dc = request(tm, tc, &pr, &p, NULL, 3, &err);
        CHECK(dc && kvp_kv_holds(dc, 1, 10) && !kvp_kv_holds(dc, 2, 10) && kvp_kv_holds(dc, 2, 2) &&
                  kvp_kv_held(dc, 2, 0) == N + 2 - (N - 8), "drop-content: %s", err.msg);
        kvp_kv_free(dc);
        /* with a recent window of 10 (span positions 59..68): of the user content 5..66, 5..58
         * are evicted and 59..66 stay */
        kvp_kv_policy_parse("drop-content:L=2,W=1,recent=10", &p, &err);
        dc = request(tm, tc, &pr, &p, NULL, 3, &err);
        CHECK(dc && !kvp_kv_holds(dc, 2, 10) && !kvp_kv_holds(dc, 2, 58) && kvp_kv_holds(dc, 2, 59) &&
                  kvp_kv_holds(dc, 2, 66) && kvp_kv_holds(dc, 1, 10) && kvp_kv_held(dc, 2, 0) == N + 2 - (N - 8 - 8),
              "drop-content with recent=10: held %d (%s)", dc ? kvp_kv_held(dc, 2, 0) : -1, err.msg);
        kvp_kv_free(dc);
        kvp_kv_free(ref);
    }
    kvp_ctx_free(tc);
    kvp_model_free(tm);

    /* ---- the shared scaffold cache on a real chat model ---- */
    const char *path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    kvp_model *m = kvp_model_load(path, &err);
    kvp_ctx *c = m ? kvp_ctx_new(m, &cp, &err) : NULL;
    kvp_tokenizer *tok = m ? kvp_tokenizer_load(kvp_model_gguf(m), &err) : NULL;
    kvp_template tmpl;
    int have = c && tok && kvp_template_detect(kvp_model_gguf(m), &tmpl, &err) == 0;
    enum { NP = sizeof TEXTS / sizeof TEXTS[0] };
    kvp_prompt pr[NP];
    memset(pr, 0, sizeof pr);
    for (int i = 0; have && i < NP; i++) {
        kvp_message msg = {"user", TEXTS[i]};
        have = kvp_chat_prompt(tok, &tmpl, &msg, 1, 1, &pr[i], &err) == 0;
    }
    const kvp_hparams *hp = m ? kvp_model_hparams(m) : NULL;
    kvp_scaffold *sc = have ? kvp_scaffold_new(m, c, tok, NULL, 256, 0, KVP_KV_F32, &err) : NULL;

    TEST("scaffold: shared donors equal the sweep's per-request BLANK donors bit for bit") {
        CHECK(sc, "%s: %s", path, err.msg);
        long donor_tokens = 0, closings = 0, seed = 0;
        for (int i = 0; i < NP; i++) {
            kvp_prompt d;
            CHECK(kvp_prompt_blank(tok, &pr[i], NULL, KVP_FILLER_SAME_LENGTH, &d, NULL, &err) == 0, "%s", err.msg);
            kvp_kv *own = kvp_kv_new(m, d.n, KVP_KV_F32, &err); /* as the sweep: the donor prefilled alone */
            CHECK(own && kvp_decode(c, own, d.ids, d.n - 1, NULL, NULL, &err) == 0, "%s", err.msg);
            const kvp_kv *shared = kvp_scaffold_donor(sc, &pr[i], &err);
            CHECK(shared, "%s", err.msg);
            CHECK(same_kv(own, shared, 0, hp->n_layer, 0, d.n - 1), "prompt %d: shared donor differs from its own", i);
            donor_tokens += d.n - 1;
            int u0 = 0, u1;
            while (d.seg[u0] != KVP_SEG_USER) u0++;
            for (u1 = u0; d.seg[u1] == KVP_SEG_USER; u1++) {}
            closings += d.n - 1 - u1;
            seed = u0 + 256;
            kvp_kv_free(own);
            kvp_prompt_free(&d);
        }
        /* the template prefix + filler run computed once, then only each closing scaffold */
        CHECK(kvp_scaffold_entries(sc) == NP + 1, "entries %d", kvp_scaffold_entries(sc));
        long computed = kvp_scaffold_computed(sc);
        NOTE("scaffold cache: %ld tokens computed (template prefix + 256 filler once, then %ld closing tokens) for %ld "
             "donor tokens of %d prompts", computed, closings, donor_tokens, NP);
        CHECK(computed == seed + closings, "computed %ld, expected %ld", computed, seed + closings);
    }

    TEST("scaffold: a request under scaffold:L,W equals the sweep's BLANK cell and holds less") {
        CHECK(sc, "no scaffold cache");
        int L = hp->n_layer / 2, W = 2;
        char spec[64];
        snprintf(spec, sizeof spec, "scaffold:L=%d,W=%d", L, W);
        kvp_kv_policy_parse(spec, &p, &err);
        kvp_kv_policy full;
        kvp_kv_policy_parse("full", &full, &err);
        const kvp_prompt *q = &pr[1];
        kvp_kv *got = request(m, c, q, &p, sc, W, &err);
        CHECK(got, "%s", err.msg);
        /* the sweep's BLANK cell: the clean run's fork at W, spliced from its own donor */
        kvp_kv *ref = request(m, c, q, &full, NULL, W, &err);
        kvp_prompt d;
        kvp_prompt_blank(tok, q, NULL, KVP_FILLER_SAME_LENGTH, &d, NULL, &err);
        kvp_kv *own = kvp_kv_new(m, d.n, KVP_KV_F32, &err);
        kvp_decode(c, own, d.ids, d.n - 1, NULL, NULL, &err);
        kvp_splice s = {.cond = KVP_COND_BLANK, .layer_from = L, .n_prompt = q->n, .seg = q->seg, .donor = own};
        CHECK(kvp_splice_apply(ref, &s, &err) == 0, "%s", err.msg);
        CHECK(same_kv(got, ref, 0, hp->n_layer, 0, kvp_kv_len(ref)), "K/V differ from the BLANK splice");
        float *a = malloc((size_t)hp->n_vocab * 2 * sizeof(float)), *b = a + hp->n_vocab;
        int32_t x = 42;
        kvp_decode(c, got, &x, 1, NULL, a, &err);
        kvp_decode(c, ref, &x, 1, NULL, b, &err);
        CHECK(memcmp(a, b, (size_t)hp->n_vocab * sizeof(float)) == 0, "next-token logits differ");
        kvp_kv_mem mg, mr;
        kvp_kv_memory(got, &mg);
        kvp_kv_memory(ref, &mr);
        NOTE("scaffold L=%d of %d: request holds %zu bytes of its own (%zu shared with the donors), full %zu", L,
             hp->n_layer, mg.bytes - mg.shared_bytes, mg.shared_bytes, mr.bytes);
        CHECK(mg.bytes - mg.shared_bytes < mr.bytes * 3 / 4, "no saving");
        free(a);
        kvp_kv_free(got);
        kvp_kv_free(ref);
        kvp_kv_free(own);
        kvp_prompt_free(&d);
    }

    TEST("scaffold + recent window: equals the BLANK splice that leaves the last N positions the request's own") {
        CHECK(sc, "no scaffold cache");
        int L = hp->n_layer / 2, W = 1, N = 5;
        char spec[64];
        snprintf(spec, sizeof spec, "scaffold:L=%d,W=%d,recent=%d", L, W, N);
        CHECK(kvp_kv_policy_parse(spec, &p, &err) == 0, "%s", err.msg);
        kvp_kv_policy full;
        kvp_kv_policy_parse("full", &full, &err);
        const kvp_prompt *q = &pr[1];
        int span = q->n - 1;
        kvp_kv *got = request(m, c, q, &p, sc, W, &err), *clean = request(m, c, q, &full, NULL, W, &err);
        kvp_kv *ref = request(m, c, q, &full, NULL, W, &err);
        CHECK(got && clean && ref, "%s", err.msg);
        kvp_prompt d;
        kvp_prompt_blank(tok, q, NULL, KVP_FILLER_SAME_LENGTH, &d, NULL, &err);
        kvp_kv *own = kvp_kv_new(m, d.n, KVP_KV_F32, &err);
        kvp_decode(c, own, d.ids, d.n - 1, NULL, NULL, &err);
        kvp_splice s = {.cond = KVP_COND_BLANK, .layer_from = L, .n_prompt = q->n, .seg = q->seg, .donor = own,
                        .keep_recent = N};
        CHECK(kvp_splice_apply(ref, &s, &err) == 0, "%s", err.msg);
        CHECK(same_kv(got, ref, 0, hp->n_layer, 0, kvp_kv_len(ref)), "K/V differ from the BLANK splice with keep_recent");
        /* the window is the request's own, the rest of the upper layers the donor's */
        CHECK(same_kv(got, clean, L, hp->n_layer, span - N, kvp_kv_len(clean)), "recent window edited");
        CHECK(same_kv(got, own, L, hp->n_layer, 0, span - N), "span before the window not the donor's");
        CHECK(!same_kv(got, own, L, hp->n_layer, span - N, span), "the window is the donor's");
        kvp_kv_free(got);
        kvp_kv_free(clean);
        kvp_kv_free(ref);
        kvp_kv_free(own);
        kvp_prompt_free(&d);
    }

    TEST("scaffold: a cache for layers >= L serves the same requests and holds less") {
        CHECK(sc, "no scaffold cache");
        int L = hp->n_layer / 2;
        char spec[64];
        snprintf(spec, sizeof spec, "scaffold:L=%d,W=0", L);
        kvp_kv_policy_parse(spec, &p, &err);
        kvp_scaffold *tr = kvp_scaffold_new(m, c, tok, NULL, 256, L, KVP_KV_F32, &err);
        CHECK(tr, "%s", err.msg);
        for (int i = 0; tr && i < NP; i++) {
            kvp_kv *a = request(m, c, &pr[i], &p, sc, 0, &err), *b = request(m, c, &pr[i], &p, tr, 0, &err);
            CHECK(a && b && same_kv(a, b, 0, hp->n_layer, 0, kvp_kv_len(a)), "prompt %d: requests differ", i);
            kvp_kv_free(a);
            kvp_kv_free(b);
        }
        size_t full = 0, trimmed = 0;
        CHECK(tr && !kvp_scaffold_bytes(sc, &full, &err) && !kvp_scaffold_bytes(tr, &trimmed, &err), "%s", err.msg);
        NOTE("scaffold cache for %d prompts: %zu bytes with every layer, %zu for layers >= %d", NP, full, trimmed, L);
        CHECK(trimmed < full, "no saving");
        kvp_scaffold_free(tr);
    }

    TEST("scaffold: N sequences hold what the page accounting says, and the allocator agrees") {
        CHECK(sc, "no scaffold cache");
        enum { NS = 16 };
        int L = hp->n_layer / 4;
        char spec[64];
        snprintf(spec, sizeof spec, "scaffold:L=%d,W=0", L);
        kvp_kv_policy pol[2];
        kvp_kv_policy_parse("full", &pol[0], &err);
        kvp_kv_policy_parse(spec, &pol[1], &err);
        size_t used[2], own[2], expect_pages[2], own_pages[2];
        int lists = hp->n_layer * hp->n_head_kv, upper = (hp->n_layer - L) * hp->n_head_kv;
        for (int k = 0; k < 2; k++) {
            kvp_kv *seqs[NS];
            size_t before = allocated_bytes();
            for (int i = 0; i < NS; i++) seqs[i] = request(m, c, &pr[i % NP], &pol[k], sc, 0, &err);
            used[k] = allocated_bytes() - before;
            own[k] = own_pages[k] = expect_pages[k] = 0;
            for (int i = 0; i < NS; i++) {
                CHECK(seqs[i], "%s", err.msg);
                kvp_kv_mem mm;
                kvp_kv_memory(seqs[i], &mm);
                own[k] += mm.bytes - mm.shared_bytes;
                own_pages[k] += (size_t)(mm.pages - mm.shared_pages);
                /* n - 1 prompt positions per list; under scaffold the upper lists keep only
                 * their last, partial page (the whole ones are the donor's) */
                int n = pr[i % NP].n - 1, all = (n + 15) / 16, partial = all - n / 16;
                expect_pages[k] += (size_t)(k ? (lists - upper) * all + upper * partial : lists * all);
            }
            for (int i = 0; i < NS; i++) kvp_kv_free(seqs[i]);
        }
        NOTE("%d sequences, own KV bytes: full %zu, scaffold L=%d %zu (%.1f%% less); allocator: %zu and %zu", NS, own[0],
             L, own[1], 100.0 * (1.0 - (double)own[1] / own[0]), used[0], used[1]);
        CHECK(own_pages[0] == expect_pages[0] && own_pages[1] == expect_pages[1], "own pages %zu / %zu, expected %zu / %zu",
              own_pages[0], own_pages[1], expect_pages[0], expect_pages[1]);
        for (int k = 0; k < 2; k++)
            CHECK(fabs((double)used[k] / own[k] - 1.0) < 0.05, "allocator %zu bytes vs accounting %zu", used[k], own[k]);
    }

    kvp_scaffold_free(sc);
    for (int i = 0; i < NP; i++) kvp_prompt_free(&pr[i]);
    kvp_tokenizer_free(tok);
    kvp_ctx_free(c);
    kvp_model_free(m);
    return harness_finish();
}
