/* Hugging Face tokenizer.json loader (BPE models). Maps the JSON pipeline onto the same
 * tokenizer state the GGUF loader fills:
 *   normalizer    null | NFC | Replace(" " -> "▁") | Sequence of those
 *   pre_tokenizer null | ByteLevel | Split(Regex, Isolated) | Split(" ") after the "▁"
 *                 normalizer (a no-op: no spaces remain) | Sequence of those
 *   model         BPE with vocab, merges ("a b" or ["a","b"]), byte_fallback, ignore_merges
 *   added_tokens  special -> control, others -> user-defined
 * bos/eos and add_bos come from tokenizer_config.json next to the file, when present.
 * Anything else is refused with an error naming it. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/readfile.h"
#include "tokenizer_impl.h"

static cJSON *parse_json_buffer(const char *text, size_t len, const char *path, kvp_error *err) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        size_t off = end ? (size_t)(end - text) : 0, line = 1;
        for (size_t i = 0; i < off && i < len; i++) line += text[i] == '\n';
        kvp_fail(err, KVP_E_FORMAT, "%s: invalid JSON near line %zu (byte %zu)", path, line, off);
    }
    return j;
}

static cJSON *parse_json(const char *path, kvp_error *err) {
    size_t len;
    char *text = kvp_read_file(path, &len);
    if (!text) {
        kvp_fail(err, KVP_E_IO, "%s: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    cJSON *j = parse_json_buffer(text, len, path, err);
    free(text);
    return j;
}

static int is_type(const cJSON *o, const char *type) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) && !strcmp(t->valuestring, type);
}

static const char *str_field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

typedef struct hf_loader {
    kvp_tokenizer *t;
    const char *path;
    kvp_error *err;
    const char *regex[TOK_MAX_REGEX + 1];
    int n_regex;
} hf_loader;

static int unsupported(hf_loader *h, const char *what, const cJSON *o) {
    const char *type = o ? str_field(o, "type") : NULL;
    return kvp_fail(h->err, KVP_E_UNSUPPORTED, "%s: %s '%s' is not supported", h->path, what, type ? type : "?");
}

static int load_normalizer(hf_loader *h, const cJSON *n) {
    if (!n || cJSON_IsNull(n)) return 0;
    if (is_type(n, "Sequence")) {
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(n, "normalizers")) if (load_normalizer(h, item)) return h->err->code;
        return 0;
    }
    if (is_type(n, "NFC")) {
        h->t->nfc = 1;
        return 0;
    }
    if (is_type(n, "Replace")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
        const char *s = pat ? str_field(pat, "String") : NULL, *content = str_field(n, "content");
        if (s && content && !strcmp(s, " ") && !strcmp(content, "\xE2\x96\x81")) {
            h->t->space_to_meta = 1;
            return 0;
        }
    }
    return unsupported(h, "normalizer", n);
}

static int load_pre(hf_loader *h, const cJSON *p) {
    if (!p || cJSON_IsNull(p)) return 0;
    if (is_type(p, "Sequence")) {
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItemCaseSensitive(p, "pretokenizers")) if (load_pre(h, item)) return h->err->code;
        return 0;
    }
    if (is_type(p, "ByteLevel")) {
        h->t->byte_level = 1;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "add_prefix_space"))) return unsupported(h, "ByteLevel add_prefix_space", p);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "use_regex")) && h->n_regex < TOK_MAX_REGEX)
            h->regex[h->n_regex++] =
                "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
        return 0;
    }
    if (is_type(p, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const char *re = pat ? str_field(pat, "Regex") : NULL, *s = pat ? str_field(pat, "String") : NULL;
        const char *behavior = str_field(p, "behavior");
        int invert = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "invert"));
        if (re && behavior && !strcmp(behavior, "Isolated") && !invert && h->n_regex < TOK_MAX_REGEX) {
            h->regex[h->n_regex++] = re;
            return 0;
        }
        /* Splitting on " " after spaces were replaced by "▁" never matches (Gemma 3). */
        if (s && !strcmp(s, " ") && h->t->space_to_meta) return 0;
    }
    return unsupported(h, "pre-tokenizer", p);
}

