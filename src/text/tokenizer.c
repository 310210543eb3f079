/* Tokenizer front end: loading from GGUF metadata, the special-token splitter, UTF-8
 * cleaning and normalization, and decoding. The merge algorithms live in encode.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer_impl.h"

/* ---- pre-tokenizers by tokenizer.ggml.pre ------------------------------------------------ */

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
    int ignore_merges, nfc;
    const char *re[TOK_MAX_REGEX + 1];
} PRE_DEFS[] = {
    {"default", 0, 0, {REGEX_GPT2}},
    {"gpt2", 0, 0, {REGEX_GPT2}},
    {"llama3", 1, 0, {REGEX_LLAMA3}},
    {"llama-v3", 1, 0, {REGEX_LLAMA3}},
    {"llama-bpe", 1, 0, {REGEX_LLAMA3}},
    {"qwen2", 0, 1, {REGEX_QWEN2}}, /* Qwen2/2.5/3: HF declares an NFC normalizer */
    {"smollm", 0, 0, {"\\p{N}", REGEX_GPT2}},
    {"starcoder", 0, 0, {"\\p{N}", REGEX_GPT2}},
};

int tok_set_regexes(kvp_tokenizer *t, const char *const *patterns, kvp_error *err) {
    for (int i = 0; i < TOK_MAX_REGEX && patterns[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        t->re[i] = pcre2_compile((PCRE2_SPTR)patterns[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        if (!t->re[i]) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(ec, msg, sizeof msg);
            return kvp_fail(err, KVP_E_UNSUPPORTED, "pre-tokenizer regex does not compile at %zu: %s", (size_t)eo,
                            (const char *)msg);
        }
        pcre2_jit_compile(t->re[i], PCRE2_JIT_COMPLETE); /* the interpreter is the fallback */
        t->n_re = i + 1;
    }
    return 0;
}

static int gguf_pre(kvp_tokenizer *t, const gguf_file *f, kvp_error *err) {
    gguf_str pre = {"default", 7};
    int rc = gguf_get_str(f, "tokenizer.ggml.pre", &pre, err);
    if (rc > 1) return rc;
    for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++)
        if (gguf_str_eq(pre, PRE_DEFS[i].name)) {
            t->ignore_merges = PRE_DEFS[i].ignore_merges;
            t->nfc = PRE_DEFS[i].nfc;
            return tok_set_regexes(t, PRE_DEFS[i].re, err);
        }
    return kvp_fail(err, KVP_E_UNSUPPORTED, "%s: pre-tokenizer '%.*s' is not supported", f->path,
                    (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);
}

/* ---- loading ----------------------------------------------------------------------------- */

static int is_eog_text(const char *p, size_t n) {
    static const char *const names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                        "<|eom_id|>", "<EOT>", "<|end_of_text|>", "<eos>"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == n && !memcmp(p, names[i], n)) return 1;
    return 0;
}

static int by_first_byte(const void *a, const void *b, void *ctx) {
    const kvp_tokenizer *t = ctx;
    const struct tok_str *x = &t->text[*(const int32_t *)a], *y = &t->text[*(const int32_t *)b];
    unsigned char fx = (unsigned char)x->ptr[0], fy = (unsigned char)y->ptr[0];
    if (fx != fy) return fx - fy;
    if (x->len != y->len) return x->len > y->len ? -1 : 1; /* longest first */
    return *(const int32_t *)a - *(const int32_t *)b;
}

int tok_finish_load(kvp_tokenizer *t, kvp_error *err) {
    t->eog = calloc((size_t)t->n_vocab, 1);
    t->special_ids = malloc((size_t)t->n_vocab * sizeof *t->special_ids);
    if (!t->eog || !t->special_ids) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    for (int i = 0; i < t->n_vocab; i++) {
        int ty = t->type[i];
        if ((ty == KVP_TOK_CONTROL || ty == KVP_TOK_USER_DEFINED) && t->text[i].len > 0) {
            t->special_ids[t->n_special++] = i;
            if (is_eog_text(t->text[i].ptr, t->text[i].len)) t->eog[i] = 1;
        }
    }
    qsort_r(t->special_ids, (size_t)t->n_special, sizeof *t->special_ids, by_first_byte, t);
    for (int b = 0, k = 0; b <= 256; b++) {
        while (k < t->n_special && (unsigned char)t->text[t->special_ids[k]].ptr[0] < b) k++;
        t->special_first[b] = k;
    }
    int32_t ids[] = {t->eos, t->eot, t->eom};
    for (int i = 0; i < 3; i++)
        if (ids[i] >= 0) t->eog[ids[i]] = 1;
    int n = 0;
    for (int i = 0; i < 324; i++) t->cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        t->byte_to_cp[b] = (uint16_t)(printable ? b : 256 + n++);
        t->cp_to_byte[t->byte_to_cp[b]] = (int16_t)b;
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        int len;
        if (t->byte_level) {
            len = (int)utf8proc_encode_char(t->byte_to_cp[b], (utf8proc_uint8_t *)name);
        } else {
            len = snprintf(name, sizeof name, "<0x%02X>", b);
        }
        t->byte_token[b] = strmap_get(&t->by_text, name, (size_t)len);
    }
    return 0;
}

