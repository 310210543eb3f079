/* Chat templates against Hugging Face apply_chat_template (tools/make_template_goldens.py):
 * rendered text byte for byte, rejections, token ids, and the segment label of every byte;
 * then the BLANK donor keeps every non-user token at its position. Conversations with tool
 * calls or tool results are outside kvprobe's renderers and are counted, not compared. */
#include <cjson/cJSON.h>
#include <stdint.h>

#include "harness.h"
#include "kvprobe/kvprobe.h"

#define GOLD "tests/golden/templates/"

typedef struct tmpl_case {
    const char *golden;
    kvp_template_kind kind;
    int enable_thinking;
    const char *tok_path; /* tokenizer for the ids */
    int gguf;
} tmpl_case;

static const tmpl_case CASES[] = {
    {"qwen3-think", KVP_TMPL_QWEN3, 1, "../shared/tokenizers/qwen3/tokenizer.json", 0},
    {"qwen3-nothink", KVP_TMPL_QWEN3, 0, "../shared/tokenizers/qwen3/tokenizer.json", 0},
    {"gemma3", KVP_TMPL_GEMMA3, 1, "../shared/tokenizers/gemma3/tokenizer.json", 0},
    {"llama3.0", KVP_TMPL_LLAMA3, 1, "../shared/tokenizers/llama3/tokenizer.json", 0},
    {"llama3.1", KVP_TMPL_LLAMA31, 1, "../shared/tokenizers/llama3/tokenizer.json", 0},
    {"chatml", KVP_TMPL_CHATML, 1, "models/SmolLM2-135M-Instruct.Q4_1.gguf", 1},
    {"qwen2.5", KVP_TMPL_QWEN25, 1, "models/qwen2.5-coder-0.5b-instruct.gguf", 1},
};

static cJSON **read_jsonl(const char *path, int *n) {
    FILE *f = fopen(path, "rb");
    *n = 0;
    if (!f) return NULL;
    int cap = 512;
    cJSON **v = malloc((size_t)cap * sizeof *v);
    size_t lcap = 1 << 16;
    char *line = malloc(lcap);
    ssize_t len;
    while ((len = getline(&line, &lcap, f)) > 0) {
        if (*n == cap) v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[(*n)++] = cJSON_Parse(line);
    }
    free(line);
    fclose(f);
    return v;
}

static int seg_of(const char *label) {
    static const char *names[] = {"scaffold", "system", "user", "assistant"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(label, names[i])) return i;
    return -1;
}

/* Does any message content hold a control token's text? (HF parses it as a special token;
 * kvprobe never does in content, by design.) */
static int content_has_control(const kvp_tokenizer *t, const kvp_message *m, int n) {
    for (int i = 0; i < n; i++) {
        kvp_tokens r;
        kvp_tok_opts o = {.parse_special = 1};
        kvp_error err = {0};
        if (kvp_tokenize_ex(t, m[i].content, strlen(m[i].content), &o, &r, &err)) continue;
        int has = 0;
        for (int k = 0; k < r.n; k++) has |= kvp_token_type(t, r.ids[k]) == KVP_TOK_CONTROL;
        kvp_tokens_free(&r);
        if (has) return 1;
    }
    return 0;
}

