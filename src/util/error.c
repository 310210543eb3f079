#include "kvprobe/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int kvp_fail(kvp_error *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

int kvp_wrap(kvp_error *err, const char *fmt, ...) {
    if (!err) return KVP_E_INVALID;
    char prefix[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t n = strlen(prefix);
    if (n > sizeof err->msg - 3) n = sizeof err->msg - 3;
    memcpy(err->msg, prefix, n);
    memcpy(err->msg + n, ": ", 2);
    size_t room = sizeof err->msg - n - 3, m = strnlen(old, room);
    memcpy(err->msg + n + 2, old, m);
    err->msg[n + 2 + m] = 0;
    return err->code;
}

int kvp_exit_code(int status) {
    if (status == KVP_OK) return 0;
    return (status == KVP_E_FORMAT || status == KVP_E_UNSUPPORTED) ? 2 : 1;
}
