/* The KV-policy race in a sweep's report: accuracy (y) against compression (x = 1 - the share
 * of the prompt's K/V a sequence holds of its own, prompt_kv_own), like kvpress's leaderboard.
 *
 * Series: the scaffold policy (the blank cells: scaffold:L,W equals blank (L, W) bit for bit,
 * and holds L / n_layer of the prompt K/V of its own), drop-content, and every --kv-policy peer
 * family (streaming, h2o, snapkv), each starting at full (clean, x = 0). Blank and drop-content
 * are drawn at W = 0 (compressed from the first step, like the peers) and at the largest W <= 16
 * of the grid (the study's "once W tokens are generated"). Every point has its Wilson 95%
 * interval. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvprobe/sweep.h"
#include "report_impl.h"

#define MAX_SERIES 16

typedef struct series {
    char name[48];
    const agg *pt[MAX_CONDS * 64];
    int n;
} series;

static double own_of(const agg *a) { return a->own_n ? a->own / a->own_n : 1.0; }

static int cmp_x(const void *x, const void *y) {
    double a = 1 - own_of(*(const agg *const *)x), b = 1 - own_of(*(const agg *const *)y);
    return (a > b) - (a < b);
}

static series *series_for(series *s, int *n, const char *name) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(s[i].name, name)) return &s[i];
    if (*n == MAX_SERIES) return NULL;
    series *x = &s[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->n = 0;
    return x;
}

/* The family a cell belongs to ("" if none): a peer's name before ':', a scaffold /
 * drop-content policy with a recent window by its window and W, or blank / drop-content at the
 * chosen steps. */
static void family(const agg *a, int w_late, char *out, size_t cap) {
    const char *colon = strchr(a->cond, ':'), *recent = strstr(a->cond, "recent=");
    int edit = colon && (!strncmp(a->cond, "scaffold:", 9) || !strncmp(a->cond, "drop-content:", 13));
    out[0] = 0;
    if (edit && recent) snprintf(out, cap, "%.*s+recent=%d W=%d", (int)(colon - a->cond), a->cond, atoi(recent + 7), a->W);
    else if (colon) snprintf(out, cap, "%.*s", (int)(colon - a->cond), a->cond);
    else if ((!strcmp(a->cond, "blank") || !strcmp(a->cond, "drop-content")) && (a->W == 0 || a->W == w_late))
        snprintf(out, cap, "%s W=%d", !strcmp(a->cond, "blank") ? "scaffold" : "drop-content", a->W);
}