static int load_special_id(kvp_tokenizer *t, const gguf_file *f, const char *key, int32_t *out, kvp_error *err) {
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

static int load_merges(kvp_tokenizer *t, const gguf_file *f, kvp_error *err) {
    const gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.merges");
    if (!kv) return 0;
    if (kv->value.type != GGUF_VT_ARRAY ||
        (kv->value.v.arr.n > 0 && kv->value.v.arr.elem_type != GGUF_VT_STRING))
        return kvp_fail(err, KVP_E_FORMAT, "%s: tokenizer.ggml.merges must be a string array", f->path);
    uint64_t n = kv->value.v.arr.n;
    if (strmap_init(&t->merge_rank, n)) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    for (uint64_t i = 0; i < n && i < INT32_MAX; i++) {
        gguf_str s = kv->value.v.arr.elems[i].v.s;
        if (strmap_put(&t->merge_rank, s.ptr, s.len, (int32_t)i)) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    }
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
    if (gguf_str_eq(model, "llama")) {
        t->kind = KVP_VOCAB_SPM;
        t->algo = TOK_ALGO_SPM;
        t->space_to_meta = 1;
        t->byte_fallback = 1;
    } else if (gguf_str_eq(model, "gpt2")) {
        t->kind = KVP_VOCAB_BPE;
        t->algo = TOK_ALGO_BPE;
        t->byte_level = 1;
    } else {
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
    if (!t->text || !t->score || !t->type || strmap_init(&t->by_text, (size_t)t->n_vocab)) {
        kvp_fail(err, KVP_E_NOMEM, "out of memory");
        goto fail;
    }
    const gguf_kv *sc = gguf_find_kv(f, "tokenizer.ggml.scores"), *ty = gguf_find_kv(f, "tokenizer.ggml.token_type");
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
        gguf_str s = tk->value.v.arr.elems[i].v.s;
        t->text[i].ptr = s.ptr;
        t->text[i].len = s.len;
        t->score[i] = sc ? (float)gguf_arr_f64(&sc->value, (uint64_t)i) : 0.0f;
        t->type[i] = ty ? (int32_t)gguf_arr_i64(&ty->value, (uint64_t)i) : KVP_TOK_NORMAL;
        if (strmap_put(&t->by_text, s.ptr, s.len, i)) {
            kvp_fail(err, KVP_E_NOMEM, "out of memory");
            goto fail;
        }
    }
    if (load_special_id(t, f, "tokenizer.ggml.bos_token_id", &t->bos, err) ||
        load_special_id(t, f, "tokenizer.ggml.eos_token_id", &t->eos, err) ||
        load_special_id(t, f, "tokenizer.ggml.eot_token_id", &t->eot, err) ||
        load_special_id(t, f, "tokenizer.ggml.eom_token_id", &t->eom, err) ||
        load_special_id(t, f, "tokenizer.ggml.unknown_token_id", &t->unk, err))
        goto fail;
    t->add_bos = t->kind == KVP_VOCAB_SPM;
    if (gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos, err) > 1) goto fail;
    if (t->kind == KVP_VOCAB_BPE && (load_merges(t, f, err) || gguf_pre(t, f, err))) goto fail;
    if (tok_finish_load(t, err)) goto fail;
    return t;
fail:
    kvp_tokenizer_free(t);
    return NULL;
}

