/* kvprobe inspect: what is in a GGUF file, for people (text) and machines (--json). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kvprobe/kvprobe.h"

#define ARRAY_HEAD 8 /* array elements shown */

static char *str_dup(gguf_str s) {
    char *p = malloc(s.len + 1);
    if (p) {
        memcpy(p, s.ptr, s.len);
        p[s.len] = 0;
    }
    return p;
}

/* ---- text ------------------------------------------------------------------------------- */

static void print_escaped(gguf_str s, size_t max) {
    putchar('"');
    for (uint64_t i = 0; i < s.len && i < max; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    if (s.len > max) fputs("...", stdout);
    putchar('"');
}

static void print_scalar(const gguf_value *v) {
    switch (v->type) {
    case GGUF_VT_FLOAT32: case GGUF_VT_FLOAT64: printf("%g", v->v.f); break;
    case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32: case GGUF_VT_INT64: printf("%lld", (long long)v->v.i); break;
    case GGUF_VT_BOOL: fputs(v->v.u ? "true" : "false", stdout); break;
    case GGUF_VT_STRING: print_escaped(v->v.s, 80); break;
    default: printf("%llu", (unsigned long long)v->v.u); break;
    }
}

static void print_value(const gguf_value *v) {
    if (v->type != GGUF_VT_ARRAY) {
        print_scalar(v);
        return;
    }
    printf("[%s x %llu]", gguf_vtype_name(v->v.arr.elem_type), (unsigned long long)v->v.arr.n);
    uint64_t n = v->v.arr.n < ARRAY_HEAD ? v->v.arr.n : ARRAY_HEAD;
    if (!n) return;
    fputs(" ", stdout);
    for (uint64_t i = 0; i < n; i++) {
        if (i) fputs(", ", stdout);
        if (v->v.arr.elems) {
            print_value(&v->v.arr.elems[i]);
        } else {
            gguf_value e = {.type = v->v.arr.elem_type};
            if (e.type == GGUF_VT_FLOAT32 || e.type == GGUF_VT_FLOAT64) e.v.f = gguf_arr_f64(v, i);
            else e.v.i = gguf_arr_i64(v, i), e.v.u = (uint64_t)e.v.i;
            print_scalar(&e);
        }
    }
    if (v->v.arr.n > n) fputs(", ...", stdout);
}

static void print_hparams(const kvp_hparams *hp) {
    printf("  vocab %d, context %d, embedding %d, layers %d, ffn %d\n", hp->n_vocab, hp->n_ctx_train, hp->n_embd,
           hp->n_layer, hp->n_ff);
    printf("  heads %d (kv %d), head dim %d (v %d), rope %s base %g", hp->n_head, hp->n_head_kv, hp->head_dim,
           hp->head_dim_v, hp->rope_neox ? "neox" : "adjacent-pair", hp->rope_base);
    if (hp->rope_freq_scale != 1.0f) printf(" scale %g", hp->rope_freq_scale);
    if (hp->has_rope_freqs) printf(" +rope_freqs (llama3 scaling)");
    printf("\n  rms eps %g, attention scale %g, embedding scale %g, lm head %s\n", hp->rms_eps, hp->attn_scale,
           hp->embed_scale, hp->tied_output ? "tied to token_embd" : "output.weight");
    if (hp->sliding_window > 0) {
        printf("  sliding window %d (rope base %g) on layers", hp->sliding_window, hp->rope_base_swa);
        for (int l = 0; l < hp->n_layer; l++)
            if (hp->layer_is_swa[l]) printf(" %d", l);
        printf("\n");
    }
}

static void print_tokenizer(const gguf_file *f) {
    kvp_error err = {0};
    kvp_tokenizer *t = kvp_tokenizer_load(f, &err);
    if (!t) {
        printf("tokenizer: %s\n", err.msg);
        return;
    }
    gguf_str pre = {"(none)", 6}, tmpl;
    gguf_get_str(f, "tokenizer.ggml.pre", &pre, &err);
    int has_tmpl = gguf_get_str(f, "tokenizer.chat_template", &tmpl, &err) == 0;
    printf("tokenizer: %s, pre '%.*s', %d tokens, bos %d, eos %d, add_bos %s, chat template %s\n",
           kvp_tokenizer_kind(t) == KVP_VOCAB_SPM ? "llama (SentencePiece BPE)" : "gpt2 (byte-level BPE)",
           (int)pre.len, pre.ptr, kvp_tokenizer_n_vocab(t), kvp_tokenizer_bos(t), kvp_tokenizer_eos(t),
           kvp_tokenizer_add_bos(t) ? "yes" : "no", has_tmpl ? "yes" : "no");
    kvp_tokenizer_free(t);
}

static void print_shape(const gguf_tensor *t, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < t->n_dims; d++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
    snprintf(buf + n, cap - (size_t)n, "]");
}

static int inspect_text(const char *path, const gguf_file *f, const kvp_model *m, const kvp_error *merr) {
    printf("file: %s\n", path);
    printf("gguf: version %u, alignment %u, %llu metadata keys, %llu tensors, data at offset %llu\n", f->version,
           f->alignment, (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors,
           (unsigned long long)f->data_offset);
    gguf_str arch = {"(none)", 6};
    kvp_error err = {0};
    gguf_get_str(f, "general.architecture", &arch, &err);
    printf("architecture: %.*s (%s)\n", (int)arch.len, arch.ptr, m ? "supported" : merr->msg);
    if (m) print_hparams(kvp_model_hparams(m));
    print_tokenizer(f);
    printf("metadata:\n");
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        printf("  %-48.*s %-4s ", (int)kv->key.len, kv->key.ptr, gguf_vtype_name(kv->value.type));
        print_value(&kv->value);
        printf("\n");
    }
    printf("tensors:\n  %-40s %-6s %-22s %12s\n", "name", "type", "shape", "bytes");
    uint64_t total = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char shape[96];
        print_shape(t, shape, sizeof shape);
        printf("  %-40.*s %-6s %-22s %12llu\n", (int)t->name.len, t->name.ptr, kvp_type_name(t->type), shape,
               (unsigned long long)t->nbytes);
        total += t->nbytes;
    }
    printf("total tensor data: %llu bytes (%.1f MiB)\n", (unsigned long long)total, total / 1048576.0);
    return 0;
}

