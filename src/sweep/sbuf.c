/* A growing text buffer for the reports (CSV, HTML, SVG). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_impl.h"

void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (b->n + (size_t)k + 1 > b->cap) {
        b->cap = (b->n + (size_t)k + 1) * 2;
        b->p = realloc(b->p, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

void sb_csv(sbuf *b, const char *field) {
    if (!strpbrk(field, ",\"\n")) {
        sb_printf(b, "%s", field);
        return;
    }
    sb_printf(b, "\"");
    for (const char *p = field; *p; p++) sb_printf(b, *p == '"' ? "\"\"" : "%c", *p);
    sb_printf(b, "\"");
}

void sb_html(sbuf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '<') sb_printf(b, "&lt;");
        else if (*s == '>') sb_printf(b, "&gt;");
        else if (*s == '&') sb_printf(b, "&amp;");
        else if (*s == '"') sb_printf(b, "&quot;");
        else sb_printf(b, "%c", *s);
    }
}

int sb_write_file(const char *dir, const char *name, const char *text, kvp_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) return kvp_fail(err, KVP_E_IO, "%s: cannot write", path);
    return 0;
}

