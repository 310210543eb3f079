/* Tokenizers from GGUF metadata: SentencePiece-style BPE by score (SPM) and byte-level BPE
 * by merge rank (GPT-2 family), with PCRE2 pre-tokenizer regexes chosen by
 * tokenizer.ggml.pre. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "../util/strmap.h"
#include "kvprobe/tokenizer.h"

#define MAX_REGEX 3

struct kvp_tokenizer {
    kvp_vocab_kind kind;
    int n_vocab;
    gguf_str *text;   /* [n_vocab] into the GGUF mapping */
    float *score;     /* [n_vocab] (SPM) */
    int32_t *type;    /* [n_vocab] */
    strmap by_text;
    strmap merge_rank; /* "left right" -> rank (BPE) */
    char **merge_keys; /* owned copies backing merge_rank when needed */
    int32_t bos, eos, eot, eom;
    int add_bos;
    int ignore_merges;
    int32_t byte_token[256]; /* SPM: <0xXX> ids; BPE: id of each byte's mapped char */
    uint16_t byte_to_cp[256]; /* GPT-2 bytes_to_unicode */
    int16_t cp_to_byte[324];
    pcre2_code *re[MAX_REGEX];
    int n_re;
    uint8_t *eog;     /* [n_vocab] */
};

/* ---- loading ----------------------------------------------------------------------------- */

static void init_byte_map(kvp_tokenizer *t) {
    int n = 0;
    for (int i = 0; i < 324; i++) t->cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        t->byte_to_cp[b] = (uint16_t)(printable ? b : 256 + n++);
        t->cp_to_byte[t->byte_to_cp[b]] = (int16_t)b;
    }
}

static int load_special(kvp_tokenizer *t, const gguf_file *f, const char *key, int32_t *out, kvp_error *err) {
    int64_t v;
    *out = -1;
    int rc = gguf_get_i64(f, key, &v, err);
    if (rc == 1) return 0;
    if (rc) return rc;
    if (v < 0 || v >= t->n_vocab)
        return kvp_fail(err, KVP_E_FORMAT, "%s: %s = %lld is not a token id (vocabulary has %d)", f->path, key,
                        (long long)v, t->n_vocab);
    *out = (int32_t)v;
    return 0;
}

static const char *const REGEX_GPT2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
static const char *const REGEX_LLAMA3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const REGEX_QWEN2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const struct pre_def {
    const char *name;
    int ignore_merges;
    const char *re[MAX_REGEX];
} PRE_DEFS[] = {
    {"default", 0, {REGEX_GPT2}},
    {"gpt2", 0, {REGEX_GPT2}},
    {"llama3", 1, {REGEX_LLAMA3}},
    {"llama-v3", 1, {REGEX_LLAMA3}},
    {"llama-bpe", 1, {REGEX_LLAMA3}},
    {"qwen2", 0, {REGEX_QWEN2}},
    {"smollm", 0, {"\\p{N}", REGEX_GPT2}},
    {"starcoder", 0, {"\\p{N}", REGEX_GPT2}},
};

