/* Model loading: hyper-parameters from GGUF metadata, weights bound by name and shape-checked.
 * Every architecture difference is a field of kvp_hparams or an optional tensor; the forward
 * pass never tests model names. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model_impl.h"

typedef struct loader {
    kvp_model *m;
    const gguf_file *f;
    const char *arch;
    kvp_error *err;
} loader;

/* ---- metadata ---------------------------------------------------------------------------- */

static void arch_key(char *buf, size_t cap, const char *arch, const char *suffix) {
    snprintf(buf, cap, "%s.%s", arch, suffix);
}

/* An integer hyper-parameter that may be written as a per-layer array; kvprobe needs all
 * layers equal. Returns 0 ok, 1 absent, else error code. */
static int get_uniform_int(loader *ld, const char *suffix, int64_t *out) {
    char key[128];
    arch_key(key, sizeof key, ld->arch, suffix);
    const gguf_kv *kv = gguf_find_kv(ld->f, key);
    if (!kv) return 1;
    if (kv->value.type == GGUF_VT_ARRAY) {
        const gguf_value *a = &kv->value;
        if (!a->v.arr.raw || a->v.arr.n == 0 || a->v.arr.elem_type == GGUF_VT_FLOAT32 ||
            a->v.arr.elem_type == GGUF_VT_FLOAT64 || a->v.arr.elem_type == GGUF_VT_BOOL)
            return kvp_fail(ld->err, KVP_E_FORMAT, "%s: key '%s' must be an integer or an integer array",
                            ld->f->path, key);
        int64_t v0 = gguf_arr_i64(a, 0);
        for (uint64_t i = 1; i < a->v.arr.n; i++)
            if (gguf_arr_i64(a, i) != v0)
                return kvp_fail(ld->err, KVP_E_UNSUPPORTED, "%s: key '%s' varies per layer (not supported)",
                                ld->f->path, key);
        *out = v0;
        return 0;
    }
    return gguf_get_i64(ld->f, key, out, ld->err);
}

