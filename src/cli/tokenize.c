/* kvprobe tokenize: text -> tokens, one per line (id, piece, segment), or ids only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kvprobe/kvprobe.h"

static void tok_usage(FILE *f) {
    fprintf(f,
            "usage: kvprobe tokenize (-m MODEL | --hf tokenizer.json) [options] TEXT\n"
            "  -m, --model FILE     GGUF whose tokenizer to use\n"
            "  --hf FILE            a Hugging Face tokenizer.json instead\n"
            "  --ids                print only the token ids, space-separated, on one line\n"
            "  --bos                prepend BOS\n"
            "  --parse-special      special tokens written in TEXT become single tokens\n"
            "  -f FILE              read TEXT from FILE ('-' = stdin)\n"
            "  --chat               render TEXT as a user turn with the chat template; each token\n"
            "                       is printed with its segment (scaffold/system/user/assistant)\n"
            "  --system S           system message (implies --chat)\n"
            "  --template NAME      " KVP_TEMPLATE_NAMES " (default: from the GGUF)\n"
            "  --no-think           Qwen3: enable_thinking=false\n");
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (n < cap) break;
        char *q = realloc(b, cap *= 2);
        if (!q) {
            free(b);
            b = NULL;
        } else {
            b = q;
        }
    }
    if (f != stdin) fclose(f);
    *len = n;
    return b;
}

/* Print a piece with control characters escaped so each token stays on one line. */
static void print_piece(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
}

static void print_ids(const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *hf = NULL, *text = NULL, *file = NULL;
    int ids_only = 0, bos = 0, special = 0;
    cli_chat chat = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int c = cli_chat_arg(&chat, argc, argv, &i);
        if (c < 0) return 1;
        if (c) continue;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) model = argv[++i];
        else if (!strcmp(a, "--hf") && i + 1 < argc) hf = argv[++i];
        else if (!strcmp(a, "-f") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(a, "--ids")) ids_only = 1;
        else if (!strcmp(a, "--bos")) bos = 1;
        else if (!strcmp(a, "--parse-special")) special = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            tok_usage(stdout);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "kvprobe tokenize: unknown option '%s'\n", a);
            tok_usage(stderr);
            return 1;
        } else if (!text) text = a;
        else {
            fprintf(stderr, "kvprobe tokenize: one TEXT argument (quote it)\n");
            return 1;
        }
    }
    if ((!model == !hf) || (!text == !file)) {
        tok_usage(stderr);
        return 1;
    }
    kvp_error err = {0};
    gguf_file *g = NULL;
    kvp_tokenizer *t = NULL;
    char *buf = NULL;
    size_t len = text ? strlen(text) : 0;
    if (file && !(buf = slurp(file, &len))) {
        fprintf(stderr, "kvprobe tokenize: cannot read '%s'\n", file);
        return 1;
    }
    if (model) {
        if ((g = gguf_open(model, &err))) t = kvp_tokenizer_load(g, &err);
    } else {
        t = kvp_tokenizer_load_hf(hf, &err);
    }
    int rc = 0;
    kvp_tokens r = {0};
    kvp_prompt p = {0};
    kvp_tok_opts o = {.add_bos = bos, .parse_special = special};
    if (t && chat.on) {
        if (bos || special) {
            fprintf(stderr, "kvprobe tokenize: --bos/--parse-special do not apply with --chat (the template decides)\n");
            rc = 1;
        } else if (memchr(buf ? buf : text, 0, len)) {
            fprintf(stderr, "kvprobe tokenize: --chat text must not contain NUL bytes\n");
            rc = 1;
        } else if (cli_chat_prompt(&chat, g, t, buf ? buf : text, &p, &err)) {
            rc = cli_error(&err);
        } else if (ids_only) {
            print_ids(p.ids, p.n);
        } else {
            for (int i = 0; i < p.n; i++) {
                size_t end = i + 1 < p.n ? p.offsets[i + 1] : p.tok_len, start = p.offsets[i];
                printf("%7d  %-9s  ", p.ids[i], kvp_segment_name(p.seg[i]));
                print_piece(p.tok_text + start, end > start ? end - start : 0);
                printf("\n");
            }
        }
    } else if (!t || kvp_tokenize_ex(t, buf ? buf : text, len, &o, &r, &err)) {
        rc = cli_error(&err);
    } else if (ids_only) {
        print_ids(r.ids, r.n);
    } else {
        for (int i = 0; i < r.n; i++) {
            size_t end = i + 1 < r.n ? r.offsets[i + 1] : r.text_len, start = r.offsets[i];
            /* Without a template the text is all user content; special tokens parsed from it
             * (--parse-special, --bos) are scaffolding. */
            int ty = kvp_token_type(t, r.ids[i]);
            printf("%7d  %-9s  ", r.ids[i], kvp_segment_name(ty == KVP_TOK_CONTROL ? KVP_SEG_SCAFFOLD : KVP_SEG_USER));
            /* tokens that share a start offset (byte fallback) show their own bytes */
            if (end > start && (i + 1 == r.n || r.offsets[i + 1] != start)) {
                print_piece(r.text + start, end - start);
            } else {
                char piece[64];
                size_t n = kvp_token_to_bytes(t, r.ids[i], 1, piece, sizeof piece);
                print_piece(piece, n < sizeof piece ? n : sizeof piece);
            }
            printf("\n");
        }
        if (r.n_replaced) fprintf(stderr, "kvprobe: replaced %d invalid UTF-8 sequence(s) with U+FFFD\n", r.n_replaced);
    }
    kvp_tokens_free(&r);
    kvp_prompt_free(&p);
    kvp_tokenizer_free(t);
    gguf_close(g);
    free(buf);
    return rc;
}
