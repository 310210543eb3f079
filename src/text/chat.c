/* Chat templates: one small renderer per family, reproducing the Jinja templates of
 * Hugging Face tokenizer_config.json files byte for byte, with a segment label per byte.
 * Then tokenization with special tokens parsed only in scaffolding, and the BLANK donor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvprobe/chat.h"

/* ---- names ------------------------------------------------------------------------------ */

static const char *const SEG_NAMES[] = {"scaffold", "system", "user", "assistant"};

const char *kvp_segment_name(kvp_segment s) { return (unsigned)s < 4 ? SEG_NAMES[s] : "?"; }

static const struct {
    const char *name;
    kvp_template_kind kind;
} TEMPLATES[] = {
    {"none", KVP_TMPL_NONE},       {"chatml", KVP_TMPL_CHATML}, {"qwen2.5", KVP_TMPL_QWEN25},
    {"qwen3", KVP_TMPL_QWEN3},     {"gemma3", KVP_TMPL_GEMMA3}, {"llama3", KVP_TMPL_LLAMA3},
    {"llama3.1", KVP_TMPL_LLAMA31},
};

const char *kvp_template_name(kvp_template_kind k) {
    for (size_t i = 0; i < sizeof TEMPLATES / sizeof TEMPLATES[0]; i++)
        if (TEMPLATES[i].kind == k) return TEMPLATES[i].name;
    return "?";
}

int kvp_template_from_name(const char *name, kvp_template_kind *out) {
    for (size_t i = 0; i < sizeof TEMPLATES / sizeof TEMPLATES[0]; i++)
        if (!strcmp(TEMPLATES[i].name, name)) {
            *out = TEMPLATES[i].kind;
            return 0;
        }
    return -1;
}

/* ---- detection --------------------------------------------------------------------------- */

static const char *find_n(const char *hay, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(hay + i, needle, k)) return hay + i;
    return NULL;
}

void kvp_template_init(kvp_template *t) {
    memset(t, 0, sizeof *t);
    t->enable_thinking = 1;
    t->date_string = "26 Jul 2024";
}

int kvp_template_select(kvp_template *t, const char *name, kvp_error *err) {
    kvp_template_kind k;
    if (kvp_template_from_name(name, &k))
        return kvp_fail(err, KVP_E_INVALID, "unknown template '%s' (%s)", name, KVP_TEMPLATE_NAMES);
    if (k != t->kind) t->default_system[0] = 0;
    if (k == KVP_TMPL_QWEN25 && !t->default_system[0])
        snprintf(t->default_system, sizeof t->default_system, "%s", KVP_QWEN25_SYSTEM);
    t->kind = k;
    return 0;
}

/* The default system turn of a ChatML template: the literal text it writes between
 * '<|im_start|>system' + newline (a Jinja "\n" escape or a raw newline) and '<|im_end|>'.
 * Occurrences whose text is an expression (quotes, braces, escapes: the branch that writes
 * messages[0]['content'], or a tools preamble) are skipped. "" if there is none. */
static void chatml_default_system(const char *s, size_t n, char *out, size_t cap) {
    static const char open[] = "<|im_start|>system", close[] = "<|im_end|>";
    out[0] = 0;
    for (const char *p = s; (p = find_n(p, n - (size_t)(p - s), open)); p++) {
        const char *t = p + strlen(open), *end = s + n;
        if (end - t >= 2 && t[0] == '\\' && t[1] == 'n') t += 2;
        else if (t < end && *t == '\n') t++;
        else continue;
        const char *e = find_n(t, (size_t)(end - t), close);
        if (!e || e == t || (size_t)(e - t) >= cap) continue;
        int literal = 1;
        for (const char *q = t; q < e && literal; q++) literal = !strchr("'\"{}\\", *q);
        if (!literal) continue;
        memcpy(out, t, (size_t)(e - t));
        out[e - t] = 0;
        return;
    }
}