void kvp_tokenizer_free(kvp_tokenizer *t) {
    if (!t) return;
    if (t->owned_text) {
        for (int i = 0; i < t->n_vocab; i++) free(t->owned_text[i]);
        free(t->owned_text);
    }
    free(t->text);
    free(t->score);
    free(t->type);
    free(t->eog);
    free(t->special_ids);
    free(t->merge_blob);
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

/* ---- cleaning: invalid UTF-8 -> U+FFFD (maximal subparts, as Python's decode) ------------ */

/* Length of the valid UTF-8 sequence at p (1..4), or -k where k >= 1 bytes form a maximal
 * invalid subpart to be replaced by one U+FFFD. */
static int utf8_step(const unsigned char *p, size_t left) {
    unsigned char c = p[0];
    if (c < 0x80) return 1;
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
    else if (c == 0xED) need = 2, hi = 0x9F;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) need = 3, hi = 0x8F;
    else return -1;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= left) return -k;
        unsigned char b = p[k];
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return -k;
    }
    return need + 1;
}

int kvp_utf8_clean(const char *text, size_t len, char **out, size_t *out_len, int *n_replaced) {
    char *b = malloc(len * 3 + 1); /* each invalid byte grows to at most 3 */
    if (!b) return -1;
    size_t n = 0;
    int rep = 0;
    for (size_t i = 0; i < len;) {
        int s = utf8_step((const unsigned char *)text + i, len - i);
        if (s > 0) {
            memcpy(b + n, text + i, (size_t)s);
            n += (size_t)s;
            i += (size_t)s;
        } else {
            memcpy(b + n, "\xEF\xBF\xBD", 3);
            n += 3;
            i += (size_t)-s;
            rep++;
        }
    }
    b[n] = 0;
    *out = b;
    *out_len = n;
    if (n_replaced) *n_replaced = rep;
    return 0;
}

int kvp_tokenizer_normalize(const kvp_tokenizer *t, const char *text, size_t len, char **out, size_t *out_len) {
    char *clean;
    size_t clen;
    if (kvp_utf8_clean(text, len, &clean, &clen, NULL)) return -1;
    if (!t->nfc || !clen) {
        *out = clean;
        *out_len = clen;
        return 0;
    }
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)clean, (utf8proc_ssize_t)clen, &nfc,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    free(clean);
    if (r < 0) return -1;
    *out = (char *)nfc;
    *out_len = (size_t)r;
    return 0;
}

/* ---- tokenize ---------------------------------------------------------------------------- */

/* Match token text tok against input p: bytes equal, except that for SentencePiece-style
 * tokenizers a space and U+2581 match each other (the converter stores user-defined tokens
 * like "  " raw while text is matched after ' ' -> U+2581, as HF does). Returns the input
 * bytes consumed and the token's length in normalized characters, or 0. */
static size_t match_special(const kvp_tokenizer *t, const char *tok, size_t tl, const char *p, size_t left, size_t *norm) {
    size_t i = 0, j = 0, n = 0;
    while (i < tl) {
        int ts = tok[i] == ' ', tm = tl - i >= 3 && !memcmp(tok + i, "\xE2\x96\x81", 3);
        if (t->space_to_meta && (ts || tm)) {
            if (j < left && p[j] == ' ') j += 1;
            else if (left - j >= 3 && !memcmp(p + j, "\xE2\x96\x81", 3)) j += 3;
            else return 0;
            i += ts ? 1 : 3;
        } else {
            if (j >= left || p[j] != tok[i]) return 0;
            i++, j++;
        }
        n++;
    }
    *norm = n;
    return j;
}

