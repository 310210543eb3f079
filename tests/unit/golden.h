/* Helpers for reading reference goldens (GGUF files written by the tools/ scripts). */
#ifndef KVPROBE_TEST_GOLDEN_H
#define KVPROBE_TEST_GOLDEN_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvprobe/gguf.h"

/* Integer array metadata as a malloc'd int32 array, or NULL if absent / not an array. */
static inline int32_t *golden_int_array(const gguf_file *f, const char *key, int *n) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->value.type != GGUF_VT_ARRAY || !kv->value.v.arr.raw) return NULL;
    *n = (int)kv->value.v.arr.n;
    int32_t *a = malloc((size_t)(*n ? *n : 1) * sizeof *a);
    for (int i = 0; a && i < *n; i++) a[i] = (int32_t)gguf_arr_i64(&kv->value, (uint64_t)i);
    return a;
}

/* String metadata as a malloc'd NUL-terminated copy, or NULL if absent. */
static inline char *golden_string(const gguf_file *f, const char *key) {
    gguf_str v;
    kvp_error err = {0};
    if (gguf_get_str(f, key, &v, &err)) return NULL;
    char *s = malloc(v.len + 1);
    if (s) {
        memcpy(s, v.ptr, v.len);
        s[v.len] = 0;
    }
    return s;
}

#endif
