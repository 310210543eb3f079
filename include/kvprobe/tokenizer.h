/* kvprobe — tokenizers read from GGUF metadata.
 *
 * tokenizer.ggml.model = "llama": SentencePiece-style BPE by scores (Gemma 3), '▁' for
 * spaces, <0xXX> byte fallback. "gpt2": byte-level BPE by merge rank (Llama 3, Qwen3,
 * SmolLM2). User text is never split into special tokens unless parse_special is set. */
#ifndef KVPROBE_TOKENIZER_H
#define KVPROBE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "kvprobe/error.h"
#include "kvprobe/gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvp_vocab_kind { KVP_VOCAB_SPM = 0, KVP_VOCAB_BPE = 1 } kvp_vocab_kind;

/* token_type values as written by llama.cpp's converter */
enum kvp_token_type {
    KVP_TOK_NORMAL = 1, KVP_TOK_UNKNOWN = 2, KVP_TOK_CONTROL = 3,
    KVP_TOK_USER_DEFINED = 4, KVP_TOK_UNUSED = 5, KVP_TOK_BYTE = 6
};

typedef struct kvp_tokenizer kvp_tokenizer;

kvp_tokenizer *kvp_tokenizer_load(const gguf_file *f, kvp_error *err);
void kvp_tokenizer_free(kvp_tokenizer *t);

kvp_vocab_kind kvp_tokenizer_kind(const kvp_tokenizer *t);
int kvp_tokenizer_n_vocab(const kvp_tokenizer *t);
int32_t kvp_tokenizer_bos(const kvp_tokenizer *t);   /* -1 if none */
int32_t kvp_tokenizer_eos(const kvp_tokenizer *t);   /* -1 if none */
int kvp_tokenizer_add_bos(const kvp_tokenizer *t);   /* metadata add_bos_token */
/* End of generation: eos/eot/eom ids and turn-end tokens (<end_of_turn>, <|im_end|>, ...). */
int kvp_token_is_eog(const kvp_tokenizer *t, int32_t id);
int kvp_token_type(const kvp_tokenizer *t, int32_t id);
/* Raw vocabulary string of a token (as stored in GGUF). */
const char *kvp_token_text(const kvp_tokenizer *t, int32_t id, size_t *len);
int32_t kvp_token_lookup(const kvp_tokenizer *t, const char *text, size_t len); /* -1 if absent */

/* Encode text (len bytes). *out is malloc'd; caller frees. */
int kvp_tokenize(const kvp_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
                 int32_t **out, int *n_out, kvp_error *err);

/* Bytes a token stands for when printed (control tokens print nothing unless special). Writes
 * up to cap bytes, returns the full length. */
size_t kvp_token_to_bytes(const kvp_tokenizer *t, int32_t id, int special, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