/* Longest special token starting at p that may be matched here, or -1. */
static int32_t special_at(const kvp_tokenizer *t, const char *p, size_t left, int allow_control, size_t *mlen) {
    unsigned char firsts[3] = {(unsigned char)p[0], 0, 0};
    int nf = 1;
    if (t->space_to_meta && (p[0] == ' ' || (left >= 3 && !memcmp(p, "\xE2\x96\x81", 3)))) {
        firsts[0] = ' ';
        firsts[1] = 0xE2;
        nf = 2;
    }
    int32_t best = -1;
    size_t best_norm = 0;
    for (int f = 0; f < nf; f++) {
        unsigned char b = firsts[f];
        for (int k = t->special_first[b]; k < t->special_first[b + 1]; k++) {
            int32_t id = t->special_ids[k];
            if (t->type[id] == KVP_TOK_CONTROL && !allow_control) continue;
            size_t norm, used = match_special(t, t->text[id].ptr, t->text[id].len, p, left, &norm);
            if (used && norm > best_norm) {
                best = id;
                best_norm = norm;
                *mlen = used;
            }
        }
    }
    return best;
}

/* Normalize (NFC where declared) and encode one plain segment of the cleaned text, appending
 * its normalized bytes to *norm so offsets stay meaningful. */
static int encode_segment(const kvp_tokenizer *t, const char *p, size_t len, tok_out *out, char **norm, size_t *nlen,
                          size_t *ncap) {
    const char *src = p;
    size_t slen = len;
    utf8proc_uint8_t *nfc = NULL;
    if (t->nfc && len) {
        utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)len, &nfc,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (r < 0) return -1;
        src = (const char *)nfc;
        slen = (size_t)r;
    }
    if (*nlen + slen + 1 > *ncap) {
        size_t cap = (*nlen + slen + 1) * 2;
        char *q = realloc(*norm, cap);
        if (!q) {
            free(nfc);
            return -1;
        }
        *norm = q;
        *ncap = cap;
    }
    memcpy(*norm + *nlen, src, slen);
    int rc = tok_encode_plain(t, *norm + *nlen, slen, *nlen, out);
    *nlen += slen;
    free(nfc);
    return rc;
}

int kvp_tokenize_ex(const kvp_tokenizer *t, const char *text, size_t len, const kvp_tok_opts *opts, kvp_tokens *res,
                    kvp_error *err) {
    memset(res, 0, sizeof *res);
    kvp_tok_opts def = {0};
    if (!opts) opts = &def;
    char *clean = NULL, *norm = NULL;
    size_t clen = 0, nlen = 0, ncap = 0;
    tok_out out = {0};
    if (kvp_utf8_clean(text, len, &clean, &clen, &res->n_replaced)) goto oom;
    if (opts->special_mask && res->n_replaced)
        return free(clean), kvp_fail(err, KVP_E_INVALID, "tokenize: a special-token mask needs valid UTF-8 input");
    if (opts->add_bos && t->bos >= 0 && tok_push(&out, t->bos, 0)) goto oom;
    size_t seg = 0;
    for (size_t i = 0; i < clen;) {
        size_t ml = 0;
        int allow = opts->special_mask ? opts->special_mask[i] : opts->parse_special;
        int32_t id = t->n_special ? special_at(t, clean + i, clen - i, allow, &ml) : -1;
        out.ops++;
        if (id < 0) {
            i++;
            continue;
        }
        if (i > seg && encode_segment(t, clean + seg, i - seg, &out, &norm, &nlen, &ncap)) goto oom;
        /* specials are copied verbatim into the normalized text */
        if (nlen + ml + 1 > ncap) {
            char *q = realloc(norm, ncap = (nlen + ml + 1) * 2);
            if (!q) goto oom;
            norm = q;
        }
        memcpy(norm + nlen, clean + i, ml);
        if (tok_push(&out, id, nlen)) goto oom;
        nlen += ml;
        i += ml;
        seg = i;
    }
    if (clen > seg && encode_segment(t, clean + seg, clen - seg, &out, &norm, &nlen, &ncap)) goto oom;
    if (!norm && !(norm = malloc(1))) goto oom;
    norm[nlen] = 0;
    free(clean);
    res->ids = out.ids;
    res->offsets = out.offs;
    res->n = out.n;
    res->text = norm;
    res->text_len = nlen;
    res->ops = out.ops;
    return 0;
oom:
    free(clean);
    free(norm);
    free(out.ids);
    free(out.offs);
    return kvp_fail(err, KVP_E_NOMEM, "out of memory while tokenizing");
}

