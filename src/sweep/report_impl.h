/* Internal to the sweep's reports (report.c, race.c, sbuf.c): per-cell aggregates of
 * results.jsonl and a growing text buffer for CSV, HTML and SVG. */
#ifndef KVPROBE_REPORT_IMPL_H
#define KVPROBE_REPORT_IMPL_H

#include <stddef.h>

#include "kvprobe/error.h"

#define MAX_CONDS 48 /* conditions and --kv-policy specs per report */
#define COND_NAME 96

/* One cell (condition, L, W) over its examples. */
typedef struct agg {
    char cond[COND_NAME];
    int L, W;
    int n;
    double score, kl, agree;
    int kl_n;
    double own; /* summed prompt_kv_own */
    int own_n;
} agg;

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_csv(sbuf *b, const char *field); /* a CSV field, quoted when it holds , or " (policy specs) */
void sb_html(sbuf *b, const char *s);    /* text with HTML's special characters escaped */
int sb_write_file(const char *dir, const char *name, const char *text, kvp_error *err);

/* The KV-policy race (race.c): accuracy against the share of the prompt's K/V each sequence
 * gives up, for full, the scaffold policy (blank cells), drop-content and the --kv-policy
 * peers. Writes an SVG into svg and a table into html; returns 0 without writing when the
 * cells hold no policy to compare (no prompt_kv_own below 1 but clean's). */
int sweep_race(const agg *a, int n_a, const char *dataset, sbuf *svg, sbuf *html);

#endif
