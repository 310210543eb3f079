/* kvprobe — chat templates that label every prompt token with where it came from.
 *
 * A small renderer per family reproduces Hugging Face's apply_chat_template output byte
 * for byte (tests/golden/templates); every rendered byte carries a segment label, and the
 * tokenizer parses special tokens only inside scaffolding, never in message content. */
#ifndef KVPROBE_CHAT_H
#define KVPROBE_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "kvprobe/error.h"
#include "kvprobe/gguf.h"
#include "kvprobe/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvp_segment {
    KVP_SEG_SCAFFOLD = 0, /* BOS, role markers, separators, generation prompt, think markers */
    KVP_SEG_SYSTEM = 1,
    KVP_SEG_USER = 2,
    KVP_SEG_ASSISTANT = 3,
} kvp_segment;

const char *kvp_segment_name(kvp_segment s);

typedef enum kvp_template_kind {
    KVP_TMPL_NONE = 0,    /* no template: raw text (after BOS if the tokenizer adds one) */
    KVP_TMPL_CHATML,      /* <|im_start|>role\n...<|im_end|>\n (SmolLM2 adds a default system turn) */
    KVP_TMPL_QWEN25,      /* Qwen2.5 (and -Coder): ChatML whose default system turn is "You are Qwen, ..." */
    KVP_TMPL_QWEN3,       /* ChatML + think blocks; enable_thinking switch */
    KVP_TMPL_GEMMA3,      /* <bos><start_of_turn>user\n...<end_of_turn>\n ... model\n */
    KVP_TMPL_LLAMA3,      /* Llama 3.0: <|begin_of_text|><|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    KVP_TMPL_LLAMA31,     /* Llama 3.1/3.2: always a system header with knowledge/today dates */
} kvp_template_kind;

/* The names kvp_template_from_name knows, for help texts and errors. */
#define KVP_TEMPLATE_NAMES "none, chatml, qwen2.5, qwen3, gemma3, llama3, llama3.1"

const char *kvp_template_name(kvp_template_kind k);
int kvp_template_from_name(const char *name, kvp_template_kind *out);

/* BOS text and turn markers follow from the kind: the renderers write each family's own. */
typedef struct kvp_template {
    kvp_template_kind kind;
    char default_system[512];    /* ChatML: system turn added when the conversation has none ("" = none) */
    const char *date_string;     /* Llama 3.1: "Today Date" (default "26 Jul 2024") */
    int enable_thinking;         /* Qwen3: 1 = thinking on (template default) */
} kvp_template;

/* Qwen2.5's default system message, written when a conversation has none. */
#define KVP_QWEN25_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

/* Choose the template from the GGUF's tokenizer.chat_template (substring detection, as
 * llama.cpp does) and architecture. A ChatML template's default system turn is read from
 * the template itself. Unknown templates are an error naming what was seen;
 * a file without a template gets KVP_TMPL_NONE. Strings point into the file. */
int kvp_template_detect(const gguf_file *f, kvp_template *out, kvp_error *err);

/* No template, thinking on, Llama 3.1 date pinned: the settings detection starts from. */
void kvp_template_init(kvp_template *t);
/* Switch to the template called name (--template). A default system turn read from the file
 * is kept only when the family stays the same; qwen2.5 otherwise gets Qwen's own. */
int kvp_template_select(kvp_template *t, const char *name, kvp_error *err);

typedef struct kvp_message {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
} kvp_message;

/* A rendered prompt: text + one label per byte, then tokens + one label per token. */
typedef struct kvp_prompt {
    char *text;         /* rendered text, identical to HF apply_chat_template */
    size_t len;
    uint8_t *byte_seg;  /* [len] kvp_segment */
    int32_t *ids;
    uint8_t *seg;       /* [n] kvp_segment of each token */
    uint32_t *offsets;  /* [n] byte offset of each token in tok_text */
    int n;
    char *tok_text;     /* the text as tokenized: normalized (Qwen: NFC); else equal to text */
    size_t tok_len;
} kvp_prompt;

/* Render messages with the template (content only has invalid UTF-8 replaced), then
 * tokenize. A token is `scaffold` only if all its bytes are; otherwise it takes the label of
 * its first non-scaffold byte. */
int kvp_chat_prompt(const kvp_tokenizer *t, const kvp_template *tmpl, const kvp_message *msgs, int n_msgs,
                    int add_generation_prompt, kvp_prompt *out, kvp_error *err);
/* The same with the assistant's answer begun: the generation prompt, then `prefix` (labeled
 * assistant) for the model to continue — what HF's apply_chat_template(...,
 * continue_final_message=True) renders for a final assistant message holding prefix (for every
 * template here; Qwen3 with thinking off). Without a template the prefix follows the text on a
 * new line. */
int kvp_chat_prompt_prefixed(const kvp_tokenizer *t, const kvp_template *tmpl, const kvp_message *msgs, int n_msgs,
                             const char *prefix, kvp_prompt *out, kvp_error *err);
/* Render only (no tokens). */
int kvp_chat_render(const kvp_tokenizer *t, const kvp_template *tmpl, const kvp_message *msgs, int n_msgs,
                    int add_generation_prompt, kvp_prompt *out, kvp_error *err);
void kvp_prompt_free(kvp_prompt *p);

/* A prompt from labeled text pieces, without a chat template: the few-shot and cloze formats
 * of base models ("Question: " scaffold, the question as user content, "\nAnswer:" scaffold).
 * Starts with BOS when the tokenizer's add_bos_token says so, as raw-text rendering does. */
typedef struct kvp_piece {
    const char *text;
    kvp_segment seg;
} kvp_piece;
int kvp_prompt_pieces(const kvp_tokenizer *t, const kvp_piece *pieces, int n, kvp_prompt *out, kvp_error *err);
/* 1 if raw-text prompts (no template, or pieces) start with BOS for this tokenizer. */
int kvp_raw_bos(const kvp_tokenizer *t);

/* ---- the BLANK donor ------------------------------------------------------------------- */

typedef enum kvp_filler_mode {
    KVP_FILLER_SAME_LENGTH = 0, /* each user-content run keeps its token count (positions kept) */
    KVP_FILLER_ONCE = 1,        /* each run becomes the filler tokenized once (shorter donor) */
} kvp_filler_mode;

#define KVP_DEFAULT_FILLER "This is a neutral placeholder text with nothing in particular to say. "

/* Donor prompt: the same tokens, except each maximal run of `user` tokens is replaced by
 * filler tokens. SAME_LENGTH repeats the filler's tokens and cuts them to exactly the run's
 * token count, so every scaffold/system token keeps its position. pos_map (optional, [n of
 * the original]) receives each original position's donor position, or -1 for replaced
 * positions. ONCE puts the filler's tokens once per run, whatever the run's length. Donor
 * tokens keep the `user` label on filler positions. */
int kvp_prompt_blank(const kvp_tokenizer *t, const kvp_prompt *p, const char *filler, kvp_filler_mode mode,
                     kvp_prompt *donor, int32_t *pos_map, kvp_error *err);

#ifdef __cplusplus
}
#endif
#endif
