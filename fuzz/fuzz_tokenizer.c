/* libFuzzer target: encode/decode round trips on the real tokenizers (Gemma 3 SentencePiece
 * with byte fallback; SmolLM2 byte-level BPE), with and without special-token parsing, and
 * the chat renderer. Properties checked on every input:
 *   - ids are in range and offsets increase;
 *   - Gemma (byte fallback, so lossless): decode(encode(s)) equals s after cleaning, with
 *     U+2581 read back as a space;
 *   - a chat prompt labels every token and its BLANK donor keeps the token count. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvprobe/kvprobe.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct fuzz_state {
    gguf_file *g[2];
    kvp_tokenizer *t[2];
} fuzz_state;

static fuzz_state S; /* loaded once: libFuzzer gives no per-run context */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *paths[2] = {"models/gemma-3-270m-q4_k_m.gguf", "models/SmolLM2-135M-Instruct.Q4_1.gguf"};
    kvp_error err = {0};
    for (int i = 0; i < 2; i++) {
        if (!(S.g[i] = gguf_open(paths[i], &err)) || !(S.t[i] = kvp_tokenizer_load(S.g[i], &err))) {
            fprintf(stderr, "fuzz_tokenizer: %s (run 'make models')\n", err.msg);
            exit(1);
        }
    }
    return 0;
}

static void check_one(const kvp_tokenizer *t, int lossless, const uint8_t *data, size_t size, int special) {
    kvp_error err = {0};
    kvp_tokens r;
    kvp_tok_opts o = {.parse_special = special};
    if (kvp_tokenize_ex(t, (const char *)data, size, &o, &r, &err)) abort();
    for (int i = 0; i < r.n; i++) {
        if (r.ids[i] < 0 || r.ids[i] >= kvp_tokenizer_n_vocab(t)) abort();
        if (i && r.offsets[i] < r.offsets[i - 1]) abort();
        if (r.offsets[i] > r.text_len) abort();
    }
    char *dec;
    size_t dlen;
    if (kvp_detokenize(t, r.ids, r.n, 1, &dec, &dlen)) abort();
    if (lossless) {
        /* expected: the cleaned text with U+2581 read as ' ' */
        char *want = malloc(r.text_len + 1);
        size_t w = 0;
        for (size_t i = 0; i < r.text_len; i++) {
            if (i + 2 < r.text_len + 0 && !memcmp(r.text + i, "\xE2\x96\x81", 3)) {
                want[w++] = ' ';
                i += 2;
            } else {
                want[w++] = r.text[i];
            }
        }
        if (w != dlen || memcmp(want, dec, w)) abort();
        free(want);
    }
    free(dec);
    kvp_tokens_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    for (int i = 0; i < 2; i++)
        for (int special = 0; special < 2; special++) check_one(S.t[i], i == 0, data, size, special);
    /* chat + donor on the SmolLM2 template */
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0; /* message content is a C string: stops at the first NUL */
    kvp_error err = {0};
    kvp_template tm;
    if (kvp_template_detect(S.g[1], &tm, &err)) abort();
    kvp_message m[2] = {{"system", "Be brief."}, {"user", text}};
    kvp_prompt p, d;
    if (kvp_chat_prompt(S.t[1], &tm, m, 2, 1, &p, &err) == 0) {
        for (int i = 0; i < p.n; i++)
            if (p.seg[i] > KVP_SEG_ASSISTANT) abort();
        if (kvp_prompt_blank(S.t[1], &p, NULL, KVP_FILLER_SAME_LENGTH, &d, NULL, &err) || d.n != p.n) abort();
        kvp_prompt_free(&d);
        kvp_prompt_free(&p);
    }
    free(text);
    return 0;
}