/* ---- json ------------------------------------------------------------------------------- */

static cJSON *json_value(const gguf_value *v, int full_arrays);

static cJSON *json_str(gguf_str s) {
    char *c = str_dup(s);
    cJSON *j = cJSON_CreateString(c ? c : "");
    free(c);
    return j;
}

static cJSON *json_scalar(const gguf_value *v) {
    switch (v->type) {
    case GGUF_VT_FLOAT32: case GGUF_VT_FLOAT64: return cJSON_CreateNumber(v->v.f);
    case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32: case GGUF_VT_INT64: return cJSON_CreateNumber((double)v->v.i);
    case GGUF_VT_BOOL: return cJSON_CreateBool((int)v->v.u);
    case GGUF_VT_STRING: return json_str(v->v.s);
    default: return cJSON_CreateNumber((double)v->v.u);
    }
}

static cJSON *json_value(const gguf_value *v, int full_arrays) {
    if (v->type != GGUF_VT_ARRAY) return json_scalar(v);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "array");
    cJSON_AddStringToObject(o, "element_type", gguf_vtype_name(v->v.arr.elem_type));
    cJSON_AddNumberToObject(o, "length", (double)v->v.arr.n);
    cJSON *head = cJSON_AddArrayToObject(o, full_arrays ? "values" : "head");
    uint64_t n = full_arrays || v->v.arr.n < ARRAY_HEAD ? v->v.arr.n : ARRAY_HEAD;
    for (uint64_t i = 0; i < n; i++) {
        if (v->v.arr.elems) {
            cJSON_AddItemToArray(head, json_value(&v->v.arr.elems[i], 0));
        } else {
            gguf_value e = {.type = v->v.arr.elem_type};
            if (e.type == GGUF_VT_FLOAT32 || e.type == GGUF_VT_FLOAT64) e.v.f = gguf_arr_f64(v, i);
            else e.v.i = gguf_arr_i64(v, i), e.v.u = (uint64_t)e.v.i;
            cJSON_AddItemToArray(head, json_scalar(&e));
        }
    }
    return o;
}

