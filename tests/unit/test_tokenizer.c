/* Tokenizer conformance against Hugging Face (tools/make_tokenizer_goldens.py): every corpus
 * string, every tokenizer, both modes (special tokens parsed / not), exact ids; decode parity;
 * decode(encode(s)) == s; and linear work on pathological inputs. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <zlib.h>

#include "harness.h"
#include "kvprobe/kvprobe.h"

#define GOLD "tests/golden/tokenizer/"

typedef struct tok_case {
    const char *name;  /* golden file prefix */
    const char *path;  /* tokenizer.json or GGUF */
    int gguf;
} tok_case;

/* The Qwen2.5 GGUF is checked against transformers' tokenizer of it with the NFC normalizer that
 * conversion drops (the Qwen family's tokenizer.json has it; the goldens script checks those ids
 * equal the shared Qwen3 tokenizer.json's wherever their added tokens agree).
 * The Gemma 3 GGUF is checked against the original Gemma 3 tokenizer.json (same vocabulary).
 * transformers' own conversion of the GGUF (goldens "gemma3-270m-gguf") rebuilds it as a
 * Unigram model and splits long whitespace runs differently from the real tokenizer (26 of
 * the corpus strings), so it is not the reference here. */
static const tok_case CASES[] = {
    {"qwen3", "../shared/tokenizers/qwen3/tokenizer.json", 0},
    {"llama3", "../shared/tokenizers/llama3/tokenizer.json", 0},
    {"gemma3", "../shared/tokenizers/gemma3/tokenizer.json", 0},
    {"gemma3", "models/gemma-3-270m-q4_k_m.gguf", 1},
    {"smollm2-gguf-digits", "models/SmolLM2-135M-Instruct.Q4_1.gguf", 1},
    {"qwen2.5-gguf-nfc", "models/qwen2.5-coder-0.5b-instruct.gguf", 1},
};

/* Read a whole gzip text file into lines. */
typedef struct lines {
    char **line;
    int n;
} lines;

static int read_lines(const char *path, lines *out) {
    gzFile f = gzopen(path, "rb");
    memset(out, 0, sizeof *out);
    if (!f) return -1;
    size_t cap = 1 << 20, len = 0;
    char *all = malloc(cap);
    int r;
    while ((r = gzread(f, all + len, (unsigned)(cap - len - 1))) > 0) {
        len += (size_t)r;
        if (cap - len < 65536) all = realloc(all, cap *= 2);
    }
    gzclose(f);
    all[len] = 0;
    int ncap = 1024;
    out->line = malloc((size_t)ncap * sizeof *out->line);
    for (char *p = all; *p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        if (out->n == ncap) out->line = realloc(out->line, (size_t)(ncap *= 2) * sizeof *out->line);
        out->line[out->n++] = p;
        if (!nl) break;
        p = nl + 1;
    }
    if (out->n == 0) free(all);
    return 0;
}

static void free_lines(lines *l) {
    if (l->n) free(l->line[0]);
    free(l->line);
}

typedef struct corpus_item {
    char *bytes;
    size_t len;
    int valid; /* 1 = valid UTF-8 text, 0 = raw invalid bytes */
} corpus_item;

static int load_corpus(corpus_item **items, int *n) {
    lines l;
    if (read_lines(GOLD "corpus.jsonl.gz", &l)) return -1;
    *items = calloc((size_t)l.n, sizeof **items);
    *n = l.n;
    for (int i = 0; i < l.n; i++) {
        cJSON *j = cJSON_Parse(l.line[i]);
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text"), *hex = cJSON_GetObjectItemCaseSensitive(j, "hex");
        corpus_item *it = &(*items)[i];
        if (cJSON_IsString(text)) {
            /* cJSON strings stop at NUL; the corpus has none (checked by the count below). */
            it->len = strlen(text->valuestring);
            it->bytes = malloc(it->len + 1);
            memcpy(it->bytes, text->valuestring, it->len + 1);
            it->valid = 1;
        } else if (cJSON_IsString(hex)) {
            size_t hl = strlen(hex->valuestring);
            it->len = hl / 2;
            it->bytes = malloc(it->len + 1);
            for (size_t k = 0; k < it->len; k++) {
                unsigned v;
                sscanf(hex->valuestring + 2 * k, "%2x", &v);
                it->bytes[k] = (char)v;
            }
            it->bytes[it->len] = 0;
        }
        cJSON_Delete(j);
    }
    free_lines(&l);
    return 0;
}

