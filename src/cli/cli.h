/* CLI subcommands: each parses its own arguments and returns a process exit code. */
#ifndef KVPROBE_CLI_H
#define KVPROBE_CLI_H

#include "kvprobe/error.h"

int cmd_inspect(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_report(int argc, char **argv);

#include "kvprobe/chat.h"

/* Chat options shared by tokenize and generate. */
typedef struct cli_chat {
    int on;               /* --chat */
    const char *system;   /* --system S */
    const char *tmpl;     /* --template NAME (default: from the GGUF) */
    int no_think;         /* --no-think: Qwen3 enable_thinking=false */
} cli_chat;

/* Consume a chat option at argv[*i] (advancing *i past its value). 1 consumed, 0 not a chat
 * option, -1 error (printed). */
int cli_chat_arg(cli_chat *c, int argc, char **argv, int *i);
/* Render and tokenize one user turn (plus optional system) with the chosen template. */
int cli_chat_prompt(const cli_chat *c, const gguf_file *f, const kvp_tokenizer *t, const char *user, kvp_prompt *out,
                    kvp_error *err);

/* Print "kvprobe: <msg>" to stderr and return the exit code for err->code. */
int cli_error(const kvp_error *err);
/* Parse a full decimal integer / float argument; print an error naming opt on failure. */
int cli_int(const char *opt, const char *s, long lo, long hi, long *out);
int cli_float(const char *opt, const char *s, double *out);

#endif