/* Add or overwrite a vocabulary entry (copying its text). */
static int set_token(hf_loader *h, int id, const char *text, int type) {
    kvp_tokenizer *t = h->t;
    if (id < 0 || id >= t->n_vocab)
        return kvp_fail(h->err, KVP_E_FORMAT, "%s: token id %d out of range", h->path, id);
    if (t->owned_text[id]) {
        if (!strcmp(t->owned_text[id], text)) {
            t->type[id] = type;
            return 0;
        }
        return kvp_fail(h->err, KVP_E_FORMAT, "%s: token id %d assigned twice", h->path, id);
    }
    if (!(t->owned_text[id] = strdup(text))) return kvp_fail(h->err, KVP_E_NOMEM, "out of memory");
    t->text[id].ptr = t->owned_text[id];
    t->text[id].len = strlen(text);
    t->type[id] = type;
    return 0;
}

static int load_merges(hf_loader *h, const cJSON *merges) {
    kvp_tokenizer *t = h->t;
    int n = cJSON_GetArraySize(merges);
    size_t total = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        if (cJSON_IsString(m)) total += strlen(m->valuestring) + 1;
        else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                 cJSON_IsString(cJSON_GetArrayItem(m, 1)))
            total += strlen(cJSON_GetArrayItem(m, 0)->valuestring) + strlen(cJSON_GetArrayItem(m, 1)->valuestring) + 2;
        else
            return kvp_fail(h->err, KVP_E_FORMAT, "%s: a merge is neither \"a b\" nor [\"a\", \"b\"]", h->path);
    }
    if (!(t->merge_blob = malloc(total + 1)) || strmap_init(&t->merge_rank, (size_t)n))
        return kvp_fail(h->err, KVP_E_NOMEM, "out of memory");
    char *p = t->merge_blob;
    int rank = 0;
    cJSON_ArrayForEach(m, merges) {
        size_t len;
        if (cJSON_IsString(m)) {
            len = strlen(m->valuestring);
            memcpy(p, m->valuestring, len);
        } else {
            const char *a = cJSON_GetArrayItem(m, 0)->valuestring, *b = cJSON_GetArrayItem(m, 1)->valuestring;
            size_t la = strlen(a), lb = strlen(b);
            memcpy(p, a, la);
            p[la] = ' ';
            memcpy(p + la + 1, b, lb);
            len = la + 1 + lb;
        }
        if (strmap_put(&t->merge_rank, p, len, rank++)) return kvp_fail(h->err, KVP_E_NOMEM, "out of memory");
        p += len;
    }
    return 0;
}

/* Special token named in tokenizer_config.json (a string or {"content": ...}). */
static int32_t config_token(const kvp_tokenizer *t, const cJSON *cfg, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    const char *s = cJSON_IsString(v) ? v->valuestring : (cJSON_IsObject(v) ? str_field(v, "content") : NULL);
    return s ? strmap_get(&t->by_text, s, strlen(s)) : -1;
}

static void load_config(kvp_tokenizer *t, const char *json_path) {
    char cfg_path[4096];
    const char *slash = strrchr(json_path, '/');
    int dir = slash ? (int)(slash - json_path + 1) : 0;
    snprintf(cfg_path, sizeof cfg_path, "%.*stokenizer_config.json", dir, json_path);
    kvp_error ignore = {0};
    FILE *probe = fopen(cfg_path, "rb");
    if (!probe) return;
    fclose(probe);
    cJSON *cfg = parse_json(cfg_path, &ignore);
    if (!cfg) return;
    t->bos = config_token(t, cfg, "bos_token");
    t->eos = config_token(t, cfg, "eos_token");
    int32_t unk = config_token(t, cfg, "unk_token");
    if (unk >= 0) t->unk = unk;
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
    if (cJSON_IsBool(ab)) t->add_bos = cJSON_IsTrue(ab);
    cJSON_Delete(cfg);
}

static kvp_tokenizer *load_hf(cJSON *j, const char *path, int with_config, kvp_error *err);

kvp_tokenizer *kvp_tokenizer_load_hf(const char *path, kvp_error *err) {
    cJSON *j = parse_json(path, err);
    return j ? load_hf(j, path, 1, err) : NULL;
}

kvp_tokenizer *kvp_tokenizer_load_hf_buffer(const char *json, size_t len, const char *name, kvp_error *err) {
    cJSON *j = parse_json_buffer(json, len, name, err);
    return j ? load_hf(j, name, 0, err) : NULL;
}

