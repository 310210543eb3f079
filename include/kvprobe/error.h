/* kvprobe — error reporting.
 *
 * Every fallible call takes a kvp_error* and returns a non-zero code on failure with a
 * human-readable message (file, what, byte offset where relevant). No global state. */
#ifndef KVPROBE_ERROR_H
#define KVPROBE_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

enum kvp_status {
    KVP_OK = 0,
    KVP_E_IO = 1,          /* cannot open/read/map a file */
    KVP_E_FORMAT = 2,      /* malformed, truncated or hostile input */
    KVP_E_UNSUPPORTED = 3, /* valid but unsupported: architecture, tensor type, ... */
    KVP_E_NOMEM = 4,
    KVP_E_INVALID = 5,     /* bad argument from the caller */
};

typedef struct kvp_error {
    int code;
    char msg[1024];
} kvp_error;

/* Record an error (first one wins is NOT applied: the latest call overwrites) and return code. */
int kvp_fail(kvp_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix the existing message with more context ("loading X: <old msg>"). Returns err->code. */
int kvp_wrap(kvp_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Process exit code for a status: bad input (format/unsupported) exits 2, anything else 1. */
int kvp_exit_code(int status);

#ifdef __cplusplus
}
#endif
#endif
