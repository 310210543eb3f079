/* kvprobe generate: prompt -> tokens -> prefill -> decode loop -> text on stdout. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "kvprobe/kvprobe.h"

typedef struct gen_opts {
    const char *model;
    const char *prompt;
    const char *tokens;
    long n_predict;
    long threads;
    long ctx;
    double temp, top_p;
    long top_k;
    long seed;
    int kv_f16;
    int no_bos;
    int print_ids;
    const char *logits_path;
    int ignore_eog;
    kvp_precision precision;
    long batch;
    cli_chat chat;
    const char *kv_policy;
    kvp_kv_policy policy;
} gen_opts;

static void gen_usage(FILE *f) {
    fprintf(f,
            "usage: kvprobe generate -m MODEL (-p TEXT | --tokens ID,ID,...) [options]\n"
            "  -m, --model FILE     GGUF model\n"
            "  -p, --prompt TEXT    raw prompt text (tokenized with the model's tokenizer)\n"
            "  --tokens LIST        prompt as comma-separated token ids (no BOS added)\n"
            "  -n N                 tokens to generate (default 32)\n"
            "  -t, --threads N      threads (default: all cores)\n"
            "  --temp T             temperature; 0 = greedy (default 0)\n"
            "  --top-k K, --top-p P sampling filters (default off)\n"
            "  --seed S             sampling seed (default 1)\n"
            "  --ctx N              KV cache positions (default prompt + n)\n"
            "  --kv-f16             store the KV cache in f16 (default f32)\n"
            "  --precision P        matmul activations: q8 (default: 8-bit blocks, integer kernels),\n"
            "                       q8x2 (two 8-bit planes, ~16-bit), f32 (the parity path)\n"
            "  --exact              = --precision f32 (within 1e-3 of transformers)\n"
            "  --batch N            prompt tokens per forward pass (default 64)\n"
            "  --no-bos             do not prepend BOS to -p text\n"
            "  --ignore-eog         keep generating past end-of-generation tokens\n"
            "  --ids                print generated token ids instead of text\n"
            "  --logits FILE        write the logits of every generation step to FILE (n_vocab\n"
            "                       little-endian float32 per step, in step order)\n"
            "  --chat               render -p as a user turn with the model's chat template and stop\n"
            "                       at the end of the turn; --system S, --template NAME, --no-think\n"
            "  --kv-policy SPEC     what the cache keeps of the prompt (include/kvprobe/policy.h):\n"
            "                       full, scaffold:L=..,W=..[,recent=N] and drop-content:L=..,W=..[,recent=N]\n"
            "                       (need --chat; recent: the prompt's last N positions stay the request's),\n"
            "                       streaming:budget=B, h2o:budget=B, snapkv:budget=B (B: kept\n"
            "                       fraction of the prompt, or tokens=N); the KV memory held is reported\n");
}

static int parse_opts(int argc, char **argv, gen_opts *o) {
    *o = (gen_opts){.n_predict = 32, .threads = 0, .top_p = 1.0, .seed = 1, .batch = 64};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int c = cli_chat_arg(&o->chat, argc, argv, &i);
        if (c < 0) return -1;
        if (c) continue;
#define NEEDV() do { if (!v) { fprintf(stderr, "kvprobe generate: %s needs a value\n", a); return -1; } i++; } while (0)
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEEDV(); o->model = v; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { NEEDV(); o->prompt = v; }
        else if (!strcmp(a, "--tokens")) { NEEDV(); o->tokens = v; }
        else if (!strcmp(a, "-n")) { NEEDV(); if (cli_int(a, v, 0, 1 << 24, &o->n_predict)) return -1; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { NEEDV(); if (cli_int(a, v, 1, 256, &o->threads)) return -1; }
        else if (!strcmp(a, "--ctx")) { NEEDV(); if (cli_int(a, v, 1, 1 << 24, &o->ctx)) return -1; }
        else if (!strcmp(a, "--temp")) { NEEDV(); if (cli_float(a, v, &o->temp)) return -1; }
        else if (!strcmp(a, "--top-p")) { NEEDV(); if (cli_float(a, v, &o->top_p)) return -1; }
        else if (!strcmp(a, "--top-k")) { NEEDV(); if (cli_int(a, v, 0, 1 << 30, &o->top_k)) return -1; }
        else if (!strcmp(a, "--seed")) { NEEDV(); if (cli_int(a, v, 0, 0x7fffffff, &o->seed)) return -1; }
        else if (!strcmp(a, "--kv-f16")) o->kv_f16 = 1;
        else if (!strcmp(a, "--exact")) o->precision = KVP_PREC_F32;
        else if (!strcmp(a, "--precision")) {
            NEEDV();
            if (kvp_precision_from_name(v, &o->precision)) {
                fprintf(stderr, "kvprobe generate: --precision must be q8, q8x2 or f32, got '%s'\n", v);
                return -1;
            }
        }
        else if (!strcmp(a, "--batch")) { NEEDV(); if (cli_int(a, v, 1, 4096, &o->batch)) return -1; }
        else if (!strcmp(a, "--no-bos")) o->no_bos = 1;
        else if (!strcmp(a, "--ids")) o->print_ids = 1;
        else if (!strcmp(a, "--logits")) { NEEDV(); o->logits_path = v; }
        else if (!strcmp(a, "--ignore-eog")) o->ignore_eog = 1;
        else if (!strcmp(a, "--kv-policy")) {
            NEEDV();
            kvp_error e = {0};
            if (kvp_kv_policy_parse(v, &o->policy, &e)) {
                fprintf(stderr, "kvprobe generate: --kv-policy: %s\n", e.msg);
                return -1;
            }
            o->kv_policy = v;
        }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { gen_usage(stdout); exit(0); }
        else { fprintf(stderr, "kvprobe generate: unknown option '%s'\n", a); gen_usage(stderr); return -1; }
#undef NEEDV
    }
    if (o->chat.on && !o->prompt) {
        fprintf(stderr, "kvprobe generate: --chat needs -p TEXT\n");
        return -1;
    }
    if (o->kv_policy && kvp_kv_policy_is_edit(&o->policy) &&
        !o->chat.on) {
        fprintf(stderr, "kvprobe generate: --kv-policy %s needs --chat (it edits by segment: scaffold / user content)\n",
                kvp_policy_name(o->policy.kind));
        return -1;
    }
    if (!o->model || (!o->prompt == !o->tokens)) {
        fprintf(stderr, "kvprobe generate: need -m MODEL and exactly one of -p TEXT / --tokens IDS\n");
        gen_usage(stderr);
        return -1;
    }
    return 0;
}

static int parse_token_list(const char *s, int n_vocab, int32_t **out, int *n) {
    int cap = 16, k = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return -1;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= n_vocab || (*end && *end != ',')) {
            fprintf(stderr, "kvprobe generate: --tokens: bad token id at '%s' (ids are 0..%d, comma-separated)\n", p,
                    n_vocab - 1);
            free(ids);
            return -1;
        }
        if (k == cap) {
            int32_t *q = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!q) {
                free(ids);
                return -1;
            }
            ids = q;
        }
        ids[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!k) {
        fprintf(stderr, "kvprobe generate: --tokens is empty\n");
        free(ids);
        return -1;
    }
    *out = ids;
    *n = k;
    return 0;
}

/* Print bytes, holding back an incomplete trailing UTF-8 sequence until it completes. */
typedef struct utf8_out {
    char pend[8];
    int n;
} utf8_out;