static int compile_pre(kvp_tokenizer *t, const gguf_file *f, kvp_error *err) {
    gguf_str pre = {"default", 7};
    int rc = gguf_get_str(f, "tokenizer.ggml.pre", &pre, err);
    if (rc > 1) return rc;
    const struct pre_def *def = NULL;
    for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++)
        if (gguf_str_eq(pre, PRE_DEFS[i].name)) def = &PRE_DEFS[i];
    if (!def)
        return kvp_fail(err, KVP_E_UNSUPPORTED, "%s: pre-tokenizer '%.*s' is not supported", f->path,
                        (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);
    t->ignore_merges = def->ignore_merges;
    for (int i = 0; i < MAX_REGEX && def->re[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        t->re[i] = pcre2_compile((PCRE2_SPTR)def->re[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK,
                                 &ec, &eo, NULL);
        if (!t->re[i]) return kvp_fail(err, KVP_E_INVALID, "internal: pre-tokenizer regex %d failed at %zu", i, (size_t)eo);
        pcre2_jit_compile(t->re[i], PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is unavailable */
        t->n_re = i + 1;
    }
    return 0;
}

static int load_merges(kvp_tokenizer *t, const gguf_file *f, kvp_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.merges");
    if (!kv) return 0;
    if (kv->value.type != GGUF_VT_ARRAY || kv->value.v.arr.elem_type != GGUF_VT_STRING)
        return kvp_fail(err, KVP_E_FORMAT, "%s: tokenizer.ggml.merges must be a string array", f->path);
    uint64_t n = kv->value.v.arr.n;
    if (strmap_init(&t->merge_rank, n)) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    for (uint64_t i = 0; i < n && i < INT32_MAX; i++) {
        gguf_str s = kv->value.v.arr.elems[i].v.s;
        if (strmap_put(&t->merge_rank, s.ptr, s.len, (int32_t)i)) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    }
    return 0;
}

static int is_eog_text(gguf_str s) {
    static const char *const names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                        "<|eom_id|>", "<EOT>", "<|end_of_text|>", "<eos>"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (gguf_str_eq(s, names[i])) return 1;
    return 0;
}

kvp_tokenizer *kvp_tokenizer_load(const gguf_file *f, kvp_error *err) {
    kvp_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        kvp_fail(err, KVP_E_NOMEM, "out of memory");
        return NULL;
    }
    gguf_str model;
    int rc = gguf_get_str(f, "tokenizer.ggml.model", &model, err);
    if (rc == 1) {
        kvp_fail(err, KVP_E_FORMAT, "%s: no tokenizer (missing 'tokenizer.ggml.model')", f->path);
        goto fail;
    }
    if (rc) goto fail;
    if (gguf_str_eq(model, "llama")) t->kind = KVP_VOCAB_SPM;
    else if (gguf_str_eq(model, "gpt2")) t->kind = KVP_VOCAB_BPE;
    else {
        kvp_fail(err, KVP_E_UNSUPPORTED, "%s: tokenizer model '%.*s' is not supported (llama, gpt2)", f->path,
                 (int)(model.len > 64 ? 64 : model.len), model.ptr);
        goto fail;
    }
    const gguf_kv *tk = gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (!tk || tk->value.type != GGUF_VT_ARRAY || tk->value.v.arr.elem_type != GGUF_VT_STRING ||
        tk->value.v.arr.n == 0 || tk->value.v.arr.n > INT32_MAX) {
        kvp_fail(err, KVP_E_FORMAT, "%s: tokenizer.ggml.tokens missing or not a non-empty string array", f->path);
        goto fail;
    }
    t->n_vocab = (int)tk->value.v.arr.n;
    t->text = calloc((size_t)t->n_vocab, sizeof *t->text);
    t->score = calloc((size_t)t->n_vocab, sizeof *t->score);
    t->type = calloc((size_t)t->n_vocab, sizeof *t->type);
    t->eog = calloc((size_t)t->n_vocab, 1);
    if (!t->text || !t->score || !t->type || !t->eog || strmap_init(&t->by_text, (size_t)t->n_vocab)) {
        kvp_fail(err, KVP_E_NOMEM, "out of memory");
        goto fail;
    }
    const gguf_kv *sc = gguf_find_kv(f, "tokenizer.ggml.scores");
    const gguf_kv *ty = gguf_find_kv(f, "tokenizer.ggml.token_type");
    if (sc && (sc->value.type != GGUF_VT_ARRAY || sc->value.v.arr.n != (uint64_t)t->n_vocab || !sc->value.v.arr.raw ||
               sc->value.v.arr.elem_type == GGUF_VT_BOOL)) {
        kvp_fail(err, KVP_E_FORMAT, "%s: tokenizer.ggml.scores must be a numeric array of %d", f->path, t->n_vocab);
        goto fail;
    }
    if (ty && (ty->value.type != GGUF_VT_ARRAY || ty->value.v.arr.n != (uint64_t)t->n_vocab || !ty->value.v.arr.raw)) {
        kvp_fail(err, KVP_E_FORMAT, "%s: tokenizer.ggml.token_type must be an integer array of %d", f->path, t->n_vocab);
        goto fail;
    }
    for (int i = 0; i < t->n_vocab; i++) {
        t->text[i] = tk->value.v.arr.elems[i].v.s;
        t->score[i] = sc ? (float)gguf_arr_f64(&sc->value, (uint64_t)i) : 0.0f;
        t->type[i] = ty ? (int32_t)gguf_arr_i64(&ty->value, (uint64_t)i) : KVP_TOK_NORMAL;
        if (strmap_put(&t->by_text, t->text[i].ptr, t->text[i].len, i)) {
            kvp_fail(err, KVP_E_NOMEM, "out of memory");
            goto fail;
        }
        if ((t->type[i] == KVP_TOK_CONTROL || t->type[i] == KVP_TOK_USER_DEFINED) && is_eog_text(t->text[i]))
            t->eog[i] = 1;
    }
    if (load_special(t, f, "tokenizer.ggml.bos_token_id", &t->bos, err) ||
        load_special(t, f, "tokenizer.ggml.eos_token_id", &t->eos, err) ||
        load_special(t, f, "tokenizer.ggml.eot_token_id", &t->eot, err) ||
        load_special(t, f, "tokenizer.ggml.eom_token_id", &t->eom, err))
        goto fail;
    int32_t ids[] = {t->eos, t->eot, t->eom};
    for (int i = 0; i < 3; i++)
        if (ids[i] >= 0) t->eog[ids[i]] = 1;
    t->add_bos = t->kind == KVP_VOCAB_SPM;
    if (gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos, err) > 1) goto fail;
    init_byte_map(t);
    char name[8];
    for (int b = 0; b < 256; b++) {
        if (t->kind == KVP_VOCAB_SPM) {
            snprintf(name, sizeof name, "<0x%02X>", b);
            t->byte_token[b] = strmap_get(&t->by_text, name, 6);
        } else {
            char u[4];
            int n = (int)utf8proc_encode_char(t->byte_to_cp[b], (utf8proc_uint8_t *)u);
            t->byte_token[b] = strmap_get(&t->by_text, u, (size_t)n);
        }
    }
    if (t->kind == KVP_VOCAB_BPE && (load_merges(t, f, err) || compile_pre(t, f, err))) goto fail;
    return t;
fail:
    kvp_tokenizer_free(t);
    return NULL;
}

void kvp_tokenizer_free(kvp_tokenizer *t) {
    if (!t) return;
    free(t->text);
    free(t->score);
    free(t->type);
    free(t->eog);
    strmap_free(&t->by_text);
    strmap_free(&t->merge_rank);
    for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    free(t);
}

kvp_vocab_kind kvp_tokenizer_kind(const kvp_tokenizer *t) { return t->kind; }
int kvp_tokenizer_n_vocab(const kvp_tokenizer *t) { return t->n_vocab; }
int32_t kvp_tokenizer_bos(const kvp_tokenizer *t) { return t->bos; }
int32_t kvp_tokenizer_eos(const kvp_tokenizer *t) { return t->eos; }
int kvp_tokenizer_add_bos(const kvp_tokenizer *t) { return t->add_bos; }
int kvp_token_is_eog(const kvp_tokenizer *t, int32_t id) { return id >= 0 && id < t->n_vocab && t->eog[id]; }
int kvp_token_type(const kvp_tokenizer *t, int32_t id) { return id >= 0 && id < t->n_vocab ? t->type[id] : 0; }

const char *kvp_token_text(const kvp_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return "";
    }
    *len = t->text[id].len;
    return t->text[id].ptr;
}

