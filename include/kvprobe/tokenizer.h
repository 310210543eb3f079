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

/* Load a Hugging Face tokenizer.json (BPE models: byte-level like Llama 3 / Qwen, or
 * SentencePiece-style with U+2581 and byte fallback like Gemma). */
kvp_tokenizer *kvp_tokenizer_load_hf(const char *tokenizer_json_path, kvp_error *err);
/* The same from memory (no tokenizer_config.json lookup); name is used in messages. */
kvp_tokenizer *kvp_tokenizer_load_hf_buffer(const char *json, size_t len, const char *name, kvp_error *err);

typedef struct kvp_tok_opts {
    int add_bos;          /* prepend BOS (if the vocabulary has one) */
    int parse_special;    /* control tokens written in the text become single tokens */
    /* Optional per-byte override of parse_special ([len] of 0/1, indexed by input byte; the
     * input must then be valid UTF-8): lets a chat template parse its scaffolding but not the
     * user's text. User-defined tokens (type 4) are always matched, as in HF and llama.cpp. */
    const uint8_t *special_mask;
} kvp_tok_opts;

typedef struct kvp_tokens {
    int32_t *ids;
    uint32_t *offsets;    /* [n] byte offset in `text` where each token's text starts */
    int n;
    char *text;           /* the text actually tokenized: invalid UTF-8 replaced, normalized */
    size_t text_len;
    int n_replaced;       /* invalid UTF-8 subsequences replaced by U+FFFD */
    uint64_t ops;         /* work done (merge steps, regex matches), for complexity tests */
} kvp_tokens;

/* Tokenize: invalid UTF-8 is replaced by U+FFFD per maximal subpart (as Python's
 * bytes.decode(errors="replace") does), special tokens are split out, each plain segment is
 * normalized if the tokenizer declares it (Qwen: NFC) and encoded. */
int kvp_tokenize_ex(const kvp_tokenizer *t, const char *text, size_t len, const kvp_tok_opts *opts,
                    kvp_tokens *out, kvp_error *err);
void kvp_tokens_free(kvp_tokens *r);

/* Replace invalid UTF-8 with U+FFFD (maximal subparts). *out is malloc'd, NUL-terminated. */
int kvp_utf8_clean(const char *text, size_t len, char **out, size_t *out_len, int *n_replaced);

/* What the tokenizer does to plain text before encoding: U+FFFD cleaning, then NFC if the
 * tokenizer declares it. *out is malloc'd, NUL-terminated. 0 ok, -1 out of memory. */
int kvp_tokenizer_normalize(const kvp_tokenizer *t, const char *text, size_t len, char **out, size_t *out_len);

/* Encode text (len bytes). *out is malloc'd; caller frees. */
int kvp_tokenize(const kvp_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
                 int32_t **out, int *n_out, kvp_error *err);

/* Bytes a token stands for when printed (control tokens print nothing unless special). Writes
 * up to cap bytes, returns the full length. */
size_t kvp_token_to_bytes(const kvp_tokenizer *t, int32_t id, int special, char *buf, size_t cap);
/* Concatenated bytes of ids (malloc'd, NUL-terminated). 0 ok, -1 out of memory. */
int kvp_detokenize(const kvp_tokenizer *t, const int32_t *ids, int n, int special, char **out, size_t *out_len);

#ifdef __cplusplus
}
#endif
#endif
