/* Open-addressing hash map from byte strings (not owned; must outlive the map) to int32. */
#ifndef KVPROBE_STRMAP_H
#define KVPROBE_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct strmap_entry {
    const char *key;
    uint32_t len;
    int32_t value;
} strmap_entry;

typedef struct strmap {
    strmap_entry *slots;
    size_t cap; /* power of two */
    size_t n;
} strmap;

int strmap_init(strmap *m, size_t expected); /* 0 ok, -1 out of memory */
void strmap_free(strmap *m);
/* Insert if absent (first insertion wins). 0 ok, -1 out of memory. */
int strmap_put(strmap *m, const char *key, size_t len, int32_t value);
/* Value or -1. */
int32_t strmap_get(const strmap *m, const char *key, size_t len);

#endif
