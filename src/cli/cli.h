/* CLI subcommands: each parses its own arguments and returns a process exit code. */
#ifndef KVPROBE_CLI_H
#define KVPROBE_CLI_H

#include "kvprobe/error.h"

int cmd_inspect(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);

/* Print "kvprobe: <msg>" to stderr and return the exit code for err->code. */
int cli_error(const kvp_error *err);
/* Parse a full decimal integer / float argument; print an error naming opt on failure. */
int cli_int(const char *opt, const char *s, long lo, long hi, long *out);
int cli_float(const char *opt, const char *s, double *out);

#endif