int kvp_template_detect(const gguf_file *f, kvp_template *out, kvp_error *err) {
    kvp_template_init(out);
    gguf_str tmpl, arch = {"", 0};
    int rc = gguf_get_str(f, "tokenizer.chat_template", &tmpl, err);
    if (rc == 1) { /* no template in the file: the family's own format, else raw prompts */
        gguf_get_str(f, "general.architecture", &arch, err);
        if (gguf_str_eq(arch, "gemma3")) out->kind = KVP_TMPL_GEMMA3;
        else if (gguf_str_eq(arch, "qwen3")) out->kind = KVP_TMPL_QWEN3;
        return 0;
    }
    if (rc) return rc;
    const char *s = tmpl.ptr;
    size_t n = tmpl.len;
    if (find_n(s, n, "<|im_start|>")) {
        /* Qwen3 writes think blocks; Qwen2.5 has the <tool_call> branch but none */
        out->kind = find_n(s, n, "<think>")       ? KVP_TMPL_QWEN3
                    : find_n(s, n, "<tool_call>") ? KVP_TMPL_QWEN25
                                                  : KVP_TMPL_CHATML;
        if (out->kind != KVP_TMPL_QWEN3) chatml_default_system(s, n, out->default_system, sizeof out->default_system);
        return 0;
    }
    if (find_n(s, n, "<start_of_turn>")) {
        out->kind = KVP_TMPL_GEMMA3;
        return 0;
    }
    if (find_n(s, n, "<|start_header_id|>") && find_n(s, n, "<|end_header_id|>")) {
        out->kind = find_n(s, n, "Cutting Knowledge Date") ? KVP_TMPL_LLAMA31 : KVP_TMPL_LLAMA3;
        return 0;
    }
    return kvp_fail(err, KVP_E_UNSUPPORTED,
                    "%s: chat template not recognized (starts '%.60s'); choose one with --template", f->path, s);
}

/* ---- rendering --------------------------------------------------------------------------- */

typedef struct out_buf {
    char *text;
    uint8_t *seg;
    size_t len, cap;
    int oom;
} out_buf;

static void put(out_buf *o, const char *s, size_t n, kvp_segment seg) {
    if (o->oom || !n) return;
    if (o->len + n + 1 > o->cap) {
        size_t cap = (o->len + n + 1) * 2;
        char *t = realloc(o->text, cap);
        uint8_t *g = t ? realloc(o->seg, cap) : NULL;
        if (t) o->text = t;
        if (!t || !g) {
            o->oom = 1;
            return;
        }
        o->seg = g;
        o->cap = cap;
    }
    memcpy(o->text + o->len, s, n);
    memset(o->seg + o->len, seg, n);
    o->len += n;
    o->text[o->len] = 0;
}

static void puts_seg(out_buf *o, const char *s, kvp_segment seg) { put(o, s, strlen(s), seg); }

/* Raw text (no template) starts with BOS where the tokenizer's add_bos_token asks for it, as
 * HF's tokenizer(text) and llama.cpp do: Gemma without BOS is a different, much worse model. */
int kvp_raw_bos(const kvp_tokenizer *t) { return kvp_tokenizer_bos(t) >= 0 && kvp_tokenizer_add_bos(t); }

static void put_bos(out_buf *o, const kvp_tokenizer *t) {
    size_t n = 0;
    const char *text = kvp_raw_bos(t) ? kvp_token_text(t, kvp_tokenizer_bos(t), &n) : NULL;
    if (text) put(o, text, n, KVP_SEG_SCAFFOLD);
}

/* Hand a finished rendering to out (an empty one as ""), or free it on an error or when it ran
 * out of memory. Returns rc, or KVP_E_NOMEM. */
static int render_finish(out_buf *o, int rc, kvp_prompt *out, kvp_error *err) {
    if (!rc && !o->oom && !o->text) { /* empty rendering */
        o->text = calloc(1, 1);
        o->seg = calloc(1, 1);
        o->oom = !o->text || !o->seg;
    }
    if (!rc && o->oom) rc = kvp_fail(err, KVP_E_NOMEM, "out of memory");
    if (rc) {
        free(o->text);
        free(o->seg);
        return rc;
    }
    out->text = o->text;
    out->len = o->len;
    out->byte_seg = o->seg;
    return 0;
}

/* A string view over message content. */
typedef struct view {
    const char *p;
    size_t n;
} view;

/* Python str.isspace() for the code point starting at p (UTF-8); returns its byte length
 * if it is whitespace, else 0. Matches Jinja's trim (str.strip()). */