static void json_hparams(cJSON *o, const kvp_hparams *hp) {
    cJSON *h = cJSON_AddObjectToObject(o, "hparams");
    cJSON_AddNumberToObject(h, "n_vocab", hp->n_vocab);
    cJSON_AddNumberToObject(h, "n_ctx_train", hp->n_ctx_train);
    cJSON_AddNumberToObject(h, "n_embd", hp->n_embd);
    cJSON_AddNumberToObject(h, "n_layer", hp->n_layer);
    cJSON_AddNumberToObject(h, "n_ff", hp->n_ff);
    cJSON_AddNumberToObject(h, "n_head", hp->n_head);
    cJSON_AddNumberToObject(h, "n_head_kv", hp->n_head_kv);
    cJSON_AddNumberToObject(h, "head_dim", hp->head_dim);
    cJSON_AddNumberToObject(h, "head_dim_v", hp->head_dim_v);
    cJSON_AddNumberToObject(h, "rms_eps", hp->rms_eps);
    cJSON_AddNumberToObject(h, "rope_base", hp->rope_base);
    cJSON_AddNumberToObject(h, "rope_base_swa", hp->rope_base_swa);
    cJSON_AddNumberToObject(h, "rope_freq_scale", hp->rope_freq_scale);
    cJSON_AddStringToObject(h, "rope_pairing", hp->rope_neox ? "neox" : "adjacent");
    cJSON_AddBoolToObject(h, "rope_freqs", hp->has_rope_freqs);
    cJSON_AddNumberToObject(h, "attn_scale", hp->attn_scale);
    cJSON_AddNumberToObject(h, "embed_scale", hp->embed_scale);
    cJSON_AddNumberToObject(h, "final_softcap", hp->final_softcap);
    cJSON_AddBoolToObject(h, "tied_output", hp->tied_output);
    cJSON_AddNumberToObject(h, "sliding_window", hp->sliding_window);
    cJSON *swa = cJSON_AddArrayToObject(h, "sliding_window_layers");
    for (int l = 0; hp->sliding_window > 0 && l < hp->n_layer; l++)
        if (hp->layer_is_swa[l]) cJSON_AddItemToArray(swa, cJSON_CreateNumber(l));
}

static int inspect_json(const char *path, const gguf_file *f, const kvp_model *m, const kvp_error *merr) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "file", path);
    cJSON_AddNumberToObject(o, "gguf_version", f->version);
    cJSON_AddNumberToObject(o, "alignment", f->alignment);
    cJSON_AddNumberToObject(o, "data_offset", (double)f->data_offset);
    gguf_str arch = {"", 0};
    kvp_error err = {0};
    gguf_get_str(f, "general.architecture", &arch, &err);
    cJSON_AddItemToObject(o, "architecture", json_str(arch));
    cJSON_AddBoolToObject(o, "supported", m != NULL);
    if (m) json_hparams(o, kvp_model_hparams(m));
    else cJSON_AddStringToObject(o, "error", merr->msg);
    kvp_tokenizer *t = kvp_tokenizer_load(f, &err);
    if (t) {
        cJSON *tj = cJSON_AddObjectToObject(o, "tokenizer");
        cJSON_AddStringToObject(tj, "model", kvp_tokenizer_kind(t) == KVP_VOCAB_SPM ? "llama" : "gpt2");
        cJSON_AddNumberToObject(tj, "n_tokens", kvp_tokenizer_n_vocab(t));
        cJSON_AddNumberToObject(tj, "bos", kvp_tokenizer_bos(t));
        cJSON_AddNumberToObject(tj, "eos", kvp_tokenizer_eos(t));
        cJSON_AddBoolToObject(tj, "add_bos", kvp_tokenizer_add_bos(t));
        kvp_tokenizer_free(t);
    }
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    for (uint64_t i = 0; i < f->n_kv; i++) {
        char *k = str_dup(f->kv[i].key);
        if (k) cJSON_AddItemToObject(md, k, json_value(&f->kv[i].value, 0));
        free(k);
    }
    cJSON *ts = cJSON_AddArrayToObject(o, "tensors");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        cJSON *tj = cJSON_CreateObject();
        cJSON_AddItemToObject(tj, "name", json_str(t->name));
        cJSON_AddStringToObject(tj, "type", kvp_type_name(t->type));
        cJSON *shape = cJSON_AddArrayToObject(tj, "shape");
        for (uint32_t d = 0; d < t->n_dims; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->ne[d]));
        cJSON_AddNumberToObject(tj, "bytes", (double)t->nbytes);
        cJSON_AddNumberToObject(tj, "offset", (double)t->offset);
        cJSON_AddItemToArray(ts, tj);
    }
    char *s = cJSON_Print(o);
    int rc = 0;
    if (s) {
        puts(s);
    } else {
        fprintf(stderr, "kvprobe: out of memory rendering JSON\n");
        rc = 1;
    }
    free(s);
    cJSON_Delete(o);
    return rc;
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: kvprobe inspect FILE [--json]\n");
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "kvprobe inspect: unknown option '%s'\n", argv[i]);
            return 1;
        } else if (!path) path = argv[i];
        else {
            fprintf(stderr, "kvprobe inspect: one file at a time\n");
            return 1;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: kvprobe inspect FILE [--json]\n");
        return 1;
    }
    kvp_error err = {0}, merr = {0};
    gguf_file *f = gguf_open(path, &err);
    if (!f) return cli_error(&err);
    /* The model loader re-opens the file; mappings are shared by the kernel. */
    kvp_model *m = kvp_model_load(path, &merr);
    int rc = json ? inspect_json(path, f, m, &merr) : inspect_text(path, f, m, &merr);
    kvp_model_free(m);
    gguf_close(f);
    return rc;
}