/* Decode a line holding one JSON string (cJSON stops at \u0000, so do it here). */
static char *json_string(const char *s, size_t *len) {
    size_t cap = strlen(s) + 1, n = 0;
    char *o = malloc(cap);
    if (*s++ != '"') return free(o), NULL;
    while (*s && *s != '"') {
        unsigned cp;
        if (*s != '\\') {
            o[n++] = *s++;
            continue;
        }
        s++;
        switch (*s) {
        case 'n': cp = '\n'; break;
        case 't': cp = '\t'; break;
        case 'r': cp = '\r'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'u': {
            sscanf(s + 1, "%4x", &cp);
            s += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && s[1] == '\\' && s[2] == 'u') {
                unsigned lo;
                sscanf(s + 3, "%4x", &lo);
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                s += 6;
            }
            break;
        }
        default: cp = (unsigned char)*s;
        }
        s++;
        if (cp < 0x80) o[n++] = (char)cp;
        else if (cp < 0x800) o[n++] = (char)(0xC0 | cp >> 6), o[n++] = (char)(0x80 | (cp & 63));
        else if (cp < 0x10000)
            o[n++] = (char)(0xE0 | cp >> 12), o[n++] = (char)(0x80 | ((cp >> 6) & 63)), o[n++] = (char)(0x80 | (cp & 63));
        else
            o[n++] = (char)(0xF0 | cp >> 18), o[n++] = (char)(0x80 | ((cp >> 12) & 63)),
            o[n++] = (char)(0x80 | ((cp >> 6) & 63)), o[n++] = (char)(0x80 | (cp & 63));
    }
    o[n] = 0;
    *len = n;
    return o;
}

static int parse_ids(const char *s, int32_t *out, int cap) {
    int n = 0;
    while (*s && n < cap) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) break;
        out[n++] = (int32_t)v;
        s = end;
    }
    return n;
}

/* HF's added tokens of a reference tokenizer (meta.json): content and special flag. */
typedef struct added_tokens {
    cJSON *root;
    const cJSON *list; /* [[id, content, special], ...] */
} added_tokens;

static void load_added(const char *name, added_tokens *a) {
    memset(a, 0, sizeof *a);
    FILE *f = fopen(GOLD "meta.json", "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    b[fread(b, 1, (size_t)n, f)] = 0;
    fclose(f);
    a->root = cJSON_Parse(b);
    free(b);
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(a->root, "tokenizers"), name);
    a->list = cJSON_GetObjectItemCaseSensitive(tk, "added_tokens");
}

/* Does text contain an added token whose HF special flag disagrees with the GGUF's type
 * (HF special <-> GGUF control)? Then plain-mode splitting legitimately differs. */
static int flag_disagreement(const kvp_tokenizer *t, const added_tokens *a, const char *text) {
    const cJSON *e;
    cJSON_ArrayForEach(e, a->list) {
        int id = cJSON_GetArrayItem(e, 0)->valueint;
        const char *content = cJSON_GetArrayItem(e, 1)->valuestring;
        int hf_special = cJSON_IsTrue(cJSON_GetArrayItem(e, 2));
        int gguf_control = kvp_token_type(t, id) == KVP_TOK_CONTROL;
        if (hf_special != gguf_control && strstr(text, content)) return 1;
    }
    return 0;
}

static void print_ids(const char *label, const int32_t *ids, int n) {
    printf("#     %s:", label);
    for (int i = 0; i < n && i < 40; i++) printf(" %d", ids[i]);
    printf(n > 40 ? " ...\n" : "\n");
}