int32_t kvp_token_lookup(const kvp_tokenizer *t, const char *text, size_t len) {
    return strmap_get(&t->by_text, text, len);
}

/* ---- output buffer ----------------------------------------------------------------------- */

typedef struct tokbuf {
    int32_t *ids;
    int n, cap;
} tokbuf;

static int push(tokbuf *b, int32_t id) {
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 64;
        int32_t *p = realloc(b->ids, (size_t)cap * sizeof *p);
        if (!p) return -1;
        b->ids = p;
        b->cap = cap;
    }
    b->ids[b->n++] = id;
    return 0;
}

/* ---- SPM: merge the adjacent pair with the highest score --------------------------------- */

typedef struct spm_sym {
    int prev, next;
    const char *p;
    int len; /* 0 once merged away */
} spm_sym;

typedef struct spm_bigram {
    float score;
    int left, len;
} spm_bigram;

typedef struct heap {
    spm_bigram *a;
    int n, cap;
} heap;

static int bigram_before(const spm_bigram *x, const spm_bigram *y) { /* higher score, then leftmost */
    return x->score > y->score || (x->score == y->score && x->left < y->left);
}

static int heap_push(heap *h, spm_bigram b) {
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 64;
        spm_bigram *p = realloc(h->a, (size_t)cap * sizeof *p);
        if (!p) return -1;
        h->a = p;
        h->cap = cap;
    }
    int i = h->n++;
    while (i > 0 && bigram_before(&b, &h->a[(i - 1) / 2])) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = b;
    return 0;
}

