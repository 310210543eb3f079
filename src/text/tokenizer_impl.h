/* Internal tokenizer state shared by the loaders (GGUF: tokenizer.c, HF tokenizer.json:
 * hf_json.c) and the encoders (encode.c). */
#ifndef KVPROBE_TOKENIZER_IMPL_H
#define KVPROBE_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/strmap.h"
#include "kvprobe/tokenizer.h"

#define TOK_MAX_REGEX 3

/* How plain text becomes tokens. */
typedef enum tok_algo {
    TOK_ALGO_SPM = 0, /* merge the adjacent pair whose concatenation has the best score */
    TOK_ALGO_BPE = 1, /* merge the adjacent pair with the lowest merge rank */
} tok_algo;

struct kvp_tokenizer {
    kvp_vocab_kind kind;
    tok_algo algo;
    int n_vocab;
    char **owned_text;  /* when loaded from JSON: owned copies behind text[] */
    struct tok_str {
        const char *ptr;
        size_t len;
    } *text;            /* [n_vocab] */
    float *score;       /* [n_vocab] (SPM) */
    int32_t *type;      /* [n_vocab] enum kvp_token_type */
    strmap by_text;
    strmap merge_rank;  /* "left right" -> rank (BPE) */
    char *merge_blob;   /* owned storage behind merge_rank keys (JSON) */
    int32_t bos, eos, eot, eom, unk;
    int add_bos;
    /* text pipeline */
    int nfc;            /* NFC-normalize plain text first (Qwen) */
    int space_to_meta;  /* ' ' -> U+2581 before encoding (SentencePiece style) */
    int byte_level;     /* GPT-2 bytes_to_unicode mapping of every byte */
    int byte_fallback;  /* unknown symbols become <0xXX> tokens */
    int ignore_merges;  /* a whole pre-token that is a vocab entry is emitted as is (Llama 3) */
    pcre2_code *re[TOK_MAX_REGEX];
    int n_re;
    int32_t byte_token[256];  /* SPM / fallback: <0xXX> ids; byte-level: id of each byte's char */
    uint16_t byte_to_cp[256]; /* GPT-2 bytes_to_unicode */
    int16_t cp_to_byte[324];
    uint8_t *eog;       /* [n_vocab] end-of-generation flags */
    /* special tokens (control + user-defined), bucketed by first byte for the splitter */
    int32_t *special_ids;
    int n_special;
    int special_first[257]; /* special_ids[special_first[b] .. special_first[b+1]) start with byte b */
};

/* Output of the encoders: ids plus the byte offset where each token's text starts. */
typedef struct tok_out {
    int32_t *ids;
    uint32_t *offs;
    int n, cap;
    uint64_t ops;       /* work counter, for linear-time tests */
} tok_out;

int tok_push(tok_out *o, int32_t id, size_t off);

/* Shared set-up once text/score/type/by_text are filled: byte maps, eog flags, specials. */
int tok_finish_load(kvp_tokenizer *t, kvp_error *err);
/* Compile the pre-tokenizer regexes (NULL-terminated list). */
int tok_set_regexes(kvp_tokenizer *t, const char *const *patterns, kvp_error *err);

/* Encode plain text (no special tokens) whose first byte is at offset `base` of the caller's
 * text. Text must be valid UTF-8 already normalized. */
int tok_encode_plain(const kvp_tokenizer *t, const char *text, size_t len, size_t base, tok_out *out);

#endif