void kvp_tokens_free(kvp_tokens *r) {
    free(r->ids);
    free(r->offsets);
    free(r->text);
    memset(r, 0, sizeof *r);
}

int kvp_tokenize(const kvp_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special, int32_t **out,
                 int *n_out, kvp_error *err) {
    kvp_tok_opts o = {.add_bos = add_bos, .parse_special = parse_special};
    kvp_tokens r;
    *out = NULL;
    *n_out = 0;
    if (kvp_tokenize_ex(t, text, len, &o, &r, err)) return err->code;
    *out = r.ids;
    *n_out = r.n;
    free(r.offsets);
    free(r.text);
    return 0;
}

/* ---- decode ------------------------------------------------------------------------------ */

size_t kvp_token_to_bytes(const kvp_tokenizer *t, int32_t id, int special, char *buf, size_t cap) {
    if (id < 0 || id >= t->n_vocab) return 0;
    const struct tok_str s = t->text[id];
    int ty = t->type[id];
    size_t n = 0;
#define OUT(c)                             \
    do {                                   \
        if (n < cap) buf[n] = (char)(c);   \
        n++;                               \
    } while (0)
    if (ty == KVP_TOK_CONTROL && !special) return 0;
    /* Byte-level added tokens are stored as plain text, not byte-mapped. */
    if (ty == KVP_TOK_CONTROL || (t->byte_level && (ty == KVP_TOK_USER_DEFINED || ty == KVP_TOK_UNKNOWN))) {
        for (size_t i = 0; i < s.len; i++) OUT(s.ptr[i]);
        return n;
    }
    unsigned v;
    if (ty == KVP_TOK_BYTE && s.len == 6 && sscanf(s.ptr, "<0x%2X>", &v) == 1) {
        OUT(v);
        return n;
    }
    if (!t->byte_level) { /* SentencePiece: U+2581 -> space */
        for (size_t i = 0; i < s.len; i++) {
            if (t->space_to_meta && i + 2 < s.len && !memcmp(s.ptr + i, "\xE2\x96\x81", 3)) {
                OUT(' ');
                i += 2;
            } else {
                OUT(s.ptr[i]);
            }
        }
        return n;
    }
    for (size_t i = 0; i < s.len;) { /* byte-level: code points back to bytes */
        utf8proc_int32_t cp;
        utf8proc_ssize_t cl = utf8proc_iterate((const utf8proc_uint8_t *)s.ptr + i, (utf8proc_ssize_t)(s.len - i), &cp);
        if (cl <= 0) {
            OUT(s.ptr[i]);
            i++;
            continue;
        }
        if (cp >= 0 && cp < 324 && t->cp_to_byte[cp] >= 0) OUT(t->cp_to_byte[cp]);
        else
            for (utf8proc_ssize_t k = 0; k < cl; k++) OUT(s.ptr[i + (size_t)k]);
        i += (size_t)cl;
    }
#undef OUT
    return n;
}

int kvp_detokenize(const kvp_tokenizer *t, const int32_t *ids, int n, int special, char **out, size_t *out_len) {
    size_t cap = 64, len = 0;
    char *b = malloc(cap);
    if (!b) return -1;
    for (int i = 0; i < n; i++) {
        size_t need = kvp_token_to_bytes(t, ids[i], special, NULL, 0);
        if (len + need + 1 > cap) {
            while (len + need + 1 > cap) cap *= 2;
            char *q = realloc(b, cap);
            if (!q) {
                free(b);
                return -1;
            }
            b = q;
        }
        kvp_token_to_bytes(t, ids[i], special, b + len, need);
        len += need;
    }
    b[len] = 0;
    *out = b;
    *out_len = len;
    return 0;
}