static int need_int(loader *ld, const char *suffix, int *out, int64_t lo, int64_t hi) {
    int64_t v;
    int rc = get_uniform_int(ld, suffix, &v);
    if (rc == 1)
        return kvp_fail(ld->err, KVP_E_FORMAT, "%s: missing metadata key '%s.%s'", ld->f->path, ld->arch, suffix);
    if (rc) return rc;
    if (v < lo || v > hi)
        return kvp_fail(ld->err, KVP_E_FORMAT, "%s: '%s.%s' = %lld is outside [%lld, %lld]", ld->f->path, ld->arch,
                        suffix, (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return 0;
}

static int opt_int(loader *ld, const char *suffix, int *out, int def, int64_t lo, int64_t hi) {
    int64_t v;
    int rc = get_uniform_int(ld, suffix, &v);
    if (rc == 1) {
        *out = def;
        return 0;
    }
    if (rc) return rc;
    if (v < lo || v > hi)
        return kvp_fail(ld->err, KVP_E_FORMAT, "%s: '%s.%s' = %lld is outside [%lld, %lld]", ld->f->path, ld->arch,
                        suffix, (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return 0;
}

static int opt_float(loader *ld, const char *suffix, float *out, float def) {
    char key[128];
    double v;
    arch_key(key, sizeof key, ld->arch, suffix);
    int rc = gguf_get_f64(ld->f, key, &v, ld->err);
    if (rc == 1) {
        *out = def;
        return 0;
    }
    if (rc) return rc;
    if (!isfinite(v)) return kvp_fail(ld->err, KVP_E_FORMAT, "%s: '%s' is not finite", ld->f->path, key);
    *out = (float)v;
    return 0;
}

/* ---- tensors ----------------------------------------------------------------------------- */

static int bind_weight(loader *ld, const char *name, int64_t n_in, int64_t n_out, int required, kvp_weight *w) {
    const gguf_tensor *t = gguf_find_tensor(ld->f, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (!required) return 0;
        return kvp_fail(ld->err, KVP_E_FORMAT, "%s: missing tensor '%s'", ld->f->path, name);
    }
    if (t->n_dims != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
        return kvp_fail(ld->err, KVP_E_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                        ld->f->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                        (long long)t->ne[3], (long long)n_in, (long long)n_out);
    if (!kvp_type_get(t->type)->can_compute)
        return kvp_fail(ld->err, KVP_E_UNSUPPORTED, "%s: tensor '%s' has type %s, which kvprobe cannot compute with",
                        ld->f->path, name, kvp_type_name(t->type));
    w->type = t->type;
    w->data = t->data;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = kvp_row_bytes(t->type, n_in);
    return 0;
}

static int bind_vector(loader *ld, const char *name, int64_t n, int required, float **out) {
    const gguf_tensor *t = gguf_find_tensor(ld->f, name);
    *out = NULL;
    if (!t) {
        if (!required) return 0;
        return kvp_fail(ld->err, KVP_E_FORMAT, "%s: missing tensor '%s'", ld->f->path, name);
    }
    if (t->n_dims != 1 || t->ne[0] != n)
        return kvp_fail(ld->err, KVP_E_FORMAT, "%s: tensor '%s' has %u dims / %lld elements, expected a vector of %lld",
                        ld->f->path, name, t->n_dims, (long long)t->ne[0], (long long)n);
    if (!kvp_type_get(t->type)->can_compute)
        return kvp_fail(ld->err, KVP_E_UNSUPPORTED, "%s: tensor '%s' has type %s, which kvprobe cannot compute with",
                        ld->f->path, name, kvp_type_name(t->type));
    kvp_model *m = ld->m;
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        float **p = realloc(m->owned, (size_t)cap * sizeof *p);
        if (!p) return kvp_fail(ld->err, KVP_E_NOMEM, "out of memory");
        m->owned = p;
        m->cap_owned = cap;
    }
    float *v = malloc((size_t)n * sizeof(float));
    if (!v) return kvp_fail(ld->err, KVP_E_NOMEM, "out of memory");
    kvp_dequantize_row(t->type, t->data, v, n);
    m->owned[m->n_owned++] = v;
    *out = v;
    return 0;
}

/* ---- hyper-parameters -------------------------------------------------------------------- */

static int load_swa_layers(loader *ld) {
    kvp_model *m = ld->m;
    kvp_hparams *hp = &m->hp;
    m->layer_is_swa = calloc((size_t)hp->n_layer, 1);
    if (!m->layer_is_swa) return kvp_fail(ld->err, KVP_E_NOMEM, "out of memory");
    hp->layer_is_swa = m->layer_is_swa;
    if (hp->sliding_window <= 0) return 0;
    char key[128];
    arch_key(key, sizeof key, ld->arch, "attention.sliding_window_pattern");
    const gguf_kv *kv = gguf_find_kv(ld->f, key);
    if (kv && kv->value.type == GGUF_VT_ARRAY) {
        const gguf_value *a = &kv->value;
        if (a->v.arr.elem_type != GGUF_VT_BOOL || a->v.arr.n != (uint64_t)hp->n_layer)
            return kvp_fail(ld->err, KVP_E_FORMAT, "%s: '%s' must be a bool array of %d layers", ld->f->path, key,
                            hp->n_layer);
        for (int l = 0; l < hp->n_layer; l++) m->layer_is_swa[l] = (uint8_t)gguf_arr_i64(a, (uint64_t)l);
        return 0;
    }
    /* A period n means n-1 sliding-window layers then one global layer (Gemma 3: 6). */
    int period = hp->arch == KVP_ARCH_GEMMA3 ? 6 : 0;
    int rc = opt_int(ld, "attention.sliding_window_pattern", &period, period, 0, 1 << 20);
    if (rc) return rc;
    for (int l = 0; l < hp->n_layer; l++) m->layer_is_swa[l] = period > 0 ? (l % period < period - 1) : 1;
    return 0;
}

static int load_rope_scaling(loader *ld) {
    kvp_hparams *hp = &ld->m->hp;
    char key[128];
    gguf_str type = {"none", 4};
    arch_key(key, sizeof key, ld->arch, "rope.scaling.type");
    int rc = gguf_get_str(ld->f, key, &type, ld->err);
    if (rc > 1) return rc;
    float factor = 1.0f;
    if ((rc = opt_float(ld, "rope.scaling.factor", &factor, 1.0f))) return rc;
    hp->rope_freq_scale = 1.0f;
    if (gguf_str_eq(type, "none") || factor == 1.0f || factor == 0.0f) return 0;
    if (gguf_str_eq(type, "linear")) {
        if (factor < 0) return kvp_fail(ld->err, KVP_E_FORMAT, "%s: rope scaling factor %g is negative", ld->f->path, factor);
        hp->rope_freq_scale = 1.0f / factor;
        return 0;
    }
    return kvp_fail(ld->err, KVP_E_UNSUPPORTED, "%s: rope scaling type '%.*s' is not supported (none, linear)",
                    ld->f->path, (int)(type.len > 32 ? 32 : type.len), type.ptr);
}

static int load_hparams(loader *ld) {
    kvp_hparams *hp = &ld->m->hp;
    int rc;
    const int BIG = 1 << 20;
    if ((rc = need_int(ld, "block_count", &hp->n_layer, 1, 4096)) || (rc = need_int(ld, "embedding_length", &hp->n_embd, 1, BIG)) ||
        (rc = need_int(ld, "feed_forward_length", &hp->n_ff, 1, BIG)) ||
        (rc = need_int(ld, "attention.head_count", &hp->n_head, 1, 4096)) ||
        (rc = opt_int(ld, "attention.head_count_kv", &hp->n_head_kv, hp->n_head, 1, 4096)) ||
        (rc = opt_int(ld, "context_length", &hp->n_ctx_train, 0, 0, INT32_MAX)))
        return rc;
    if (hp->n_head % hp->n_head_kv != 0)
        return kvp_fail(ld->err, KVP_E_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d", ld->f->path,
                        hp->n_head, hp->n_head_kv);
    if ((rc = opt_int(ld, "attention.key_length", &hp->head_dim, hp->n_embd / hp->n_head, 1, 65536)) ||
        (rc = opt_int(ld, "attention.value_length", &hp->head_dim_v, hp->head_dim, 1, 65536)) ||
        (rc = opt_int(ld, "rope.dimension_count", &hp->n_rot, hp->head_dim, 0, 65536)))
        return rc;
    if (hp->n_rot != hp->head_dim)
        return kvp_fail(ld->err, KVP_E_UNSUPPORTED, "%s: partial rotary embedding (%d of %d dims) is not supported",
                        ld->f->path, hp->n_rot, hp->head_dim);
    if (hp->head_dim % 2)
        return kvp_fail(ld->err, KVP_E_FORMAT, "%s: head dimension %d is odd", ld->f->path, hp->head_dim);
    float def_eps = hp->arch == KVP_ARCH_LLAMA ? 1e-5f : 1e-6f;
    if ((rc = opt_float(ld, "attention.layer_norm_rms_epsilon", &hp->rms_eps, def_eps)) ||
        (rc = opt_float(ld, "rope.freq_base", &hp->rope_base, 10000.0f)) ||
        (rc = opt_float(ld, "rope.freq_base_swa", &hp->rope_base_swa, 10000.0f)) ||
        (rc = opt_float(ld, "attention.scale", &hp->attn_scale, 1.0f / sqrtf((float)hp->head_dim))) ||
        (rc = opt_float(ld, "final_logit_softcapping", &hp->final_softcap, 0.0f)) ||
        (rc = opt_int(ld, "attention.sliding_window", &hp->sliding_window, 0, 0, INT32_MAX)) || (rc = load_rope_scaling(ld)))
        return rc;
    float attn_softcap;
    if ((rc = opt_float(ld, "attn_logit_softcapping", &attn_softcap, 0.0f))) return rc;
    if (attn_softcap != 0.0f)
        return kvp_fail(ld->err, KVP_E_UNSUPPORTED, "%s: attention logit soft-capping is not supported", ld->f->path);
    if (hp->arch != KVP_ARCH_GEMMA3) hp->rope_base_swa = hp->rope_base;
    hp->rope_neox = hp->arch != KVP_ARCH_LLAMA;
    hp->embed_scale = hp->arch == KVP_ARCH_GEMMA3 ? sqrtf((float)hp->n_embd) : 1.0f;
    return load_swa_layers(ld);
}

/* ---- weights ----------------------------------------------------------------------------- */

static int load_layer(loader *ld, int il) {
    kvp_model *m = ld->m;
    const kvp_hparams *hp = &m->hp;
    kvp_layer *L = &m->layers[il];
    int64_t d = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim, k = (int64_t)hp->n_head_kv * hp->head_dim,
            v = (int64_t)hp->n_head_kv * hp->head_dim_v, att = (int64_t)hp->n_head * hp->head_dim_v;
    int has_qk_norm = hp->arch == KVP_ARCH_QWEN3 || hp->arch == KVP_ARCH_GEMMA3, gemma = hp->arch == KVP_ARCH_GEMMA3;
    int qkv_bias = hp->arch == KVP_ARCH_QWEN2; /* llama.cpp reads them as optional for every family */
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    int rc;
    if ((rc = bind_vector(ld, NAME("attn_norm.weight"), d, 1, &L->attn_norm)) ||
        (rc = bind_weight(ld, NAME("attn_q.weight"), d, q, 1, &L->wq)) ||
        (rc = bind_weight(ld, NAME("attn_k.weight"), d, k, 1, &L->wk)) ||
        (rc = bind_weight(ld, NAME("attn_v.weight"), d, v, 1, &L->wv)) ||
        (rc = bind_vector(ld, NAME("attn_q.bias"), q, qkv_bias, &L->bq)) ||
        (rc = bind_vector(ld, NAME("attn_k.bias"), k, qkv_bias, &L->bk)) ||
        (rc = bind_vector(ld, NAME("attn_v.bias"), v, qkv_bias, &L->bv)) ||
        (rc = bind_weight(ld, NAME("attn_output.weight"), att, d, 1, &L->wo)) ||
        (rc = bind_vector(ld, NAME("attn_q_norm.weight"), hp->head_dim, has_qk_norm, &L->q_norm)) ||
        (rc = bind_vector(ld, NAME("attn_k_norm.weight"), hp->head_dim, has_qk_norm, &L->k_norm)) ||
        (rc = bind_vector(ld, NAME("post_attention_norm.weight"), d, gemma, &L->post_attn_norm)) ||
        (rc = bind_vector(ld, NAME("ffn_norm.weight"), d, 1, &L->ffn_norm)) ||
        (rc = bind_weight(ld, NAME("ffn_gate.weight"), d, hp->n_ff, 1, &L->gate)) ||
        (rc = bind_weight(ld, NAME("ffn_up.weight"), d, hp->n_ff, 1, &L->up)) ||
        (rc = bind_weight(ld, NAME("ffn_down.weight"), hp->n_ff, d, 1, &L->down)) ||
        (rc = bind_vector(ld, NAME("post_ffw_norm.weight"), d, gemma, &L->post_ffw_norm)))
        return rc;
#undef NAME
    return 0;
}

static int load_weights(loader *ld) {
    kvp_model *m = ld->m;
    kvp_hparams *hp = &m->hp;
    const gguf_tensor *te = gguf_find_tensor(ld->f, "token_embd.weight");
    if (!te) return kvp_fail(ld->err, KVP_E_FORMAT, "%s: missing tensor 'token_embd.weight'", ld->f->path);
    if (te->n_dims != 2 || te->ne[1] < 1 || te->ne[1] > INT32_MAX)
        return kvp_fail(ld->err, KVP_E_FORMAT, "%s: tensor 'token_embd.weight' must be 2-D [n_embd, n_vocab]", ld->f->path);
    hp->n_vocab = (int)te->ne[1];
    int rc;
    if ((rc = bind_weight(ld, "token_embd.weight", hp->n_embd, hp->n_vocab, 1, &m->tok_embd)) ||
        (rc = bind_weight(ld, "output.weight", hp->n_embd, hp->n_vocab, 0, &m->output)) ||
        (rc = bind_vector(ld, "output_norm.weight", hp->n_embd, 1, &m->output_norm)) ||
        (rc = bind_vector(ld, "rope_freqs.weight", hp->n_rot / 2, 0, &m->rope_freqs)))
        return rc;
    hp->tied_output = m->output.data == NULL;
    if (hp->tied_output) m->output = m->tok_embd;
    hp->has_rope_freqs = m->rope_freqs != NULL;
    if (m->rope_freqs)
        for (int i = 0; i < hp->n_rot / 2; i++)
            if (!(m->rope_freqs[i] > 0.0f) || !isfinite(m->rope_freqs[i]))
                return kvp_fail(ld->err, KVP_E_FORMAT, "%s: rope_freqs[%d] = %g must be positive", ld->f->path, i,
                                m->rope_freqs[i]);
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return kvp_fail(ld->err, KVP_E_NOMEM, "out of memory");
    for (int il = 0; il < hp->n_layer; il++)
        if ((rc = load_layer(ld, il))) return rc;
    return 0;
}

/* The matmul weights, held in one heap block in transparent huge pages, with the file pages
 * they came from released, so memory holds them once. Weights whose type has a faster layout
 * of the same values (kvp_repack_type: K-quants lane = block) are repacked into it; the other
 * quantized ones are copied as they are, where the file's pages can be released (a mapping).
 * Decode streams every weight once per token: on 4 KB pages its reads stall on the TLB
 * (huge pages: +8-10% from memory, qdot-bench -m huge, AMD Zen 4 and Intel alike). Results are
 * bit-identical either way (test_qdot, test_real); KVPROBE_REPACK=0 reads the file's mapping
 * in its layout, to measure against. */
static int moves(const loader *ld, const kvp_weight *w) {
    return kvp_repack_type(w->type) != w->type || (ld->f->owns_map && kvp_qdot_supported(w->type));
}

static int repack_weights(loader *ld) {
    kvp_model *m = ld->m;
    const char *env = getenv("KVPROBE_REPACK");
    if (env && !strcmp(env, "0")) return 0;
    int nw = 1 + !m->hp.tied_output + 7 * m->hp.n_layer, k = 0;
    kvp_weight **ws = malloc((size_t)nw * sizeof *ws);
    if (!ws) return kvp_fail(ld->err, KVP_E_NOMEM, "out of memory");
    ws[k++] = &m->tok_embd;
    if (!m->hp.tied_output) ws[k++] = &m->output;
    for (int il = 0; il < m->hp.n_layer; il++) {
        kvp_layer *L = &m->layers[il];
        kvp_weight *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (int i = 0; i < 7; i++) ws[k++] = lw[i];
    }
    const size_t huge = (size_t)2 << 20;
    size_t total = 0;
    for (int i = 0; i < nw; i++)
        if (moves(ld, ws[i]))
            total += ((size_t)ws[i]->n_out * kvp_row_bytes(kvp_repack_type(ws[i]->type), ws[i]->n_in) + 63) & ~(size_t)63;
    if (total == 0) {
        free(ws);
        return 0;
    }
    total = (total + huge - 1) & ~(huge - 1);
    if (!(m->repacked = aligned_alloc(huge, total))) {
        free(ws);
        return kvp_fail(ld->err, KVP_E_NOMEM, "%s: out of memory holding %zu bytes of weights", ld->f->path, total);
    }
    madvise(m->repacked, total, MADV_HUGEPAGE); /* a hint: without THP, 4 KB pages as before */
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *dst = m->repacked;
    for (int i = 0; i < nw; i++) {
        kvp_weight *w = ws[i];
        if (!moves(ld, w)) continue;
        enum kvp_type to = kvp_repack_type(w->type);
        size_t bytes = (size_t)w->n_out * w->row_bytes;
        kvp_repack_rows(w->type, w->data, dst, w->n_out, w->n_in); /* (a copy where to == type) */
        if (ld->f->owns_map && page > 0) { /* the whole pages of the mapping it came from */
            uintptr_t a = ((uintptr_t)w->data + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
            uintptr_t b = ((uintptr_t)w->data + bytes) & ~(uintptr_t)(page - 1);
            if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
        }
        w->type = to;
        w->data = dst;
        w->row_bytes = kvp_row_bytes(to, w->n_in);
        dst += ((size_t)w->n_out * w->row_bytes + 63) & ~(size_t)63;
    }
    if (m->hp.tied_output) m->output = m->tok_embd;
    free(ws);
    return 0;
}

static const struct {
    const char *name;
    kvp_arch arch;
} ARCHS[] = {{"llama", KVP_ARCH_LLAMA}, {"qwen2", KVP_ARCH_QWEN2}, {"qwen3", KVP_ARCH_QWEN3}, {"gemma3", KVP_ARCH_GEMMA3}};

kvp_model *kvp_model_load(const char *path, kvp_error *err) {
    gguf_file *f = gguf_open(path, err);
    return f ? kvp_model_from_gguf(f, err) : NULL;
}

kvp_model *kvp_model_from_gguf(gguf_file *f, kvp_error *err) {
    kvp_model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(f);
        kvp_fail(err, KVP_E_NOMEM, "out of memory");
        return NULL;
    }
    m->gguf = f;
    const char *path = f->path;
    gguf_str arch;
    int rc = gguf_get_str(m->gguf, "general.architecture", &arch, err);
    if (rc == 1) {
        kvp_fail(err, KVP_E_FORMAT, "%s: missing metadata key 'general.architecture'", path);
        goto fail;
    }
    if (rc) goto fail;
    loader ld = {.m = m, .f = m->gguf, .arch = NULL, .err = err};
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (gguf_str_eq(arch, ARCHS[i].name)) {
            m->hp.arch = ARCHS[i].arch;
            m->hp.arch_name = ld.arch = ARCHS[i].name;
        }
    if (!ld.arch) {
        kvp_fail(err, KVP_E_UNSUPPORTED, "%s: unknown architecture '%.*s' (supported: llama, qwen2, qwen3, gemma3)", path,
                 (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
        goto fail;
    }
    if (load_hparams(&ld) || load_weights(&ld) || repack_weights(&ld)) goto fail;
    return m;
fail:
    kvp_model_free(m);
    return NULL;
}

void kvp_model_free(kvp_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->layer_is_swa);
    free(m->repacked);
    gguf_close(m->gguf);
    free(m);
}

const kvp_hparams *kvp_model_hparams(const kvp_model *m) { return &m->hp; }
const gguf_file *kvp_model_gguf(const kvp_model *m) { return m->gguf; }