static void run_case(const tmpl_case *tc, cJSON **convs, int n_conv) {
    char title[160], path[256];
    kvp_error err = {0};
    gguf_file *g = NULL;
    kvp_tokenizer *t = tc->gguf ? ((g = gguf_open(tc->tok_path, &err)) ? kvp_tokenizer_load(g, &err) : NULL)
                                : kvp_tokenizer_load_hf(tc->tok_path, &err);
    kvp_template tm;
    kvp_template_init(&tm);
    if (g && kvp_template_detect(g, &tm, &err)) NOTE("detect: %s", err.msg);
    tm.kind = tc->kind;
    tm.enable_thinking = tc->enable_thinking;
    int n_gold;
    snprintf(path, sizeof path, GOLD "%s.jsonl", tc->golden);
    cJSON **gold = read_jsonl(path, &n_gold);
    snprintf(title, sizeof title, "template %s: text, rejections, ids and byte labels equal HF's", tc->golden);
    TEST(title) {
        CHECK(t != NULL, "%s", err.msg);
        CHECK(gold && n_gold == n_conv, "golden %s", path);
        if (!t || !gold || n_gold != n_conv) continue;
        int compared = 0, skipped = 0, text_bad = 0, ids_bad = 0, label_bad = 0, protected = 0, rejected = 0,
            donor_bad = 0;
        for (int i = 0; i < n_conv; i++) {
            const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(convs[i], "messages"), *e;
            int gen = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(convs[i], "add_generation_prompt"));
            int n = cJSON_GetArraySize(msgs), ok = !cJSON_GetObjectItemCaseSensitive(convs[i], "tools");
            kvp_message *m = calloc((size_t)n + 1, sizeof *m);
            int k = 0;
            cJSON_ArrayForEach(e, msgs) {
                const char *role = cJSON_GetObjectItemCaseSensitive(e, "role")->valuestring;
                if (cJSON_GetObjectItemCaseSensitive(e, "tool_calls") || !strcmp(role, "tool")) ok = 0;
                m[k].role = role;
                m[k++].content = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
            }
            if (!ok) {
                skipped++;
                free(m);
                continue;
            }
            compared++;
            const cJSON *gt = cJSON_GetObjectItemCaseSensitive(gold[i], "text");
            kvp_prompt p;
            int rc = kvp_chat_prompt(t, &tm, m, n, gen, &p, &err);
            if (!cJSON_IsString(gt)) { /* HF rejected it: so must we */
                rejected++;
                if (rc == 0) {
                    if (text_bad++ < 3) NOTE("%s conv %d: HF rejects, kvprobe rendered '%.80s'", tc->golden, i, p.text);
                    kvp_prompt_free(&p);
                }
                free(m);
                continue;
            }
            if (rc) {
                if (text_bad++ < 3) NOTE("%s conv %d: %s", tc->golden, i, err.msg);
                free(m);
                continue;
            }
            if (p.len != strlen(gt->valuestring) || memcmp(p.text, gt->valuestring, p.len)) {
                if (text_bad++ < 3) NOTE("%s conv %d text:\n#   kvprobe '%s'\n#   HF      '%s'", tc->golden, i, p.text, gt->valuestring);
            } else {
                /* labels: every byte against the golden spans */
                const cJSON *sp;
                int lb = 0;
                cJSON_ArrayForEach(sp, cJSON_GetObjectItemCaseSensitive(gold[i], "spans")) {
                    int a = cJSON_GetArrayItem(sp, 0)->valueint, b = cJSON_GetArrayItem(sp, 1)->valueint;
                    int want = seg_of(cJSON_GetArrayItem(sp, 2)->valuestring);
                    for (int q = a; q < b; q++) lb |= p.byte_seg[q] != want;
                }
                if (lb && label_bad++ < 3) NOTE("%s conv %d: byte labels differ", tc->golden, i);
                /* ids: HF parses special tokens everywhere; kvprobe only in scaffolding */
                const cJSON *gids = cJSON_GetObjectItemCaseSensitive(gold[i], "ids");
                int ng = cJSON_GetArraySize(gids), same = ng == p.n;
                for (int q = 0; same && q < ng; q++) same = cJSON_GetArrayItem(gids, q)->valueint == p.ids[q];
                if (!same && content_has_control(t, m, n)) {
                    protected++;
                    kvp_tokens r; /* the full text with specials parsed everywhere must still equal HF */
                    kvp_tok_opts o = {.parse_special = 1};
                    kvp_tokenize_ex(t, p.text, p.len, &o, &r, &err);
                    same = ng == r.n;
                    for (int q = 0; same && q < ng; q++) same = cJSON_GetArrayItem(gids, q)->valueint == r.ids[q];
                    kvp_tokens_free(&r);
                }
                if (!same && ids_bad++ < 3) NOTE("%s conv %d: token ids differ (%d vs %d tokens)", tc->golden, i, p.n, ng);
            }
            /* BLANK donor: same length, non-user tokens untouched */
            kvp_prompt d;
            int32_t *map = malloc((size_t)(p.n + 1) * sizeof *map);
            if (kvp_prompt_blank(t, &p, NULL, KVP_FILLER_SAME_LENGTH, &d, map, &err) || d.n != p.n) {
                donor_bad++;
            } else {
                for (int q = 0; q < p.n; q++)
                    if (p.seg[q] != KVP_SEG_USER ? (d.ids[q] != p.ids[q] || map[q] != q) : (map[q] != -1 || d.seg[q] != KVP_SEG_USER))
                        donor_bad++, q = p.n;
                kvp_prompt_free(&d);
            }
            free(map);
            kvp_prompt_free(&p);
            free(m);
        }
        CHECK(text_bad == 0, "%d renderings differ", text_bad);
        CHECK(label_bad == 0, "%d conversations with wrong byte labels", label_bad);
        CHECK(ids_bad == 0, "%d conversations with different token ids", ids_bad);
        CHECK(donor_bad == 0, "%d donors moved a non-user token", donor_bad);
        NOTE("%s: %d conversations compared (%d rejected by both), %d with tools skipped; text, labels and ids "
             "identical; %d keep control-token text in content as plain text (HF: special)",
             tc->golden, compared, rejected, skipped, protected);
    }
    for (int i = 0; i < n_gold; i++) cJSON_Delete(gold[i]);
    free(gold);
    kvp_tokenizer_free(t);
    gguf_close(g);
}

