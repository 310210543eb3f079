#include "strmap.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_bytes(const char *p, size_t n) { /* FNV-1a */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

int strmap_init(strmap *m, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap <<= 1;
    m->slots = calloc(cap, sizeof *m->slots);
    m->cap = cap;
    m->n = 0;
    return m->slots ? 0 : -1;
}

void strmap_free(strmap *m) {
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}

static strmap_entry *find(const strmap *m, const char *key, size_t len) {
    size_t i = hash_bytes(key, len) & (m->cap - 1);
    for (;;) {
        strmap_entry *e = &m->slots[i];
        if (!e->key || (e->len == len && memcmp(e->key, key, len) == 0)) return e;
        i = (i + 1) & (m->cap - 1);
    }
}

int strmap_put(strmap *m, const char *key, size_t len, int32_t value) {
    if (len > UINT32_MAX) return -1;
    if ((m->n + 1) * 2 > m->cap) {
        strmap bigger;
        if (strmap_init(&bigger, m->cap) != 0) return -1;
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].key) *find(&bigger, m->slots[i].key, m->slots[i].len) = m->slots[i], bigger.n++;
        free(m->slots);
        *m = bigger;
    }
    strmap_entry *e = find(m, key, len);
    if (e->key) return 0;
    e->key = key ? key : "";
    e->len = (uint32_t)len;
    e->value = value;
    m->n++;
    return 0;
}

int32_t strmap_get(const strmap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    const strmap_entry *e = find(m, key, len);
    return e->key ? e->value : -1;
}
