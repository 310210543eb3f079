/* --chat / --system / --template / --no-think, shared by the tokenize and generate commands. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cli_chat_arg(cli_chat *c, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "--chat")) return c->on = 1;
    if (!strcmp(a, "--no-think")) return c->no_think = 1;
    if (!strcmp(a, "--system") || !strcmp(a, "--template")) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "kvprobe: %s needs a value\n", a);
            return -1;
        }
        (!strcmp(a, "--system") ? (c->system = argv[++*i]) : (c->tmpl = argv[++*i]));
        c->on = 1;
        return 1;
    }
    return 0;
}

int cli_chat_prompt(const cli_chat *c, const gguf_file *f, const kvp_tokenizer *t, const char *user, kvp_prompt *out,
                    kvp_error *err) {
    kvp_template tm;
    kvp_template_init(&tm);
    if (f && kvp_template_detect(f, &tm, err) && !c->tmpl) return err->code;
    if (c->tmpl && kvp_template_select(&tm, c->tmpl, err)) return err->code;
    if (c->no_think) tm.enable_thinking = 0;
    kvp_message msgs[2];
    int n = 0;
    if (c->system) msgs[n++] = (kvp_message){"system", c->system};
    msgs[n++] = (kvp_message){"user", user};
    return kvp_chat_prompt(t, &tm, msgs, n, 1, out, err);
}