static spm_bigram heap_pop(heap *h) {
    spm_bigram top = h->a[0], last = h->a[--h->n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bigram_before(&h->a[c + 1], &h->a[c])) c++;
        if (!bigram_before(&h->a[c], &last)) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n) h->a[i] = last;
    return top;
}

static int spm_try_bigram(const kvp_tokenizer *t, heap *h, spm_sym *s, int l, int r) {
    if (l < 0 || r < 0) return 0;
    int32_t id = strmap_get(&t->by_text, s[l].p, (size_t)(s[l].len + s[r].len));
    if (id < 0) return 0;
    return heap_push(h, (spm_bigram){t->score[id], l, s[l].len + s[r].len});
}

static int spm_emit(const kvp_tokenizer *t, tokbuf *out, const char *p, int len) {
    int32_t id = strmap_get(&t->by_text, p, (size_t)len);
    if (id >= 0) return push(out, id);
    for (int i = 0; i < len; i++) { /* byte fallback */
        int32_t b = t->byte_token[(unsigned char)p[i]];
        if (push(out, b >= 0 ? b : (t->type && t->n_vocab > 0 ? 0 : 0))) return -1;
    }
    return 0;
}

static int spm_encode(const kvp_tokenizer *t, const char *text, size_t len, tokbuf *out, kvp_error *err) {
    /* Spaces become U+2581 '▁'. */
    size_t nsp = 0;
    for (size_t i = 0; i < len; i++) nsp += text[i] == ' ';
    char *esc = malloc(len + 2 * nsp + 1);
    spm_sym *sym = malloc((len + 1) * sizeof *sym);
    heap h = {0};
    int rc = 0;
    if (!esc || !sym) goto oom;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + n, "\xE2\x96\x81", 3);
            n += 3;
        } else {
            esc[n++] = text[i];
        }
    }
    int ns = 0;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t cl = utf8proc_iterate((const utf8proc_uint8_t *)esc + i, (utf8proc_ssize_t)(n - i), &cp);
        if (cl <= 0) cl = 1; /* validated by the caller; keep going byte-wise regardless */
        sym[ns] = (spm_sym){ns - 1, ns + 1, esc + i, (int)cl};
        ns++;
        i += (size_t)cl;
    }
    if (ns) sym[ns - 1].next = -1;
    for (int i = 0; i + 1 < ns; i++)
        if (spm_try_bigram(t, &h, sym, i, i + 1)) goto oom;
    while (h.n) {
        spm_bigram b = heap_pop(&h);
        spm_sym *l = &sym[b.left];
        if (l->len == 0 || l->next < 0 || l->len + sym[l->next].len != b.len) continue; /* stale */
        spm_sym *r = &sym[l->next];
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        if (spm_try_bigram(t, &h, sym, l->prev, b.left) || spm_try_bigram(t, &h, sym, b.left, l->next)) goto oom;
    }
    for (int i = 0; ns && i >= 0; i = sym[i].next)
        if (spm_emit(t, out, sym[i].p, sym[i].len)) goto oom;
    goto done;
oom:
    rc = kvp_fail(err, KVP_E_NOMEM, "out of memory while tokenizing");
done:
    free(esc);
    free(sym);
    free(h.a);
    return rc;
}

/* ---- BPE: byte-level, merge the adjacent pair with the lowest rank ----------------------- */

static int32_t merge_rank(const kvp_tokenizer *t, const char *a, int al, const char *b, int bl, char *scratch) {
    memcpy(scratch, a, (size_t)al);
    scratch[al] = ' ';
    memcpy(scratch + al + 1, b, (size_t)bl);
    return strmap_get(&t->merge_rank, scratch, (size_t)(al + bl + 1));
}

