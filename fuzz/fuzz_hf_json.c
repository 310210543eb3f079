/* libFuzzer target: the Hugging Face tokenizer.json loader on arbitrary bytes, then one
 * encode/decode when a tokenizer comes out. */
#include <stdint.h>
#include <stdlib.h>

#include "kvprobe/kvprobe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvp_error err = {0};
    kvp_tokenizer *t = kvp_tokenizer_load_hf_buffer((const char *)data, size, "fuzz.json", &err);
    if (!t) return 0;
    static const char text[] = "Hello world 123 <|im_end|> caf\xC3\xA9 \xE2\x96\x81 \xFF";
    kvp_tokens r;
    kvp_tok_opts o = {.parse_special = 1};
    if (kvp_tokenize_ex(t, text, sizeof text - 1, &o, &r, &err) == 0) {
        char *dec;
        size_t n;
        if (kvp_detokenize(t, r.ids, r.n, 1, &dec, &n) == 0) free(dec);
        kvp_tokens_free(&r);
    }
    kvp_tokenizer_free(t);
    return 0;
}