static void conformance(const tok_case *tc, const corpus_item *items, int n_items) {
    char title[160], path[256];
    kvp_error err = {0};
    gguf_file *g = NULL;
    kvp_tokenizer *t = NULL;
    if (tc->gguf) {
        if ((g = gguf_open(tc->path, &err))) t = kvp_tokenizer_load(g, &err);
    } else {
        t = kvp_tokenizer_load_hf(tc->path, &err);
    }
    snprintf(title, sizeof title, "tokenizer %s: loads", tc->name);
    TEST(title) CHECK(t != NULL, "%s", err.msg);
    if (!t) {
        gguf_close(g);
        return;
    }
    int32_t *want = malloc(sizeof(int32_t) * 1000000);
    added_tokens added;
    load_added(tc->name, &added);
    for (int mode = 0; mode < 2; mode++) {
        const char *mname = mode ? "special" : "plain";
        lines gl;
        snprintf(path, sizeof path, GOLD "%s.%s.ids.gz", tc->name, mname);
        snprintf(title, sizeof title, "tokenizer %s: %s mode, exact ids on every corpus string", tc->name, mname);
        TEST(title) {
            CHECK(read_lines(path, &gl) == 0 && gl.n >= n_items, "golden %s unreadable", path);
            if (gl.n < n_items) continue;
            int bad = 0, explained = 0;
            uint64_t total_tokens = 0;
            for (int i = 0; i < n_items; i++) {
                int nw = parse_ids(gl.line[i], want, 1000000);
                kvp_tok_opts o = {.add_bos = 0, .parse_special = mode};
                kvp_tokens r;
                if (kvp_tokenize_ex(t, items[i].bytes, items[i].len, &o, &r, &err)) {
                    bad++;
                    NOTE("string %d: %s", i, err.msg);
                    continue;
                }
                total_tokens += (uint64_t)r.n;
                if (r.n != nw || (nw && memcmp(r.ids, want, (size_t)nw * sizeof(int32_t)) != 0)) {
                    /* A GGUF cannot say what HF knows about added tokens: tokens beyond the
                     * GGUF's vocabulary, and added tokens HF does not mark special but the GGUF
                     * types as control (matched in plain text by HF only). Those differences
                     * are explained; any other is a failure. */
                    int why = tc->gguf && !mode && flag_disagreement(t, &added, items[i].bytes);
                    for (int k = 0; tc->gguf && k < nw; k++)
                        if (want[k] >= kvp_tokenizer_n_vocab(t)) why = 1;
                    if (why) {
                        explained++;
                        kvp_tokens_free(&r);
                        continue;
                    }
                    if (bad < 4) {
                        NOTE("string %d (%zu bytes) differs: '%.60s'", i, items[i].len, items[i].bytes);
                        print_ids("kvprobe", r.ids, r.n);
                        print_ids("HF     ", want, nw);
                    }
                    bad++;
                }
                kvp_tokens_free(&r);
            }
            CHECK(bad == 0, "%d of %d strings differ", bad, n_items);
            NOTE("%s%s %s: %d strings, %llu tokens, %d mismatches (%d more explained by GGUF token metadata)", tc->name,
                 tc->gguf ? " (GGUF)" : "", mname, n_items, (unsigned long long)total_tokens, bad, explained);
            free_lines(&gl);
        }
    }
    lines dl;
    snprintf(path, sizeof path, GOLD "%s.decode.gz", tc->name);
    snprintf(title, sizeof title, "tokenizer %s: decode equals HF decode; decode(encode(s)) == s", tc->name);
    TEST(title) {
        CHECK(read_lines(path, &dl) == 0 && dl.n >= n_items, "golden %s unreadable", path);
        if (dl.n < n_items) continue;
        int bad = 0, not_round = 0, lossy_in_hf = 0;
        for (int i = 0; i < n_items; i++) {
            kvp_tokens r;
            kvp_tok_opts o = {0};
            if (kvp_tokenize_ex(t, items[i].bytes, items[i].len, &o, &r, &err)) continue;
            char *text;
            size_t len;
            kvp_detokenize(t, r.ids, r.n, 1, &text, &len);
            size_t wl = 0;
            char *want_s = json_string(dl.line[i], &wl);
            int same_as_hf = want_s && wl == len && !memcmp(want_s, text, len);
            if (!same_as_hf && bad++ < 3) NOTE("decode %d: '%.60s' vs HF '%.60s'", i, text, want_s ? want_s : "?");
            if (items[i].valid && (len != items[i].len || memcmp(text, items[i].bytes, len))) {
                /* Allowed only where HF's own decode loses the same information: the tokenizer's
                 * normalization (NFC), SentencePiece's U+2581 read back as a space, characters
                 * the vocabulary cannot represent. */
                if (same_as_hf) lossy_in_hf++;
                else if (not_round++ < 3) NOTE("round trip %d: '%.60s' -> '%.60s'", i, items[i].bytes, text);
            }
            free(want_s);
            free(text);
            kvp_tokens_free(&r);
        }
        CHECK(bad == 0, "%d decodes differ from HF", bad);
        CHECK(not_round == 0, "%d valid strings do not round-trip", not_round);
        NOTE("%s: decode parity %d/%d; decode(encode(s)) == s except %d strings HF's decode does not restore either",
             tc->name, n_items - bad, n_items, lossy_in_hf);
        free_lines(&dl);
    }
    free(want);
    cJSON_Delete(added.root);
    kvp_tokenizer_free(t);
    gguf_close(g);
}

