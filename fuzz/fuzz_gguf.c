/* libFuzzer target: the GGUF reader, then everything that interprets a parsed file (model
 * hyper-parameters and weight binding, tokenizer loading, a tokenize/detokenize call). Any
 * input must end in success or a clean error: no crash, leak or out-of-bounds read. */
#include <stddef.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "kvprobe/kvprobe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvp_error err = {0};
    gguf_file *f = gguf_parse_buffer(data, size, "fuzz.gguf", &err);
    if (!f) return 0;
    kvp_tokenizer *t = kvp_tokenizer_load(f, &err);
    if (t) {
        int32_t *ids = NULL;
        int n = 0;
        static const char text[] = "Hello world 123 <|im_start|> \xE2\x96\x81x";
        if (kvp_tokenize(t, text, sizeof text - 1, 1, 1, &ids, &n, &err) == 0) {
            char buf[64];
            for (int i = 0; i < n; i++) kvp_token_to_bytes(t, ids[i], 1, buf, sizeof buf);
        }
        free(ids);
        kvp_tokenizer_free(t);
    }
    kvp_model *m = kvp_model_from_gguf(f, &err); /* takes ownership of f */
    if (m) {
        const kvp_hparams *hp = kvp_model_hparams(m);
        /* Run one token only for small models: the fuzzer must stay fast. */
        if ((double)hp->n_embd * hp->n_ff * hp->n_layer < 1e6 && hp->n_vocab < 4096) {
            kvp_ctx_params cp = {.n_threads = 1, .max_batch = 2};
            kvp_ctx *c = kvp_ctx_new(m, &cp, &err);
            kvp_kv *kv = c ? kvp_kv_new(m, 4, KVP_KV_F32, &err) : NULL;
            if (kv) {
                int32_t tok[2] = {0, hp->n_vocab - 1};
                kvp_decode(c, kv, tok, 2, NULL, NULL, &err);
            }
            kvp_kv_free(kv);
            kvp_ctx_free(c);
        }
        kvp_model_free(m);
    }
    return 0;
}