static int utf8_need(unsigned char c) {
    return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
}

static void utf8_write(utf8_out *u, const char *s, size_t n, FILE *f) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (u->n && (c & 0xC0) != 0x80) { /* a new lead byte: flush what was pending as is */
            fwrite(u->pend, 1, (size_t)u->n, f);
            u->n = 0;
        }
        u->pend[u->n++] = (char)c;
        if (u->n >= utf8_need((unsigned char)u->pend[0]) || u->n == (int)sizeof u->pend) {
            fwrite(u->pend, 1, (size_t)u->n, f);
            u->n = 0;
        }
    }
    fflush(f);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cmd_generate(int argc, char **argv) {
    gen_opts o;
    if (parse_opts(argc, argv, &o)) return 1;
    kvp_error err = {0};
    int rc = 0;
    kvp_model *m = NULL;
    kvp_tokenizer *tok = NULL;
    kvp_ctx *ctx = NULL;
    kvp_kv *kv = NULL;
    int32_t *prompt = NULL;
    float *logits = NULL;
    FILE *lf = NULL; /* --logits */
    kvp_sampler smp = {0};
    int n_prompt = 0;
    kvp_prompt chat_prompt = {0}; /* --chat: ids and segment labels (the policies edit by segment) */
    kvp_scaffold *scaffold = NULL;

    if (!(m = kvp_model_load(o.model, &err))) return cli_error(&err);
    const kvp_hparams *hp = kvp_model_hparams(m);
    tok = kvp_tokenizer_load(kvp_model_gguf(m), &err);
    if (!tok && o.prompt) goto fail; /* text needs a tokenizer; ids do not */
    if (o.tokens) {
        if (parse_token_list(o.tokens, hp->n_vocab, &prompt, &n_prompt)) {
            rc = 1;
            goto out;
        }
    } else if (o.chat.on) {
        if (cli_chat_prompt(&o.chat, kvp_model_gguf(m), tok, o.prompt, &chat_prompt, &err)) goto fail;
        prompt = chat_prompt.ids; /* the template writes BOS itself where the family uses one */
        n_prompt = chat_prompt.n;
        chat_prompt.ids = NULL;
    } else if (kvp_tokenize(tok, o.prompt, strlen(o.prompt), kvp_tokenizer_add_bos(tok) && !o.no_bos, 0, &prompt,
                            &n_prompt, &err)) {
        goto fail;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "kvprobe generate: the prompt is empty\n");
        rc = 1;
        goto out;
    }
    kvp_ctx_params cp = {.n_threads = (int)o.threads, .max_batch = (int)o.batch, .precision = o.precision};
    long n_ctx = o.ctx ? o.ctx : n_prompt + o.n_predict;
    if (n_ctx < n_prompt + o.n_predict) {
        fprintf(stderr, "kvprobe generate: --ctx %ld is smaller than prompt (%d) + -n (%ld)\n", n_ctx, n_prompt,
                o.n_predict);
        rc = 1;
        goto out;
    }
    if (!(ctx = kvp_ctx_new(m, &cp, &err)) || !(kv = kvp_kv_new(m, (int)n_ctx, o.kv_f16 ? KVP_KV_F16 : KVP_KV_F32, &err)))
        goto fail;
    if (!(logits = malloc((size_t)hp->n_vocab * sizeof *logits)) ||
        kvp_sampler_init(&smp, hp->n_vocab, (float)o.temp, (int)o.top_k, (float)o.top_p, (uint64_t)o.seed)) {
        kvp_fail(&err, KVP_E_NOMEM, "out of memory");
        goto fail;
    }

    if (o.logits_path && !(lf = fopen(o.logits_path, "wb"))) {
        kvp_fail(&err, KVP_E_IO, "%s: cannot write: %s", o.logits_path, strerror(errno));
        goto fail;
    }
    kvp_prompt pp = {.ids = prompt, .n = n_prompt, .seg = chat_prompt.seg};
    kvp_policy_run run = {&o.policy, ctx, kv, &pp, NULL, 0};
    if (o.kv_policy && o.policy.kind == KVP_POLICY_SCAFFOLD &&
        !(run.scaffold = scaffold = kvp_scaffold_new(m, ctx, tok, NULL, 0, o.policy.layer_from, kvp_kv_dtype(kv), &err)))
        goto fail;
    double t0 = now_s();
    if (!o.kv_policy) {
        if (kvp_decode(ctx, kv, prompt, n_prompt, NULL, logits, &err)) goto fail;
    } else if (kvp_policy_prefill(&run, &err) || kvp_policy_step(&run, 0, &err) ||
               kvp_decode(ctx, kv, prompt + n_prompt - 1, 1, NULL, logits, &err)) {
        goto fail;
    }
    double t1 = now_s();
    utf8_out u = {0};
    int n_gen = 0;
    for (; n_gen < o.n_predict; n_gen++) {
        if (lf && fwrite(logits, sizeof *logits, (size_t)hp->n_vocab, lf) != (size_t)hp->n_vocab) {
            kvp_fail(&err, KVP_E_IO, "%s: write failed", o.logits_path);
            goto fail;
        }
        int32_t next = kvp_sample(&smp, logits);
        if (!o.ignore_eog && tok && kvp_token_is_eog(tok, next)) break;
        if (o.print_ids) {
            printf(n_gen ? " %d" : "%d", next);
            fflush(stdout);
        } else if (tok) {
            char buf[256];
            size_t n = kvp_token_to_bytes(tok, next, 0, buf, sizeof buf);
            utf8_write(&u, buf, n < sizeof buf ? n : sizeof buf, stdout);
        }
        if (n_gen + 1 < o.n_predict &&
            ((o.kv_policy && kvp_policy_step(&run, n_gen + 1, &err)) || kvp_decode(ctx, kv, &next, 1, NULL, logits, &err)))
            goto fail;
    }
    if (u.n) fwrite(u.pend, 1, (size_t)u.n, stdout);
    printf("\n");
    if (lf && fclose(lf) != 0) {
        lf = NULL;
        kvp_fail(&err, KVP_E_IO, "%s: write failed", o.logits_path);
        goto fail;
    }
    lf = NULL;
    double t2 = now_s();
    fprintf(stderr, "kvprobe: prompt %d tokens in %.3f s (%.1f tok/s), generated %d tokens in %.3f s (%.1f tok/s), %d threads, %s activations (%s)\n",
            n_prompt, t1 - t0, n_prompt / (t1 - t0), n_gen, t2 - t1, n_gen > 1 ? (n_gen - 1) / (t2 - t1) : 0.0,
            kvp_ctx_threads(ctx), kvp_precision_name(kvp_ctx_precision(ctx)),
            kvp_ctx_precision(ctx) == KVP_PREC_F32 ? "f32 kernels" : kvp_ctx_kernels(ctx));
    if (o.kv_policy) {
        kvp_kv_mem mm;
        kvp_kv_memory(kv, &mm);
        char spec[128];
        kvp_kv_policy_format(&o.policy, spec, sizeof spec);
        fprintf(stderr, "kvprobe: kv policy %s: %d positions, %ld (layer, KV head, position) entries held, %zu bytes "
                        "(%zu of them in pages shared with the scaffold cache)",
                spec, kvp_kv_len(kv), mm.slots, mm.bytes, mm.shared_bytes);
        size_t sb = 0;
        if (scaffold && !kvp_scaffold_bytes(scaffold, &sb, &err))
            fprintf(stderr, "; scaffold cache %zu bytes for %d donors", sb, kvp_scaffold_entries(scaffold));
        fprintf(stderr, "\n");
    }
    goto out;
fail:
    rc = cli_error(&err);
out:
    if (lf) fclose(lf);
    kvp_sampler_free(&smp);
    kvp_scaffold_free(scaffold);
    kvp_prompt_free(&chat_prompt);
    free(logits);
    free(prompt);
    kvp_kv_free(kv);
    kvp_ctx_free(ctx);
    kvp_tokenizer_free(tok);
    kvp_model_free(m);
    return rc;
}