/* Work (merge steps + regex matches) per input byte must stay bounded as inputs grow. */
static void complexity(void) {
    kvp_error err = {0};
    gguf_file *g = gguf_open("models/SmolLM2-135M-Instruct.Q4_1.gguf", &err);
    kvp_tokenizer *bpe = g ? kvp_tokenizer_load(g, &err) : NULL;
    gguf_file *g2 = gguf_open("models/gemma-3-270m-q4_k_m.gguf", &err);
    kvp_tokenizer *spm = g2 ? kvp_tokenizer_load(g2, &err) : NULL;
    const char *pats[] = {" ", "a", "\n", "1", "\xF0\x9F\x98\x80", "ab ", "\xFF", "<|im_end|>"};
    TEST("tokenizer: pathological 1 MB inputs cost O(n log n) work, no crash") {
        CHECK(bpe && spm, "%s", err.msg);
        if (!bpe || !spm) continue;
        double worst = 0;
        for (size_t k = 0; k < sizeof pats / sizeof pats[0]; k++) {
            for (int size = 1 << 14; size <= 1 << 20; size <<= 6) {
                size_t pl = strlen(pats[k]);
                char *s = malloc((size_t)size + pl);
                size_t len = 0;
                while (len + pl <= (size_t)size) memcpy(s + len, pats[k], pl), len += pl;
                for (int w = 0; w < 2; w++) {
                    kvp_tokens r;
                    kvp_tok_opts o = {.parse_special = 1};
                    int rc = kvp_tokenize_ex(w ? spm : bpe, s, len, &o, &r, &err);
                    CHECK(rc == 0, "%s", err.msg);
                    double per = (double)r.ops / (double)len;
                    if (per > worst) worst = per;
                    /* O(n log n): allow ~4 heap ops per byte per doubling level (log2(1M) = 20) */
                    CHECK(per < 100, "pattern %zu size %d: %.1f ops/byte", k, size, per);
                    kvp_tokens_free(&r);
                }
                free(s);
            }
        }
        NOTE("worst work: %.1f operations per input byte (1 MB inputs)", worst);
    }
    TEST("tokenizer: empty input and invalid UTF-8") {
        kvp_tokens r;
        CHECK(bpe && kvp_tokenize_ex(bpe, "", 0, NULL, &r, &err) == 0 && r.n == 0, "empty");
        if (bpe) kvp_tokens_free(&r);
        CHECK(bpe && kvp_tokenize_ex(bpe, "a\xC3(b\xED\xA0\x80" "c\xF0\x9F", 10, NULL, &r, &err) == 0 && r.n_replaced == 5, /* C3 | ED | A0 | 80 | F0 9F, as Python */
              "replacements %d", r.n_replaced);
        if (bpe) kvp_tokens_free(&r);
    }
    kvp_tokenizer_free(bpe);
    kvp_tokenizer_free(spm);
    gguf_close(g);
    gguf_close(g2);
}

int main(void) {
    corpus_item *items = NULL;
    int n = 0;
    TEST("tokenizer corpus: at least 2000 strings") {
        CHECK(load_corpus(&items, &n) == 0, "corpus unreadable");
        CHECK(n >= 2000, "only %d strings", n);
    }
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) conformance(&CASES[i], items, n);
    complexity();
    for (int i = 0; i < n; i++) free(items[i].bytes);
    free(items);
    return harness_finish();
}