static int py_space_at(const char *p, size_t n) {
    const unsigned char *u = (const unsigned char *)p;
    if (!n) return 0;
    if (u[0] == ' ' || (u[0] >= 0x09 && u[0] <= 0x0d) || (u[0] >= 0x1c && u[0] <= 0x1f)) return 1;
    if (n >= 2 && u[0] == 0xC2 && (u[1] == 0x85 || u[1] == 0xA0)) return 2;
    if (n >= 3 && u[0] == 0xE1 && u[1] == 0x9A && u[2] == 0x80) return 3;             /* U+1680 */
    if (n >= 3 && u[0] == 0xE2 && u[1] == 0x80 && (u[2] <= 0x8A || u[2] == 0xA8 || u[2] == 0xA9 || u[2] == 0xAF))
        return 3;                                                                      /* U+2000..200A, 2028, 2029, 202F */
    if (n >= 3 && u[0] == 0xE2 && u[1] == 0x81 && u[2] == 0x9F) return 3;             /* U+205F */
    if (n >= 3 && u[0] == 0xE3 && u[1] == 0x80 && u[2] == 0x80) return 3;             /* U+3000 */
    return 0;
}

/* Length of the whitespace code point ending at p+n, or 0. */
static int py_space_before(const char *p, size_t n) {
    for (int k = 1; k <= 3 && (size_t)k <= n; k++)
        if (py_space_at(p + n - k, (size_t)k) == k) return k;
    return 0;
}

static view trim(view v) {
    int k;
    while (v.n && (k = py_space_at(v.p, v.n))) v.p += k, v.n -= (size_t)k;
    while (v.n && (k = py_space_before(v.p, v.n))) v.n -= (size_t)k;
    return v;
}

static view strip_char(view v, char c, int left, int right) {
    while (left && v.n && v.p[0] == c) v.p++, v.n--;
    while (right && v.n && v.p[v.n - 1] == c) v.n--;
    return v;
}

static kvp_segment role_seg(const char *role) {
    if (!strcmp(role, "system")) return KVP_SEG_SYSTEM;
    if (!strcmp(role, "assistant")) return KVP_SEG_ASSISTANT;
    return KVP_SEG_USER;
}

/* A cleaned (UTF-8 valid, normalized as the tokenizer would) copy of each message's content. */
typedef struct msg_text {
    char *p;
    size_t n;
} msg_text;

static void render_chatml(out_buf *o, const kvp_template *tm, const kvp_message *m, const msg_text *c, int n, int gen) {
    for (int i = 0; i < n; i++) {
        if (i == 0 && tm->default_system[0] && strcmp(m[0].role, "system") != 0) {
            puts_seg(o, "<|im_start|>system\n", KVP_SEG_SCAFFOLD);
            puts_seg(o, tm->default_system, KVP_SEG_SCAFFOLD); /* template-written text */
            puts_seg(o, "<|im_end|>\n", KVP_SEG_SCAFFOLD);
        }
        puts_seg(o, "<|im_start|>", KVP_SEG_SCAFFOLD);
        puts_seg(o, m[i].role, KVP_SEG_SCAFFOLD);
        puts_seg(o, "\n", KVP_SEG_SCAFFOLD);
        put(o, c[i].p, c[i].n, role_seg(m[i].role));
        puts_seg(o, "<|im_end|>\n", KVP_SEG_SCAFFOLD);
    }
    if (gen) puts_seg(o, "<|im_start|>assistant\n", KVP_SEG_SCAFFOLD);
}

static int starts_with(view v, const char *s) { return v.n >= strlen(s) && !memcmp(v.p, s, strlen(s)); }
static int ends_with(view v, const char *s) {
    size_t k = strlen(s);
    return v.n >= k && !memcmp(v.p + v.n - k, s, k);
}

/* Last / first occurrence of s in v (NULL if none). */
static const char *find_last(view v, const char *s) {
    size_t k = strlen(s);
    for (size_t i = v.n >= k ? v.n - k + 1 : 0; i-- > 0;)
        if (!memcmp(v.p + i, s, k)) return v.p + i;
    return NULL;
}
static const char *find_first(view v, const char *s) { return find_n(v.p, v.n, s); }

