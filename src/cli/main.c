/* kvprobe command line: a thin layer over the library. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kvprobe/kvprobe.h"


int cli_error(const kvp_error *err) {
    fprintf(stderr, "kvprobe: %s\n", err->msg);
    return kvp_exit_code(err->code);
}

int cli_int(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "kvprobe: %s expects an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_float(const char *opt, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end) {
        fprintf(stderr, "kvprobe: %s expects a number, got '%s'\n", opt, s);
        return -1;
    }
    *out = v;
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "kvprobe %s — LLM inference with an editable KV cache\n\n"
            "usage: kvprobe <command> [options]\n\n"
            "commands:\n"
            "  inspect FILE [--json]           architecture, hyper-parameters, tokenizer, tensor table\n"
            "  generate -m MODEL (-p TEXT | --tokens ID,ID,...) [-n N] [-t THREADS]\n"
            "           [--temp T] [--top-k K] [--top-p P] [--seed S] [--ctx N] [--kv-f16]\n"
            "           [--no-bos] [--ids]     greedy (default) or seeded sampling\n"
            "  tokenize (-m MODEL | --hf tokenizer.json) [--ids] [--bos] [--parse-special] TEXT\n"
            "                                  tokens with their text pieces, or ids only\n"
            "  sweep -m MODEL --dataset NAME[:N] [--conditions ...] [--layers ...] [--steps ...] [--out DIR]\n"
            "                                  KV splice experiment grid with records and a report\n"
            "  report DIR                      rebuild a sweep's summary and report\n"
            "  version                         print the version\n\n"
            "Run 'kvprobe <command> --help' for details.\n",
            KVPROBE_VERSION);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 1;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "sweep")) return cmd_sweep(argc - 1, argv + 1);
    if (!strcmp(cmd, "report")) return cmd_report(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("kvprobe %s\n", KVPROBE_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "kvprobe: unknown command '%s'\n", cmd);
    usage(stderr);
    return 1;
}