/* Build the tokenizer from parsed JSON (consumed). */
static kvp_tokenizer *load_hf(cJSON *j, const char *path, int with_config, kvp_error *err) {
    kvp_tokenizer *t = calloc(1, sizeof *t);
    hf_loader h = {.t = t, .path = path, .err = err};
    if (!t) {
        kvp_fail(err, KVP_E_NOMEM, "out of memory");
        goto fail;
    }
    t->bos = t->eos = t->eot = t->eom = t->unk = -1;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    if (!model || !is_type(model, "BPE")) {
        unsupported(&h, "tokenizer model", model);
        goto fail;
    }
    t->kind = KVP_VOCAB_BPE;
    t->algo = TOK_ALGO_BPE;
    t->byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    t->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    if (load_normalizer(&h, cJSON_GetObjectItemCaseSensitive(j, "normalizer")) ||
        load_pre(&h, cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer")))
        goto fail;
    if (t->space_to_meta) t->kind = KVP_VOCAB_SPM; /* SentencePiece-style text, merged by rank */
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab"), *added = cJSON_GetObjectItemCaseSensitive(j, "added_tokens");
    const cJSON *e;
    int max_id = -1;
    cJSON_ArrayForEach(e, vocab) if (cJSON_IsNumber(e) && e->valuedouble > max_id) max_id = e->valuedouble >= INT32_MAX ? INT32_MAX : e->valueint;
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (cJSON_IsNumber(id) && id->valuedouble > max_id) max_id = id->valuedouble >= INT32_MAX ? INT32_MAX : id->valueint;
    }
    /* Ids are dense in real files; a hole-ridden id space (or a hostile huge id) is refused
     * before anything is allocated for it. */
    int n_entries = cJSON_GetArraySize(vocab) + cJSON_GetArraySize(added);
    if (max_id < 0 || max_id >= n_entries) {
        kvp_fail(err, KVP_E_FORMAT, "%s: token ids must lie in [0, %d) (number of entries), found %d", path, n_entries,
                 max_id);
        goto fail;
    }
    t->n_vocab = max_id + 1;
    t->text = calloc((size_t)t->n_vocab, sizeof *t->text);
    t->owned_text = calloc((size_t)t->n_vocab, sizeof *t->owned_text);
    t->score = calloc((size_t)t->n_vocab, sizeof *t->score);
    t->type = calloc((size_t)t->n_vocab, sizeof *t->type);
    if (!t->text || !t->owned_text || !t->score || !t->type) {
        kvp_fail(err, KVP_E_NOMEM, "out of memory");
        goto fail;
    }
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e)) {
            kvp_fail(err, KVP_E_FORMAT, "%s: vocab entry '%.40s' has no integer id", path, e->string);
            goto fail;
        }
        int type = KVP_TOK_NORMAL;
        unsigned v;
        if (t->byte_fallback && strlen(e->string) == 6 && sscanf(e->string, "<0x%2X>", &v) == 1) type = KVP_TOK_BYTE;
        if (set_token(&h, e->valueint, e->string, type)) goto fail;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const char *content = str_field(e, "content");
        if (!cJSON_IsNumber(id) || !content) {
            kvp_fail(err, KVP_E_FORMAT, "%s: added token without id/content", path);
            goto fail;
        }
        int special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special"));
        if (set_token(&h, id->valueint, content, special ? KVP_TOK_CONTROL : KVP_TOK_USER_DEFINED)) goto fail;
    }
    if (strmap_init(&t->by_text, (size_t)t->n_vocab)) {
        kvp_fail(err, KVP_E_NOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < t->n_vocab; i++) {
        if (!t->text[i].ptr) { /* holes in the id space stay unusable */
            t->text[i].ptr = "";
            t->type[i] = KVP_TOK_UNUSED;
            continue;
        }
        if (strmap_put(&t->by_text, t->text[i].ptr, t->text[i].len, i)) {
            kvp_fail(err, KVP_E_NOMEM, "out of memory");
            goto fail;
        }
    }
    const char *unk = str_field(model, "unk_token");
    if (unk) t->unk = strmap_get(&t->by_text, unk, strlen(unk));
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (merges && load_merges(&h, merges)) goto fail;
    h.regex[h.n_regex] = NULL;
    if (tok_set_regexes(t, h.regex, err)) goto fail;
    if (with_config) load_config(t, path);
    if (tok_finish_load(t, err)) goto fail;
    cJSON_Delete(j);
    return t;
fail:
    cJSON_Delete(j);
    kvp_tokenizer_free(t);
    return NULL;
}