static int bpe_piece(const kvp_tokenizer *t, const char *piece, size_t len, tokbuf *out) {
    /* Map bytes to GPT-2 code points (each 1-2 UTF-8 bytes). */
    char *enc = malloc(len * 2 + 1), *scratch = malloc(len * 4 + 2);
    int *start = malloc((len + 1) * sizeof *start), *slen = malloc((len + 1) * sizeof *slen);
    int rc = -1;
    if (!enc || !scratch || !start || !slen) goto done;
    int n = 0, ns = 0;
    for (size_t i = 0; i < len; i++) {
        int cl = (int)utf8proc_encode_char(t->byte_to_cp[(unsigned char)piece[i]], (utf8proc_uint8_t *)enc + n);
        start[ns] = n;
        slen[ns++] = cl;
        n += cl;
    }
    if (t->ignore_merges) {
        int32_t id = strmap_get(&t->by_text, enc, (size_t)n);
        if (id >= 0) {
            rc = push(out, id);
            goto done;
        }
    }
    /* Symbols are contiguous spans of enc; merging joins a span with its right neighbour. */
    for (;;) {
        int best = -1;
        int32_t best_rank = INT32_MAX;
        for (int i = 0; i + 1 < ns; i++) {
            int32_t r = merge_rank(t, enc + start[i], slen[i], enc + start[i + 1], slen[i + 1], scratch);
            if (r >= 0 && r < best_rank) {
                best_rank = r;
                best = i;
            }
        }
        if (best < 0) break;
        slen[best] += slen[best + 1];
        memmove(start + best + 1, start + best + 2, (size_t)(ns - best - 2) * sizeof *start);
        memmove(slen + best + 1, slen + best + 2, (size_t)(ns - best - 2) * sizeof *slen);
        ns--;
    }
    for (int i = 0; i < ns; i++) {
        int32_t id = strmap_get(&t->by_text, enc + start[i], (size_t)slen[i]);
        if (id >= 0) {
            if (push(out, id)) goto done;
            continue;
        }
        for (int j = 0; j < slen[i];) { /* unknown symbol: one token per mapped byte */
            utf8proc_int32_t cp;
            utf8proc_ssize_t cl = utf8proc_iterate((const utf8proc_uint8_t *)enc + start[i] + j, slen[i] - j, &cp);
            if (cl <= 0 || cp < 0 || cp >= 324 || t->cp_to_byte[cp] < 0) break;
            int32_t b = t->byte_token[t->cp_to_byte[cp]];
            if (b >= 0 && push(out, b)) goto done;
            j += (int)cl;
        }
    }
    rc = 0;
done:
    free(enc);
    free(scratch);
    free(start);
    free(slen);
    return rc;
}

/* Split [p, p+len) with regex level `lvl`, recursing into the next level for every match
 * and every gap between matches; the last level's fragments are BPE-encoded. */
static int bpe_split(const kvp_tokenizer *t, int lvl, const char *p, size_t len, pcre2_match_data *md, tokbuf *out) {
    if (len == 0) return 0;
    if (lvl == t->n_re) return bpe_piece(t, p, len, out);
    size_t pos = 0, last = 0;
    while (pos <= len) {
        int m = pcre2_match(t->re[lvl], (PCRE2_SPTR)p, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m < 0) break;
        /* Copy the match bounds: the recursion below reuses md. */
        size_t m0 = pcre2_get_ovector_pointer(md)[0], m1 = pcre2_get_ovector_pointer(md)[1];
        if (m0 > last && bpe_split(t, lvl + 1, p + last, m0 - last, md, out)) return -1;
        if (m1 > m0 && bpe_split(t, lvl + 1, p + m0, m1 - m0, md, out)) return -1;
        last = m1 > m0 ? m1 : m0;
        size_t next = m1 > m0 ? m1 : m0 + 1;
        while (next < len && (p[next] & 0xC0) == 0x80) next++; /* empty match: step one character */
        pos = next;
    }
    return last < len ? bpe_split(t, lvl + 1, p + last, len - last, md, out) : 0;
}

static int bpe_encode(const kvp_tokenizer *t, const char *text, size_t len, tokbuf *out, kvp_error *err) {
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    if (!md) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    int rc = bpe_split(t, 0, text, len, md, out);
    pcre2_match_data_free(md);
    return rc ? kvp_fail(err, KVP_E_NOMEM, "out of memory while tokenizing") : 0;
}

/* ---- entry points ------------------------------------------------------------------------ */