int sweep_race(const agg *a, int n_a, const char *dataset, sbuf *svg, sbuf *html) {
    const agg *clean = NULL;
    int w_late = -1, compressed = 0;
    for (int i = 0; i < n_a; i++) {
        if (!strcmp(a[i].cond, "clean")) clean = &a[i];
        else if (a[i].own_n && own_of(&a[i]) < 1 - 1e-9) compressed = 1;
        if ((!strcmp(a[i].cond, "blank") || !strcmp(a[i].cond, "drop-content")) && a[i].W <= 16 && a[i].W > w_late)
            w_late = a[i].W;
    }
    if (!clean || !compressed) return 0;
    series *s = calloc(MAX_SERIES, sizeof *s);
    if (!s) return -1;
    int ns = 0;
    for (int i = 0; i < n_a; i++) {
        char fam[48];
        family(&a[i], w_late, fam, sizeof fam);
        if (!fam[0] || !a[i].own_n) continue;
        series *x = series_for(s, &ns, fam);
        if (x && x->n == 0) x->pt[x->n++] = clean; /* every series starts at full */
        if (x && x->n < (int)(sizeof x->pt / sizeof x->pt[0])) x->pt[x->n++] = &a[i];
    }
    for (int i = 0; i < ns; i++) qsort(s[i].pt, (size_t)s[i].n, sizeof s[i].pt[0], cmp_x);

    static const char *const palette[] = {"#000000", "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
    const int pw = 460, ph = 260, left = 56, top = 44, w = left + pw + 200, h = top + ph + 60;
    double ca = clean->score / clean->n;
    sb_printf(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", w, h);
    sb_printf(svg, "<text x=\"%d\" y=\"18\" font-size=\"14\" font-weight=\"bold\">KV policies: accuracy vs compression of the prompt K/V</text>\n",
              left);
    sb_printf(svg, "<text x=\"%d\" y=\"34\">%s; full %.1f%% (n=%d); bars: 95%% CI</text>\n", left, dataset, 100 * ca, clean->n);
    sb_printf(svg, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n", left, top, pw, ph);
    for (int t = 0; t <= 4; t++) {
        int y = top + ph - t * ph / 4, x = left + t * pw / 4;
        sb_printf(svg, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#eee\"/><text x=\"%d\" y=\"%d\" text-anchor=\"end\">%d%%</text>\n",
                  left, left + pw, y, y, left - 4, y + 4, 25 * t);
        sb_printf(svg, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%d%%</text>\n", x, top + ph + 16, 25 * t);
    }
    sb_printf(svg, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">compression: share of the prompt's K/V not held by the sequence</text>\n",
              left + pw / 2, top + ph + 36);
    for (int i = 0; i < ns; i++) {
        const char *col = palette[(i + 1) % 9], *w = strstr(s[i].name, " W=");
        const char *dash = w && strcmp(w, " W=0") ? " stroke-dasharray=\"6,3\"" : ""; /* edited after W > 0 steps */
        sb_printf(svg, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", col, dash);
        for (int k = 0; k < s[i].n; k++)
            sb_printf(svg, "%.1f,%.1f ", left + (1 - own_of(s[i].pt[k])) * pw, top + ph - s[i].pt[k]->score / s[i].pt[k]->n * ph);
        sb_printf(svg, "\"/>\n");
        for (int k = 1; k < s[i].n; k++) {
            const agg *p = s[i].pt[k];
            double lo, hi, x = left + (1 - own_of(p)) * pw, acc = p->score / p->n;
            kvp_wilson((int)lround(p->score), p->n, &lo, &hi);
            sb_printf(svg, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-opacity=\"0.5\"/>", x, x,
                      top + ph - lo * ph, top + ph - hi * ph, col);
            sb_printf(svg, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"><title>%s L=%d W=%d: %.1f%% (n=%d), compression %.1f%%</title></circle>\n",
                      x, top + ph - acc * ph, col, p->cond, p->L, p->W, 100 * acc, p->n, 100 * (1 - own_of(p)));
        }
        sb_printf(svg, "<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>\n", left + pw + 10, top + 14 + 16 * i, col, s[i].name);
    }
    sb_printf(svg, "<circle cx=\"%d\" cy=\"%.1f\" r=\"4\" fill=\"#000\"><title>full: %.1f%%</title></circle>\n", left,
              top + ph - ca * ph, 100 * ca);
    sb_printf(svg, "</svg>\n");

    sb_printf(html, "<table><tr><th>policy</th><th>condition</th><th>L</th><th>W</th><th>compression</th><th>accuracy</th>"
                    "<th>95%% CI</th><th>n</th></tr>\n");
    for (int i = 0; i < ns; i++)
        for (int k = 1; k < s[i].n; k++) {
            const agg *p = s[i].pt[k];
            double lo, hi;
            kvp_wilson((int)lround(p->score), p->n, &lo, &hi);
            sb_printf(html, "<tr><td>%s</td><td>", s[i].name);
            sb_html(html, p->cond);
            sb_printf(html, "</td><td>%d</td><td>%d</td><td>%.1f%%</td><td>%.1f%%</td><td>%.1f–%.1f%%</td><td>%d</td></tr>\n", p->L,
                      p->W, 100 * (1 - own_of(p)), 100 * p->score / p->n, 100 * lo, 100 * hi, p->n);
        }
    sb_printf(html, "</table>\n");
    free(s);
    return 1;
}
