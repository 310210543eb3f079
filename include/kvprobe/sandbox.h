/* kvprobe — running model-written code safely (MBPP / HumanEval scoring).
 *
 * Each run: a fresh temporary directory; a child process in new network, PID and IPC
 * namespaces (no network at all; every process it starts dies with it); as root, privileges
 * dropped to nobody; Landlock limits writes to its directory; rlimits on CPU time, address
 * space, process count, file size and open files; a wall-clock timeout after which its whole
 * process group is killed. Falls back to rlimits + process group where namespaces are not
 * available (unprivileged, no user namespaces), and says so in the result. */
#ifndef KVPROBE_SANDBOX_H
#define KVPROBE_SANDBOX_H

#include <stddef.h>

#include "kvprobe/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvp_sandbox_opts {
    double timeout_s;     /* wall clock (default 10) */
    long mem_bytes;       /* RLIMIT_AS (default 1 GiB) */
    int max_procs;        /* RLIMIT_NPROC (default 32) */
    long max_file_bytes;  /* RLIMIT_FSIZE (default 16 MiB) */
    const char *python;   /* interpreter (default "python3" on PATH) */
} kvp_sandbox_opts;

typedef struct kvp_sandbox_result {
    int passed;           /* exited 0 within the limits */
    int timed_out;
    int exit_code;        /* -1 if killed by a signal */
    int signal;
    int isolated;         /* 1 if namespaces + Landlock were in force */
    double seconds;
    char output[512];     /* tail of stdout+stderr */
} kvp_sandbox_result;

/* Run a Python program. Returns 0 if it could be run (whatever its outcome: see res). */
int kvp_sandbox_python(const char *code, const kvp_sandbox_opts *opts, kvp_sandbox_result *res, kvp_error *err);

#ifdef __cplusplus
}
#endif
#endif