static void render_qwen3(out_buf *o, const kvp_template *tm, const kvp_message *m, const msg_text *c, int n, int gen) {
    int first = 0;
    if (n > 0 && !strcmp(m[0].role, "system")) {
        puts_seg(o, "<|im_start|>system\n", KVP_SEG_SCAFFOLD);
        put(o, c[0].p, c[0].n, KVP_SEG_SYSTEM);
        puts_seg(o, "<|im_end|>\n", KVP_SEG_SCAFFOLD);
    }
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        view v = {c[i].p, c[i].n};
        if (!strcmp(m[i].role, "user") && !(starts_with(v, "<tool_response>") && ends_with(v, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (int i = first; i < n; i++) {
        view v = {c[i].p, c[i].n};
        if (!strcmp(m[i].role, "user") || (!strcmp(m[i].role, "system") && i != 0)) {
            puts_seg(o, "<|im_start|>", KVP_SEG_SCAFFOLD);
            puts_seg(o, m[i].role, KVP_SEG_SCAFFOLD);
            puts_seg(o, "\n", KVP_SEG_SCAFFOLD);
            put(o, v.p, v.n, role_seg(m[i].role));
            puts_seg(o, "<|im_end|>\n", KVP_SEG_SCAFFOLD);
        } else if (!strcmp(m[i].role, "assistant")) {
            view content = v, reasoning = {"", 0};
            const char *close = find_first(v, "</think>");
            if (close) {
                const char *last_close = find_last(v, "</think>");
                content = strip_char((view){last_close + 8, (size_t)(v.p + v.n - last_close - 8)}, '\n', 1, 0);
                view before = strip_char((view){v.p, (size_t)(close - v.p)}, '\n', 0, 1);
                const char *open = find_last(before, "<think>");
                reasoning = open ? (view){open + 7, (size_t)(before.p + before.n - open - 7)} : before;
                reasoning = strip_char(reasoning, '\n', 1, 0);
            }
            puts_seg(o, "<|im_start|>assistant\n", KVP_SEG_SCAFFOLD);
            if (i > last_query && (i == n - 1 || reasoning.n)) {
                view r = strip_char(reasoning, '\n', 1, 1);
                puts_seg(o, "<think>\n", KVP_SEG_SCAFFOLD);
                put(o, r.p, r.n, KVP_SEG_ASSISTANT);
                puts_seg(o, "\n</think>\n\n", KVP_SEG_SCAFFOLD);
                content = strip_char(content, '\n', 1, 0);
            }
            put(o, content.p, content.n, KVP_SEG_ASSISTANT);
            puts_seg(o, "<|im_end|>\n", KVP_SEG_SCAFFOLD);
        }
    }
    if (gen) {
        puts_seg(o, "<|im_start|>assistant\n", KVP_SEG_SCAFFOLD);
        if (!tm->enable_thinking) puts_seg(o, "<think>\n\n</think>\n\n", KVP_SEG_SCAFFOLD);
    }
}

static int render_gemma3(out_buf *o, const kvp_message *m, const msg_text *c, int n, int gen, kvp_error *err) {
    puts_seg(o, "<bos>", KVP_SEG_SCAFFOLD);
    int start = 0;
    if (n > 0 && !strcmp(m[0].role, "system")) start = 1;
    for (int i = start; i < n; i++) {
        int is_user = !strcmp(m[i].role, "user");
        if (is_user != ((i - start) % 2 == 0))
            return kvp_fail(err, KVP_E_INVALID, "gemma3 template: conversation roles must alternate user/assistant/...");
        puts_seg(o, "<start_of_turn>", KVP_SEG_SCAFFOLD);
        puts_seg(o, !strcmp(m[i].role, "assistant") ? "model" : m[i].role, KVP_SEG_SCAFFOLD);
        puts_seg(o, "\n", KVP_SEG_SCAFFOLD);
        if (i == start && start == 1) { /* the system text is folded into the first turn, untrimmed */
            put(o, c[0].p, c[0].n, KVP_SEG_SYSTEM);
            puts_seg(o, "\n\n", KVP_SEG_SCAFFOLD);
        }
        view v = trim((view){c[i].p, c[i].n});
        put(o, v.p, v.n, role_seg(m[i].role));
        puts_seg(o, "<end_of_turn>\n", KVP_SEG_SCAFFOLD);
    }
    if (gen) puts_seg(o, "<start_of_turn>model\n", KVP_SEG_SCAFFOLD);
    return 0;
}

static void llama_turn(out_buf *o, const char *role, view content) {
    puts_seg(o, "<|start_header_id|>", KVP_SEG_SCAFFOLD);
    puts_seg(o, role, KVP_SEG_SCAFFOLD);
    puts_seg(o, "<|end_header_id|>\n\n", KVP_SEG_SCAFFOLD);
    view v = trim(content);
    put(o, v.p, v.n, role_seg(role));
    puts_seg(o, "<|eot_id|>", KVP_SEG_SCAFFOLD);
}

static void render_llama3(out_buf *o, const kvp_template *tm, const kvp_message *m, const msg_text *c, int n, int gen) {
    const char *bos = "<|begin_of_text|>";
    if (tm->kind == KVP_TMPL_LLAMA31) {
        int start = n > 0 && !strcmp(m[0].role, "system");
        puts_seg(o, bos, KVP_SEG_SCAFFOLD);
        puts_seg(o, "<|start_header_id|>system<|end_header_id|>\n\n", KVP_SEG_SCAFFOLD);
        puts_seg(o, "Cutting Knowledge Date: December 2023\nToday Date: ", KVP_SEG_SCAFFOLD);
        puts_seg(o, tm->date_string ? tm->date_string : "26 Jul 2024", KVP_SEG_SCAFFOLD);
        puts_seg(o, "\n\n", KVP_SEG_SCAFFOLD);
        if (start) {
            view v = trim((view){c[0].p, c[0].n});
            put(o, v.p, v.n, KVP_SEG_SYSTEM);
        }
        puts_seg(o, "<|eot_id|>", KVP_SEG_SCAFFOLD);
        for (int i = start; i < n; i++) llama_turn(o, m[i].role, (view){c[i].p, c[i].n});
    } else {
        for (int i = 0; i < n; i++) {
            if (i == 0) puts_seg(o, bos, KVP_SEG_SCAFFOLD);
            llama_turn(o, m[i].role, (view){c[i].p, c[i].n});
        }
    }
    if (gen) puts_seg(o, "<|start_header_id|>assistant<|end_header_id|>\n\n", KVP_SEG_SCAFFOLD);
}

int kvp_chat_render(const kvp_tokenizer *t, const kvp_template *tm, const kvp_message *m, int n, int gen,
                    kvp_prompt *out, kvp_error *err) {
    memset(out, 0, sizeof *out);
    if (n < 0) return kvp_fail(err, KVP_E_INVALID, "chat: negative message count");
    for (int i = 0; i < n; i++)
        if (!m[i].role || !m[i].content || (strcmp(m[i].role, "system") && strcmp(m[i].role, "user") &&
                                            strcmp(m[i].role, "assistant")))
            return kvp_fail(err, KVP_E_INVALID, "chat: message %d needs role system/user/assistant and content", i);
    msg_text *c = calloc((size_t)n + 1, sizeof *c);
    out_buf o = {0};
    int rc = 0;
    if (!c) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    for (int i = 0; i < n && !rc; i++)
        if (kvp_utf8_clean(m[i].content, strlen(m[i].content), &c[i].p, &c[i].n, NULL))
            rc = kvp_fail(err, KVP_E_NOMEM, "out of memory");
    if (!rc) {
        switch (tm->kind) {
        case KVP_TMPL_NONE:
            put_bos(&o, t);
            for (int i = 0; i < n; i++) put(&o, c[i].p, c[i].n, role_seg(m[i].role));
            break;
        case KVP_TMPL_CHATML:
        case KVP_TMPL_QWEN25: render_chatml(&o, tm, m, c, n, gen); break;
        case KVP_TMPL_QWEN3: render_qwen3(&o, tm, m, c, n, gen); break;
        case KVP_TMPL_GEMMA3: rc = render_gemma3(&o, m, c, n, gen, err); break;
        case KVP_TMPL_LLAMA3:
        case KVP_TMPL_LLAMA31: render_llama3(&o, tm, m, c, n, gen); break;
        }
    }
    for (int i = 0; i < n; i++) free(c[i].p);
    free(c);
    return render_finish(&o, rc, out, err);
}

/* The tokenizer normalizes text (NFC for Qwen) before encoding. Normalize each same-label
 * run of the rendered text the same way, so every normalized byte keeps its label; the
 * concatenation must equal the tokenizer's own normalized text (it does unless a run starts
 * with a combining mark that composes across a run boundary, which the templates' scaffold
 * endings — newlines and '>' — cannot cause). */
static int normalized_labels(const kvp_tokenizer *t, const kvp_prompt *p, const kvp_tokens *r, uint8_t **labels,
                             kvp_error *err) {
    uint8_t *lab = malloc(r->text_len + 1);
    if (!lab) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    size_t at = 0;
    for (size_t a = 0; a < p->len;) {
        size_t b = a;
        while (b < p->len && p->byte_seg[b] == p->byte_seg[a]) b++;
        char *norm;
        size_t nl;
        if (kvp_tokenizer_normalize(t, p->text + a, b - a, &norm, &nl)) {
            free(lab);
            return kvp_fail(err, KVP_E_NOMEM, "out of memory");
        }
        int fits = at + nl <= r->text_len && !memcmp(r->text + at, norm, nl);
        free(norm);
        if (!fits) {
            free(lab);
            return kvp_fail(err, KVP_E_INVALID, "chat: normalization crosses a segment boundary at byte %zu", a);
        }
        memset(lab + at, p->byte_seg[a], nl);
        at += nl;
        a = b;
    }
    if (at != r->text_len) {
        free(lab);
        return kvp_fail(err, KVP_E_INVALID, "chat: normalized text length mismatch");
    }
    *labels = lab;
    return 0;
}

/* Tokenize a rendered prompt (scaffold bytes may spell special tokens) and label each token. */
static int tokenize_rendered(const kvp_tokenizer *t, kvp_prompt *out, kvp_error *err) {
    uint8_t *mask = malloc(out->len + 1), *lab = NULL;
    if (!mask) {
        kvp_prompt_free(out);
        return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < out->len; i++) mask[i] = out->byte_seg[i] == KVP_SEG_SCAFFOLD;
    kvp_tok_opts o = {.add_bos = 0, .parse_special = 0, .special_mask = mask};
    kvp_tokens r;
    int rc = kvp_tokenize_ex(t, out->text, out->len, &o, &r, err);
    free(mask);
    if (rc || normalized_labels(t, out, &r, &lab, err)) {
        if (!rc) kvp_tokens_free(&r);
        kvp_prompt_free(out);
        return err->code;
    }
    out->ids = r.ids;
    out->offsets = r.offsets;
    out->n = r.n;
    out->tok_text = r.text;
    out->tok_len = r.text_len;
    out->seg = malloc((size_t)(r.n ? r.n : 1));
    if (!out->seg) {
        free(lab);
        kvp_prompt_free(out);
        return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    }
    for (int i = 0; i < r.n; i++) {
        size_t a = r.offsets[i], b = i + 1 < r.n ? r.offsets[i + 1] : r.text_len;
        if (b <= a) b = a + 1; /* byte-fallback tokens share one offset */
        kvp_segment s = KVP_SEG_SCAFFOLD;
        for (size_t k = a; k < b && k < r.text_len; k++)
            if (lab[k] != KVP_SEG_SCAFFOLD) {
                s = lab[k];
                break;
            }
        out->seg[i] = (uint8_t)s;
    }
    free(lab);
    return 0;
}

int kvp_chat_prompt(const kvp_tokenizer *t, const kvp_template *tm, const kvp_message *m, int n, int gen,
                    kvp_prompt *out, kvp_error *err) {
    if (kvp_chat_render(t, tm, m, n, gen, out, err)) return err->code;
    return tokenize_rendered(t, out, err);
}

int kvp_chat_prompt_prefixed(const kvp_tokenizer *t, const kvp_template *tm, const kvp_message *m, int n,
                             const char *prefix, kvp_prompt *out, kvp_error *err) {
    if (kvp_chat_render(t, tm, m, n, 1, out, err)) return err->code;
    out_buf o = {out->text, out->byte_seg, out->len, out->len + 1, 0};
    char *clean = NULL;
    size_t len = 0;
    if (tm->kind == KVP_TMPL_NONE && o.len) put(&o, "\n", 1, KVP_SEG_SCAFFOLD);
    if (kvp_utf8_clean(prefix ? prefix : "", prefix ? strlen(prefix) : 0, &clean, &len, NULL)) o.oom = 1;
    else put(&o, clean, len, KVP_SEG_ASSISTANT);
    free(clean);
    memset(out, 0, sizeof *out);
    if (render_finish(&o, 0, out, err)) return err->code;
    return tokenize_rendered(t, out, err);
}

int kvp_prompt_pieces(const kvp_tokenizer *t, const kvp_piece *pieces, int n, kvp_prompt *out, kvp_error *err) {
    memset(out, 0, sizeof *out);
    out_buf o = {0};
    put_bos(&o, t);
    for (int i = 0; i < n && !o.oom; i++) {
        if (!pieces[i].text || pieces[i].seg > KVP_SEG_ASSISTANT)
            return render_finish(&o, kvp_fail(err, KVP_E_INVALID, "prompt piece %d: no text or an unknown segment", i), out, err);
        char *clean;
        size_t len;
        if (kvp_utf8_clean(pieces[i].text, strlen(pieces[i].text), &clean, &len, NULL)) {
            o.oom = 1;
            break;
        }
        put(&o, clean, len, pieces[i].seg);
        free(clean);
    }
    if (render_finish(&o, 0, out, err)) return err->code;
    return tokenize_rendered(t, out, err);
}

void kvp_prompt_free(kvp_prompt *p) {
    free(p->text);
    free(p->tok_text);
    free(p->byte_seg);
    free(p->ids);
    free(p->seg);
    free(p->offsets);
    memset(p, 0, sizeof *p);
}

/* ---- BLANK donor ------------------------------------------------------------------------- */

int kvp_prompt_blank(const kvp_tokenizer *t, const kvp_prompt *p, const char *filler, kvp_filler_mode mode,
                     kvp_prompt *donor, int32_t *pos_map, kvp_error *err) {
    memset(donor, 0, sizeof *donor);
    if (!filler) filler = KVP_DEFAULT_FILLER;
    int32_t *fill = NULL;
    int n_fill = 0;
    if (kvp_tokenize(t, filler, strlen(filler), 0, 0, &fill, &n_fill, err)) return err->code;
    if (n_fill == 0) {
        free(fill);
        return kvp_fail(err, KVP_E_INVALID, "blank donor: the filler text has no tokens");
    }
    size_t cap = (size_t)p->n + 1;
    for (int i = 0; i < p->n; i++) /* ONCE mode can grow a short run to the filler's length */
        if (p->seg[i] == KVP_SEG_USER && (i == 0 || p->seg[i - 1] != KVP_SEG_USER)) cap += (size_t)n_fill;
    donor->ids = malloc(cap * sizeof *donor->ids);
    donor->seg = malloc(cap);
    if (!donor->ids || !donor->seg) {
        free(fill);
        kvp_prompt_free(donor);
        return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    }
    int n = 0;
    for (int i = 0; i < p->n;) {
        if (p->seg[i] != KVP_SEG_USER) {
            if (pos_map) pos_map[i] = n;
            donor->ids[n] = p->ids[i];
            donor->seg[n++] = p->seg[i++];
            continue;
        }
        int j = i;
        while (j < p->n && p->seg[j] == KVP_SEG_USER) j++;
        /* SAME_LENGTH: the filler's tokens repeated and cut to the run's exact count. */
        int k = mode == KVP_FILLER_SAME_LENGTH ? j - i : n_fill;
        for (int q = 0; q < k; q++) {
            donor->ids[n] = fill[q % n_fill];
            donor->seg[n++] = KVP_SEG_USER;
        }
        for (int q = i; q < j && pos_map; q++) pos_map[q] = -1;
        i = j;
    }
    donor->n = n;
    free(fill);
    return 0;
}