static int check_utf8(const char *text, size_t len, kvp_error *err) {
    for (size_t i = 0; i < len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t cl = utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(len - i), &cp);
        if (cl <= 0) return kvp_fail(err, KVP_E_FORMAT, "invalid UTF-8 at byte %zu", i);
        i += (size_t)cl;
    }
    return 0;
}

/* Encode plain text (no special-token parsing) into out. */
static int encode_text(const kvp_tokenizer *t, const char *text, size_t len, tokbuf *out, kvp_error *err) {
    return t->kind == KVP_VOCAB_SPM ? spm_encode(t, text, len, out, err) : bpe_encode(t, text, len, out, err);
}

/* Longest control/user-defined token whose text starts at p, or -1. */
static int32_t special_at(const kvp_tokenizer *t, const char *p, size_t left, size_t *mlen) {
    int32_t best = -1;
    size_t bl = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        if (t->type[i] != KVP_TOK_CONTROL && t->type[i] != KVP_TOK_USER_DEFINED) continue;
        size_t l = t->text[i].len;
        if (l > bl && l <= left && memcmp(p, t->text[i].ptr, l) == 0) {
            best = i;
            bl = l;
        }
    }
    *mlen = bl;
    return best;
}

int kvp_tokenize(const kvp_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special, int32_t **out,
                 int *n_out, kvp_error *err) {
    tokbuf b = {0};
    *out = NULL;
    *n_out = 0;
    if (check_utf8(text, len, err)) return err->code;
    if (add_bos && t->bos >= 0 && push(&b, t->bos)) goto oom;
    size_t seg = 0;
    if (parse_special) {
        for (size_t i = 0; i < len;) {
            size_t ml;
            int32_t id = text[i] == '<' ? special_at(t, text + i, len - i, &ml) : -1;
            if (id < 0) {
                i++;
                continue;
            }
            if (i > seg && encode_text(t, text + seg, i - seg, &b, err)) goto fail;
            if (push(&b, id)) goto oom;
            i += ml;
            seg = i;
        }
    }
    if (len > seg && encode_text(t, text + seg, len - seg, &b, err)) goto fail;
    *out = b.ids;
    *n_out = b.n;
    return 0;
oom:
    kvp_fail(err, KVP_E_NOMEM, "out of memory while tokenizing");
fail:
    free(b.ids);
    return err->code;
}

size_t kvp_token_to_bytes(const kvp_tokenizer *t, int32_t id, int special, char *buf, size_t cap) {
    if (id < 0 || id >= t->n_vocab) return 0;
    gguf_str s = t->text[id];
    int ty = t->type[id];
    size_t n = 0;
#define OUT(c) do { if (n < cap) buf[n] = (char)(c); n++; } while (0)
    if (ty == KVP_TOK_CONTROL) {
        if (!special) return 0;
        for (uint64_t i = 0; i < s.len; i++) OUT(s.ptr[i]);
        return n;
    }
    if (t->kind == KVP_VOCAB_SPM) {
        unsigned v;
        if (ty == KVP_TOK_BYTE && s.len == 6 && sscanf(s.ptr, "<0x%2X>", &v) == 1) {
            OUT(v);
            return n;
        }
        for (uint64_t i = 0; i < s.len; i++) {
            if (i + 2 < s.len && memcmp(s.ptr + i, "\xE2\x96\x81", 3) == 0) {
                OUT(' ');
                i += 2;
            } else {
                OUT(s.ptr[i]);
            }
        }
        return n;
    }
    if (ty == KVP_TOK_USER_DEFINED) {
        for (uint64_t i = 0; i < s.len; i++) OUT(s.ptr[i]);
        return n;
    }
    for (uint64_t i = 0; i < s.len;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t cl = utf8proc_iterate((const utf8proc_uint8_t *)s.ptr + i, (utf8proc_ssize_t)(s.len - i), &cp);
        if (cl <= 0) {
            OUT(s.ptr[i]);
            i++;
            continue;
        }
        if (cp >= 0 && cp < 324 && t->cp_to_byte[cp] >= 0) OUT(t->cp_to_byte[cp]);
        else
            for (utf8proc_ssize_t k = 0; k < cl; k++) OUT(s.ptr[i + (uint64_t)k]);
        i += (uint64_t)cl;
    }
#undef OUT
    return n;
}
