#include "readfile.h"

#include <errno.h>
#include <stdlib.h>
#include <zlib.h>

char *kvp_read_file(const char *path, size_t *len) {
    gzFile f = gzopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    int r = 0;
    while (b && (r = gzread(f, b + n, (unsigned)(cap - n - 1))) > 0) {
        n += (size_t)r;
        if (cap - n < 4096) {
            char *q = realloc(b, cap *= 2);
            if (!q) free(b);
            b = q;
        }
    }
    gzclose(f);
    if (b && r < 0) { /* read or decompression error */
        free(b);
        errno = EIO;
        return NULL;
    }
    if (!b) {
        errno = ENOMEM;
        return NULL;
    }
    b[n] = 0;
    *len = n;
    return b;
}