int main(void) {
    int n_conv;
    cJSON **convs = read_jsonl(GOLD "conversations.jsonl", &n_conv);
    TEST("templates: at least 200 conversations") CHECK(convs && n_conv >= 200, "%d conversations", n_conv);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run_case(&CASES[i], convs, n_conv);

    TEST("templates: detection from the real GGUFs") {
        kvp_error err = {0};
        kvp_template tm;
        gguf_file *g = gguf_open("models/SmolLM2-135M-Instruct.Q4_1.gguf", &err);
        CHECK(g && kvp_template_detect(g, &tm, &err) == 0 && tm.kind == KVP_TMPL_CHATML &&
                  !strcmp(tm.default_system, "You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
              "smollm2: %s", err.msg);
        gguf_close(g);
        g = gguf_open("models/gemma-3-270m-q4_k_m.gguf", &err);
        CHECK(g && kvp_template_detect(g, &tm, &err) == 0 && tm.kind == KVP_TMPL_GEMMA3, "gemma3 (no template: by architecture)");
        gguf_close(g);
        /* Qwen2.5's template writes the default system text in its non-tools branch, after a
         * tools branch that opens '<|im_start|>system\n' too and a branch writing the user's */
        g = gguf_open("models/qwen2.5-coder-0.5b-instruct.gguf", &err);
        CHECK(g && kvp_template_detect(g, &tm, &err) == 0 && tm.kind == KVP_TMPL_QWEN25 &&
                  !strcmp(tm.default_system, KVP_QWEN25_SYSTEM),
              "qwen2.5: kind %d, default system '%s' %s", tm.kind, tm.default_system, err.msg);
        gguf_close(g);
    }
    TEST("templates: --template qwen2.5 brings Qwen's default system turn; another family drops it") {
        kvp_error err = {0};
        kvp_template tm;
        kvp_template_init(&tm);
        CHECK(!kvp_template_select(&tm, "qwen2.5", &err) && tm.kind == KVP_TMPL_QWEN25 &&
                  !strcmp(tm.default_system, KVP_QWEN25_SYSTEM), "%s", err.msg);
        CHECK(!kvp_template_select(&tm, "chatml", &err) && tm.kind == KVP_TMPL_CHATML && !tm.default_system[0],
              "chatml after qwen2.5 kept '%s'", tm.default_system);
        CHECK(kvp_template_select(&tm, "qwen2", &err) == KVP_E_INVALID && strstr(err.msg, "qwen2.5"),
              "unknown name: %s", err.msg);
    }
    TEST("templates: ONCE filler makes a shorter donor and maps kept positions") {
        kvp_error err = {0};
        gguf_file *g = gguf_open("models/SmolLM2-135M-Instruct.Q4_1.gguf", &err);
        kvp_tokenizer *t = g ? kvp_tokenizer_load(g, &err) : NULL;
        kvp_template tm;
        kvp_prompt p, d;
        kvp_message m[1] = {{"user", "Natalia sold clips to 48 of her friends in April, and then she sold half as many in May."}};
        CHECK(t && !kvp_template_detect(g, &tm, &err) && !kvp_chat_prompt(t, &tm, m, 1, 1, &p, &err), "%s", err.msg);
        int32_t map[256], *fill = NULL;
        int n_fill = 0;
        kvp_tokenize(t, "okay", 4, 0, 0, &fill, &n_fill, &err);
        free(fill);
        CHECK(p.n < 256 && !kvp_prompt_blank(t, &p, "okay", KVP_FILLER_ONCE, &d, map, &err), "%s", err.msg);
        int users = 0;
        for (int i = 0; i < p.n; i++) users += p.seg[i] == KVP_SEG_USER;
        CHECK(d.n == p.n - users + n_fill, "donor %d tokens, prompt %d with %d user tokens, filler %d", d.n, p.n, users,
              n_fill);
        for (int i = 0; i < p.n; i++)
            if (map[i] >= 0) CHECK(d.ids[map[i]] == p.ids[i], "kept token %d moved wrongly", i);
        kvp_prompt_free(&d);
        kvp_prompt_free(&p);
        kvp_tokenizer_free(t);
        gguf_close(g);
    }
    TEST("templates: raw text and labeled pieces start with BOS exactly when add_bos_token is set") {
        static const struct {
            const char *model;
            int bos;
        } models[] = {{"models/gemma-3-270m-q4_k_m.gguf", 1}, {"models/SmolLM2-135M-Instruct.Q4_1.gguf", 0}};
        for (int k = 0; k < 2; k++) {
            kvp_error err = {0};
            gguf_file *g = gguf_open(models[k].model, &err);
            kvp_tokenizer *t = g ? kvp_tokenizer_load(g, &err) : NULL;
            CHECK(t && kvp_tokenizer_add_bos(t) == models[k].bos, "%s: %s", models[k].model, err.msg);
            if (!t) {
                gguf_close(g);
                continue;
            }
            /* The cloze frame is scaffolding; the question is user content; the answer is the assistant's. */
            kvp_piece pc[] = {{"Question: ", KVP_SEG_SCAFFOLD},
                              {"Which gas do plants absorb?", KVP_SEG_USER},
                              {"\nAnswer:", KVP_SEG_SCAFFOLD},
                              {" carbon dioxide", KVP_SEG_ASSISTANT},
                              {"\n\n<bos>", KVP_SEG_USER}};
            kvp_prompt p, raw;
            const char *want_text = "Question: Which gas do plants absorb?\nAnswer: carbon dioxide\n\n<bos>";
            CHECK(!kvp_prompt_pieces(t, pc, 5, &p, &err), "%s", err.msg);
            kvp_template none;
            kvp_template_init(&none);
            kvp_message m[1] = {{"user", want_text}};
            CHECK(!kvp_chat_prompt(t, &none, m, 1, 0, &raw, &err), "%s", err.msg);
            int32_t bos = kvp_tokenizer_bos(t);
            size_t bl = 0;
            const char *bos_text = kvp_token_text(t, bos, &bl);
            size_t off = models[k].bos ? bl : 0;
            CHECK(p.len == off + strlen(want_text) && !memcmp(p.text + off, want_text, strlen(want_text)), "text '%s'", p.text);
            CHECK(!models[k].bos || !memcmp(p.text, bos_text, bl), "BOS text");
            CHECK((p.n > 0 && p.ids[0] == bos) == models[k].bos && (raw.n > 0 && raw.ids[0] == bos) == models[k].bos,
                  "%s: first ids %d / %d, bos %d", models[k].model, p.ids[0], raw.ids[0], bos);
            /* '<bos>' written in user content stays text: only BOS itself is a control token */
            int n_bos = 0;
            for (int i = 0; i < p.n; i++) n_bos += p.ids[i] == bos;
            CHECK(n_bos == models[k].bos, "%d BOS tokens", n_bos);
            char seg[128] = {0};
            for (int i = 0; i < p.n && i < 127; i++) seg[i] = "syua"[p.seg[i]];
            /* the labels by token: frame scaffold, question user, " carbon dioxide" assistant */
            int first_a = (int)(strchr(seg, 'a') - seg), first_u = (int)(strchr(seg, 'u') - seg);
            CHECK(strchr(seg, 'a') && strchr(seg, 'u') && first_u < first_a, "segments %s", seg);
            for (int i = 0; i < p.n; i++) {
                char piece[64];
                size_t n = kvp_token_to_bytes(t, p.ids[i], 1, piece, sizeof piece - 1);
                piece[n < sizeof piece ? n : sizeof piece - 1] = 0;
                if (!strcmp(piece, "Question") || !strcmp(piece, "Answer") || !strcmp(piece, ":"))
                    CHECK(p.seg[i] == KVP_SEG_SCAFFOLD, "'%s' labeled %s", piece, seg);
                if (strstr(piece, "plants")) CHECK(p.seg[i] == KVP_SEG_USER, "'%s' labeled %s", piece, seg);
                if (strstr(piece, "carbon")) CHECK(p.seg[i] == KVP_SEG_ASSISTANT, "'%s' labeled %s", piece, seg);
            }
            kvp_piece bad = {NULL, KVP_SEG_USER};
            kvp_prompt q;
            CHECK(kvp_prompt_pieces(t, &bad, 1, &q, &err) == KVP_E_INVALID, "a piece without text is refused");
            kvp_prompt_free(&p);
            kvp_prompt_free(&raw);
            kvp_tokenizer_free(t);
            gguf_close(g);
        }
    }
    for (int i = 0; i < n_conv; i++) cJSON_Delete(convs[i]);
    free(convs);
    return harness_finish();
}
