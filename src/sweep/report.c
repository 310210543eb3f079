/* Sweep reports from results.jsonl: summary.csv (Wilson 95% intervals), a self-contained
 * report.html (inline SVG, no network), and the SVG figures alone. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/readfile.h"
#include "../util/strmap.h"
#include "kvprobe/kvprobe.h"
#include "kvprobe/sweep.h"
#include "report_impl.h"

void kvp_wilson(int k, int n, double *lo, double *hi) {
    if (n <= 0) {
        *lo = 0;
        *hi = 1;
        return;
    }
    const double z = 1.959963984540054;
    double p = (double)k / n, z2 = z * z, den = 1 + z2 / n;
    double c = (p + z2 / (2 * n)) / den, h = z * sqrt(p * (1 - p) / n + z2 / (4.0 * n * n)) / den;
    *lo = fmax(0, c - h);
    *hi = fmin(1, c + h);
}

/* ---- aggregation ------------------------------------------------------------------------- */

/* The conditions of the side-by-side completions: clean next to blank and zero. */
static const char *const COMPLETION_CONDS[3] = {"clean", "blank", "zero"};

typedef struct sample {
    char *id, *cond, *text;
    int L, W;
    double score;
} sample;

/* Every record, compactly: for paired tests and failure tables. */
typedef struct cellrec {
    int ex, cond, L, W; /* example and condition as indices (ex_ids, conds; clean = -1) */
    int score, err, looped, max_tokens;
} cellrec;

#define N_ERR 11
static const char *const ERR_NAMES[N_ERR] = {"pass",    "no_code", "syntax", "wrong_name", "assertion", "runtime",
                                             "timeout", "killed",  "wrong",  "no_answer",  "other"};

typedef struct report {
    agg *a;
    int n_a, cap_a;
    sample *s;
    int n_s, cap_s;
    cellrec *c;
    int n_c, cap_c;
    strmap ids;        /* example id -> index */
    char **id_keys;
    int n_ids, cap_ids;
    int *cells_of;     /* records per example (by id index) */
    int full, n_complete; /* the most records any example has; examples that have that many */
    char dataset[128], model_sha[65], activations[16];
    int Ls[256], n_L, Ws[256], n_W;
    char conds[MAX_CONDS][COND_NAME];
    int n_conds;
    int clean_L;
} report;

static agg *find_agg(report *r, const char *cond, int L, int W) {
    for (int i = 0; i < r->n_a; i++)
        if (r->a[i].L == L && r->a[i].W == W && !strcmp(r->a[i].cond, cond)) return &r->a[i];
    if (r->n_a == r->cap_a) {
        r->cap_a = r->cap_a ? 2 * r->cap_a : 64;
        r->a = realloc(r->a, (size_t)r->cap_a * sizeof *r->a);
    }
    agg *a = &r->a[r->n_a++];
    memset(a, 0, sizeof *a);
    snprintf(a->cond, sizeof a->cond, "%s", cond);
    a->L = L;
    a->W = W;
    return a;
}

static void add_int(int *v, int *n, int x) {
    for (int i = 0; i < *n; i++)
        if (v[i] == x) return;
    if (*n < 256) v[(*n)++] = x;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Clean first, then conditions in order of first appearance, then W, then L. */
static int cond_rank(const report *r, const char *c) {
    if (!strcmp(c, "clean")) return -1;
    for (int i = 0; i < r->n_conds; i++)
        if (!strcmp(r->conds[i], c)) return i;
    return r->n_conds;
}

static int cmp_agg(const void *a, const void *b, void *ctx) {
    const agg *x = a, *y = b;
    int rx = cond_rank(ctx, x->cond), ry = cond_rank(ctx, y->cond);
    if (rx != ry) return rx - ry;
    if (x->W != y->W) return x->W - y->W;
    return x->L - y->L;
}

/* The index of example id k, added if new. */
static int example_index(report *r, const char *k) {
    int ex = strmap_get(&r->ids, k, strlen(k));
    if (ex >= 0) return ex;
    if (r->n_ids == r->cap_ids) {
        r->cap_ids = r->cap_ids ? 2 * r->cap_ids : 256;
        r->id_keys = realloc(r->id_keys, (size_t)r->cap_ids * sizeof *r->id_keys);
        r->cells_of = realloc(r->cells_of, (size_t)r->cap_ids * sizeof *r->cells_of);
    }
    char *key = strdup(k);
    r->cells_of[ex = r->n_ids++] = 0;
    r->id_keys[ex] = key;
    strmap_put(&r->ids, key, strlen(key), ex);
    return ex;
}

/* A run still going (or cut short) has examples with only some of their cells: those are left
 * out, so that every cell is counted over the same examples and the tables compare like with
 * like. Every example of a finished run has all its cells, and nothing is left out. */
static void count_cells(report *r, FILE *f) {
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "example_id");
        if (cJSON_IsString(id)) {
            int ex = example_index(r, id->valuestring); /* (may move cells_of) */
            r->cells_of[ex]++;
        }
        cJSON_Delete(j);
    }
    free(line);
    for (int i = 0; i < r->n_ids; i++)
        if (r->cells_of[i] > r->full) r->full = r->cells_of[i];
    for (int i = 0; i < r->n_ids; i++) r->n_complete += r->cells_of[i] == r->full;
    rewind(f);
}

static int load(report *r, const char *path, kvp_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return kvp_fail(err, KVP_E_IO, "%s: cannot open", path);
    count_cells(r, f);
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0;
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        cJSON *j = cJSON_Parse(line);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "condition"), *L = cJSON_GetObjectItemCaseSensitive(j, "L"),
                    *W = cJSON_GetObjectItemCaseSensitive(j, "W"), *sc = cJSON_GetObjectItemCaseSensitive(j, "score"),
                    *kl = cJSON_GetObjectItemCaseSensitive(j, "kl_mean"), *ag = cJSON_GetObjectItemCaseSensitive(j, "agreement"),
                    *id = cJSON_GetObjectItemCaseSensitive(j, "example_id"), *tx = cJSON_GetObjectItemCaseSensitive(j, "text"),
                    *ds = cJSON_GetObjectItemCaseSensitive(j, "dataset"), *sha = cJSON_GetObjectItemCaseSensitive(j, "model_sha256");
        if (!cJSON_IsString(c) || !cJSON_IsNumber(L) || !cJSON_IsNumber(W) || !cJSON_IsNumber(sc) || !cJSON_IsString(id)) {
            cJSON_Delete(j);
            free(line);
            fclose(f);
            return kvp_fail(err, KVP_E_FORMAT, "%s:%d: not a kvprobe record", path, lineno);
        }
        int ex = example_index(r, id->valuestring);
        if (r->cells_of[ex] < r->full) { /* an example still in progress */
            cJSON_Delete(j);
            continue;
        }
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "activations"), *ec = cJSON_GetObjectItemCaseSensitive(j, "error_class"),
                    *lp = cJSON_GetObjectItemCaseSensitive(j, "looped"), *sr = cJSON_GetObjectItemCaseSensitive(j, "stop_reason");
        if (cJSON_IsString(act)) snprintf(r->activations, sizeof r->activations, "%s", act->valuestring);
        if (cJSON_IsString(ds)) snprintf(r->dataset, sizeof r->dataset, "%s", ds->valuestring);
        if (cJSON_IsString(sha)) snprintf(r->model_sha, sizeof r->model_sha, "%s", sha->valuestring);
        agg *a = find_agg(r, c->valuestring, L->valueint, W->valueint);
        a->n++;
        a->score += sc->valuedouble;
        if (cJSON_IsNumber(kl)) a->kl += kl->valuedouble, a->kl_n++;
        if (cJSON_IsNumber(ag)) a->agree += ag->valuedouble;
        const cJSON *own = cJSON_GetObjectItemCaseSensitive(j, "prompt_kv_own");
        if (cJSON_IsNumber(own)) a->own += own->valuedouble, a->own_n++;
        if (strcmp(c->valuestring, "clean")) {
            add_int(r->Ls, &r->n_L, L->valueint);
            add_int(r->Ws, &r->n_W, W->valueint);
            int known = 0;
            for (int i = 0; i < r->n_conds; i++) known |= !strcmp(r->conds[i], c->valuestring);
            if (!known && r->n_conds < MAX_CONDS) snprintf(r->conds[r->n_conds++], COND_NAME, "%s", c->valuestring);
        } else {
            r->clean_L = L->valueint;
        }
        if (r->n_c == r->cap_c) {
            r->cap_c = r->cap_c ? 2 * r->cap_c : 1024;
            r->c = realloc(r->c, (size_t)r->cap_c * sizeof *r->c);
        }
        int e = N_ERR - 1;
        for (int k = 0; cJSON_IsString(ec) && k < N_ERR - 1; k++)
            if (!strcmp(ec->valuestring, ERR_NAMES[k])) e = k;
        if (!cJSON_IsString(ec)) e = sc->valuedouble > 0.5 ? 0 : N_ERR - 1; /* records before error classes */
        int ci = -1;
        for (int k = 0; k < r->n_conds; k++)
            if (!strcmp(r->conds[k], c->valuestring)) ci = k;
        r->c[r->n_c++] = (cellrec){ex, ci, L->valueint, W->valueint, sc->valuedouble > 0.5, e, cJSON_IsTrue(lp),
                                   cJSON_IsString(sr) && !strcmp(sr->valuestring, "max_tokens")};
        /* the first three examples' records, wherever they lie (two examples in flight interleave
         * theirs), for side-by-side completions */
        int shown_cond = 0;
        for (int k = 0; k < 3; k++) shown_cond |= !strcmp(c->valuestring, COMPLETION_CONDS[k]);
        if (ex < 3 && shown_cond) {
            if (r->n_s == r->cap_s) {
                r->cap_s = r->cap_s ? 2 * r->cap_s : 64;
                r->s = realloc(r->s, (size_t)r->cap_s * sizeof *r->s);
            }
            r->s[r->n_s++] = (sample){strdup(id->valuestring), strdup(c->valuestring),
                                      strdup(cJSON_IsString(tx) ? tx->valuestring : ""), L->valueint, W->valueint,
                                      sc->valuedouble};
        }
        cJSON_Delete(j);
    }
    free(line);
    fclose(f);
    qsort(r->Ls, (size_t)r->n_L, sizeof(int), cmp_int);
    qsort(r->Ws, (size_t)r->n_W, sizeof(int), cmp_int);
    qsort_r(r->a, (size_t)r->n_a, sizeof *r->a, cmp_agg, r);
    if (!r->n_a) return kvp_fail(err, KVP_E_FORMAT, "%s: no records", path);
    return 0;
}

/* ---- output helpers ---------------------------------------------------------------------- */

/* Accuracy 0..1 -> a perceptually ordered colour (dark blue -> teal -> yellow). */
static void color(double v, char *out) {
    static const double stops[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
    if (v != v) {
        snprintf(out, 16, "#dddddd");
        return;
    }
    v = fmin(1, fmax(0, v)) * 4;
    int i = (int)v < 4 ? (int)v : 3;
    double t = v - i;
    snprintf(out, 16, "#%02x%02x%02x", (int)(stops[i][0] + t * (stops[i + 1][0] - stops[i][0])),
             (int)(stops[i][1] + t * (stops[i + 1][1] - stops[i][1])), (int)(stops[i][2] + t * (stops[i + 1][2] - stops[i][2])));
}

static double acc_of(report *r, const char *cond, int L, int W, int *n) {
    for (int i = 0; i < r->n_a; i++)
        if (r->a[i].L == L && r->a[i].W == W && !strcmp(r->a[i].cond, cond)) {
            *n = r->a[i].n;
            return r->a[i].score / r->a[i].n;
        }
    *n = 0;
    return NAN;
}

static double clean_acc(report *r, int *n) {
    int k = 0, m = 0;
    for (int i = 0; i < r->n_a; i++)
        if (!strcmp(r->a[i].cond, "clean")) k += (int)lround(r->a[i].score), m += r->a[i].n;
    *n = m;
    return m ? (double)k / m : NAN;
}

static void heatmap_svg(report *r, const char *cond, sbuf *b) {
    int cw = 64, ch = 30, left = 70, top = 50;
    int w = left + cw * r->n_W + 20, h = top + ch * r->n_L + 50, nc;
    if (w < 560) w = 560; /* room for the title and the axis note */
    double ca = clean_acc(r, &nc);
    sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", w, h);
    sb_printf(b, "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">%s: accuracy by layer cutoff L and step W</text>\n", left,
              cond);
    sb_printf(b, "<text x=\"%d\" y=\"38\">%s, clean %.1f%% (n=%d)</text>\n", left, r->dataset, 100 * ca, nc);
    for (int li = 0; li < r->n_L; li++) {
        sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">L=%d</text>\n", left - 6, top + li * ch + ch / 2 + 4, r->Ls[li]);
        for (int wi = 0; wi < r->n_W; wi++) {
            int n;
            double a = acc_of(r, cond, r->Ls[li], r->Ws[wi], &n);
            char col[16];
            color(a, col);
            sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"><title>%s L=%d W=%d: %.1f%% (n=%d)</title></rect>\n",
                      left + wi * cw, top + li * ch, cw - 1, ch - 1, col, cond, r->Ls[li], r->Ws[wi], 100 * a, n);
            if (n)
                sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"%s\">%.0f</text>\n", left + wi * cw + cw / 2,
                          top + li * ch + ch / 2 + 4, a > 0.6 ? "#000" : "#fff", 100 * a);
        }
    }
    for (int wi = 0; wi < r->n_W; wi++)
        sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">W=%d</text>\n", left + wi * cw + cw / 2, top + r->n_L * ch + 16,
                  r->Ws[wi]);
    sb_printf(b, "<text x=\"%d\" y=\"%d\">step W (columns) / first edited layer L (rows); cell = accuracy %%</text>\n", left,
              top + r->n_L * ch + 36);
    sb_printf(b, "</svg>\n");
}

static void curves_svg(report *r, int W, sbuf *b) {
    static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
    int pw = 420, ph = 220, left = 50, top = 40, h = top + ph + 60, w = left + pw + 150, nc;
    double ca = clean_acc(r, &nc);
    int maxL = r->n_L ? r->Ls[r->n_L - 1] : 1;
    if (maxL < 1) maxL = 1;
    sb_printf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", w, h);
    sb_printf(b, "<text x=\"%d\" y=\"20\" font-size=\"14\" font-weight=\"bold\">Accuracy vs first edited layer L, W=%d</text>\n", left, W);
    sb_printf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n", left, top, pw, ph);
    for (int t = 0; t <= 4; t++)
        sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%d%%</text><line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#eee\"/>\n",
                  left - 4, top + ph - t * ph / 4 + 4, 25 * t, left, left + pw, top + ph - t * ph / 4, top + ph - t * ph / 4);
    for (int li = 0; li < r->n_L; li++)
        sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%d</text>\n", left + r->Ls[li] * pw / maxL, top + ph + 16, r->Ls[li]);
    sb_printf(b, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">first edited layer L</text>\n", left + pw / 2, top + ph + 34);
    if (nc) {
        int y = top + ph - (int)lround(ca * ph);
        sb_printf(b, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#000\" stroke-dasharray=\"5,4\"/>\n", left, left + pw, y, y);
        sb_printf(b, "<text x=\"%d\" y=\"%d\">clean %.0f%%</text>\n", left + pw + 8, y + 4, 100 * ca);
    }
    for (int ci = 0; ci < r->n_conds; ci++) {
        const char *col = palette[ci % 8];
        sb_printf(b, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", col);
        for (int li = 0; li < r->n_L; li++) {
            int n;
            double a = acc_of(r, r->conds[ci], r->Ls[li], W, &n);
            if (n) sb_printf(b, "%d,%d ", left + r->Ls[li] * pw / maxL, top + ph - (int)lround(a * ph));
        }
        sb_printf(b, "\"/>\n");
        for (int li = 0; li < r->n_L; li++) { /* markers, offset per condition so equal values stay visible */
            int n;
            double a = acc_of(r, r->conds[ci], r->Ls[li], W, &n);
            if (n)
                sb_printf(b, "<circle cx=\"%d\" cy=\"%d\" r=\"%d\" fill=\"%s\"><title>%s L=%d: %.1f%% (n=%d)</title></circle>\n",
                          left + r->Ls[li] * pw / maxL, top + ph - (int)lround(a * ph), 5 - ci % 3, col, r->conds[ci], r->Ls[li],
                          100 * a, n);
        }
        sb_printf(b, "<text x=\"%d\" y=\"%d\" fill=\"%s\">%s</text>\n", left + pw + 8, top + 16 + 16 * ci, col, r->conds[ci]);
    }
    sb_printf(b, "</svg>\n");
}

/* Exact two-sided McNemar p-value for b and c discordant pairs: 2 P(Binomial(b + c, 1/2) <=
 * min(b, c)), capped at 1. */
static double mcnemar_p(int b, int c) {
    int n = b + c, k = b < c ? b : c;
    if (n == 0) return 1.0;
    double lp = -n * log(2.0), sum = 0.0, lc = 0.0; /* log C(n, i) */
    for (int i = 0; i <= k; i++) {
        sum += exp(lc + lp);
        lc += log((double)(n - i)) - log((double)(i + 1));
    }
    return fmin(1.0, 2.0 * sum);
}

static int cond_index(const report *r, const char *name) {
    for (int i = 0; i < r->n_conds; i++)
        if (!strcmp(r->conds[i], name)) return i;
    return -2;
}

/* BLANK vs ZERO cell by cell, paired by example: accuracies, the discordant counts (BLANK
 * right and ZERO wrong, and the reverse) and McNemar's exact p. Into html and paired.csv. */
static void paired_tables(report *r, sbuf *html, sbuf *csv) {
    int bi = cond_index(r, "blank"), zi = cond_index(r, "zero");
    if (bi < 0 || zi < 0) return;
    int *sb = malloc((size_t)r->n_ids * sizeof *sb), *sz = malloc((size_t)r->n_ids * sizeof *sz);
    if (!sb || !sz) {
        free(sb);
        free(sz);
        return;
    }
    sb_printf(csv, "L,W,n_pairs,blank_accuracy,zero_accuracy,blank_only,zero_only,mcnemar_p\n");
    sb_printf(html, "<h2>BLANK vs ZERO, paired by example</h2>\n<p>Per cell: examples with both records; "
                    "<i>blank only</i> = BLANK right and ZERO wrong, <i>zero only</i> the reverse; p = exact two-sided "
                    "McNemar test (bold: p &lt; 0.05).</p>\n<table><tr><th>L</th><th>W</th><th>pairs</th><th>BLANK</th>"
                    "<th>ZERO</th><th>blank only</th><th>zero only</th><th>p</th></tr>\n");
    for (int li = 0; li < r->n_L; li++)
        for (int wi = 0; wi < r->n_W; wi++) {
            int L = r->Ls[li], W = r->Ws[wi], n = 0, kb = 0, kz = 0, b = 0, c = 0;
            for (int e = 0; e < r->n_ids; e++) sb[e] = sz[e] = -1;
            for (int i = 0; i < r->n_c; i++) {
                const cellrec *x = &r->c[i];
                if (x->L != L || x->W != W) continue;
                if (x->cond == bi) sb[x->ex] = x->score;
                if (x->cond == zi) sz[x->ex] = x->score;
            }
            for (int e = 0; e < r->n_ids; e++) {
                if (sb[e] < 0 || sz[e] < 0) continue;
                n++, kb += sb[e], kz += sz[e];
                b += sb[e] && !sz[e];
                c += !sb[e] && sz[e];
            }
            if (!n) continue;
            double p = mcnemar_p(b, c);
            sb_printf(csv, "%d,%d,%d,%.4f,%.4f,%d,%d,%.6g\n", L, W, n, (double)kb / n, (double)kz / n, b, c, p);
            sb_printf(html, "<tr><td>%d</td><td>%d</td><td>%d</td><td>%.1f%%</td><td>%.1f%%</td><td>%d</td><td>%d</td>"
                            "<td>%s%.2g%s</td></tr>\n",
                      L, W, n, 100.0 * kb / n, 100.0 * kz / n, b, c, p < 0.05 ? "<b>" : "", p, p < 0.05 ? "</b>" : "");
        }
    sb_printf(html, "</table>\n");
    free(sb);
    free(sz);
}

/* How answers fail, per condition (all its cells): error classes, loops, token-limit stops. */
static void failure_tables(report *r, sbuf *html, sbuf *csv) {
    int nrow = r->n_conds + 1, cnt[MAX_CONDS + 1][N_ERR + 2];
    memset(cnt, 0, sizeof cnt);
    for (int i = 0; i < r->n_c; i++) {
        int row = r->c[i].cond + 1; /* clean = 0 */
        if (row < 0 || row >= nrow || row > MAX_CONDS) continue;
        cnt[row][r->c[i].err]++;
        cnt[row][N_ERR] += r->c[i].looped;
        cnt[row][N_ERR + 1] += r->c[i].max_tokens;
    }
    int used[N_ERR] = {0};
    for (int row = 0; row < nrow && row <= MAX_CONDS; row++)
        for (int e = 0; e < N_ERR; e++) used[e] |= cnt[row][e] > 0;
    sb_printf(csv, "condition,cells");
    for (int e = 0; e < N_ERR; e++) sb_printf(csv, ",%s", ERR_NAMES[e]);
    sb_printf(csv, ",looped,max_tokens\n");
    sb_printf(html, "<h2>How answers fail</h2>\n<p>Per condition, over all its cells: the error class of each record "
                    "(code: no_code, syntax, wrong_name = the tested function is never defined, assertion, runtime, timeout, "
                    "killed; other tasks: wrong, no_answer), generations that loop (their last 64 tokens repeat with a period "
                    "of at most 32) and those cut by the token limit.</p>\n<table><tr><th>condition</th><th>cells</th>");
    for (int e = 0; e < N_ERR; e++)
        if (used[e]) sb_printf(html, "<th>%s</th>", ERR_NAMES[e]);
    sb_printf(html, "<th>looped</th><th>token limit</th></tr>\n");
    for (int row = 0; row < nrow && row <= MAX_CONDS; row++) {
        int tot = 0;
        for (int e = 0; e < N_ERR; e++) tot += cnt[row][e];
        if (!tot) continue;
        const char *name = row ? r->conds[row - 1] : "clean";
        sb_csv(csv, name);
        sb_printf(csv, ",%d", tot);
        for (int e = 0; e < N_ERR; e++) sb_printf(csv, ",%d", cnt[row][e]);
        sb_printf(csv, ",%d,%d\n", cnt[row][N_ERR], cnt[row][N_ERR + 1]);
        sb_printf(html, "<tr><td>%s</td><td>%d</td>", name, tot);
        for (int e = 0; e < N_ERR; e++)
            if (used[e]) sb_printf(html, "<td>%d (%.0f%%)</td>", cnt[row][e], 100.0 * cnt[row][e] / tot);
        sb_printf(html, "<td>%d</td><td>%d</td></tr>\n", cnt[row][N_ERR], cnt[row][N_ERR + 1]);
    }
    sb_printf(html, "</table>\n");
}

/* A figure goes both to its own .svg file and inline into the HTML report. */
static int emit_figure(const char *dir, const char *name, const sbuf *svg, sbuf *html, kvp_error *err) {
    int rc = sb_write_file(dir, name, svg->p, err);
    if (!rc) sb_printf(html, "%s", svg->p);
    return rc;
}

/* Conditions in the order the sweep was configured (run.json), for tables and legends. */
static void load_condition_order(report *r, const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/run.json", dir);
    size_t n;
    char *buf = kvp_read_file(path, &n);
    if (!buf) return; /* no run.json: order of first appearance */
    cJSON *j = cJSON_Parse(buf), *c;
    free(buf);
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(j, "conditions"))
        if (cJSON_IsString(c) && strcmp(c->valuestring, "clean") && r->n_conds < MAX_CONDS)
            snprintf(r->conds[r->n_conds++], COND_NAME, "%s", c->valuestring);
    cJSON_Delete(j);
}

int kvp_sweep_report(const char *dir, kvp_error *err) {
    report r;
    memset(&r, 0, sizeof r);
    if (strmap_init(&r.ids, 1024)) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    load_condition_order(&r, dir);
    char path[4096];
    snprintf(path, sizeof path, "%s/results.jsonl", dir);
    int rc = load(&r, path, err);
    sbuf csv = {0}, html = {0}, svg = {0}, pcsv = {0}, fcsv = {0};
    if (rc) goto out;
    /* summary.csv */
    sb_printf(&csv, "dataset,condition,L,W,n,accuracy,ci95_low,ci95_high,mean_kl,mean_agreement,prompt_kv_own\n");
    for (int i = 0; i < r.n_a; i++) {
        agg *a = &r.a[i];
        double lo, hi;
        int k = (int)lround(a->score);
        kvp_wilson(k, a->n, &lo, &hi);
        sb_csv(&csv, r.dataset);
        sb_printf(&csv, ",");
        sb_csv(&csv, a->cond);
        sb_printf(&csv, ",%d,%d,%d,%.4f,%.4f,%.4f,", a->L, a->W, a->n, a->score / a->n, lo, hi);
        if (a->kl_n) sb_printf(&csv, "%.5f,", a->kl / a->kl_n);
        else sb_printf(&csv, ",");
        sb_printf(&csv, "%.4f,", a->agree / a->n);
        if (a->own_n) sb_printf(&csv, "%.4f\n", a->own / a->own_n); /* empty for records from before the field */
        else sb_printf(&csv, "\n");
    }
    if ((rc = sb_write_file(dir, "summary.csv", csv.p, err))) goto out;
    /* figures */
    int nc;
    double ca = clean_acc(&r, &nc), clo, chi;
    kvp_wilson((int)lround(ca * nc), nc, &clo, &chi);
    sb_printf(&html, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>kvprobe sweep: %s</title>\n"
                     "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
                     "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}"
                     "pre{white-space:pre-wrap;background:#f6f6f6;padding:6px;font-size:12px;max-height:18em;overflow:auto}"
                     ".cols{display:flex;gap:10px}.cols>div{flex:1;min-width:0}</style></head><body>\n",
              r.dataset);
    sb_printf(&html, "<h1>KV splice sweep: %s</h1>\n<p>Model sha256 <code>%s</code>. Clean accuracy <b>%.1f%%</b> "
                     "(n=%d, 95%% CI %.1f–%.1f%%). Numeric path: <b>%s</b> activations.</p>\n",
              r.dataset, r.model_sha, 100 * ca, nc, 100 * clo, 100 * chi, r.activations[0] ? r.activations : "q8");
    if (r.n_complete < r.n_ids)
        sb_printf(&html, "<p><b>Partial run:</b> %d of the %d examples with records have all %d of their cells; "
                         "every table and figure counts those %d (the rest are still decoding or were cut short).</p>\n",
                  r.n_complete, r.n_ids, r.full, r.n_complete);
    char name[64];
    /* ZERO and BLANK side by side first (the study's Figure 6), then the other conditions */
    int zb[2] = {cond_index(&r, "zero"), cond_index(&r, "blank")}, side = zb[0] >= 0 && zb[1] >= 0;
    sb_printf(&html, "<h2>Accuracy heatmaps</h2>\n%s", side ? "<div class=\"cols\">" : "");
    for (int k = 0; k < 2 && side && !rc; k++) {
        svg.n = 0;
        heatmap_svg(&r, r.conds[zb[k]], &svg);
        snprintf(name, sizeof name, "heatmap_%s.svg", r.conds[zb[k]]);
        sb_printf(&html, "<div>");
        rc = emit_figure(dir, name, &svg, &html, err);
        sb_printf(&html, "</div>");
    }
    if (side) sb_printf(&html, "</div>\n");
    for (int ci = 0; ci < r.n_conds && !rc; ci++) {
        if (side && (ci == zb[0] || ci == zb[1])) continue;
        if (strchr(r.conds[ci], ':')) continue; /* a --kv-policy: one cell (L = 0, W = 0), in the table */
        svg.n = 0;
        heatmap_svg(&r, r.conds[ci], &svg);
        snprintf(name, sizeof name, "heatmap_%s.svg", r.conds[ci]);
        rc = emit_figure(dir, name, &svg, &html, err);
    }
    sb_printf(&html, "<h2>Accuracy vs layer cutoff</h2>\n");
    for (int wi = 0; wi < r.n_W && !rc; wi++) {
        svg.n = 0;
        curves_svg(&r, r.Ws[wi], &svg);
        snprintf(name, sizeof name, "accuracy_vs_L_W%d.svg", r.Ws[wi]);
        rc = emit_figure(dir, name, &svg, &html, err);
    }
    svg.n = 0;
    sbuf race = {0};
    if (!rc && sweep_race(r.a, r.n_a, r.dataset, &svg, &race) > 0) {
        sb_printf(&html, "<h2>KV policies: accuracy vs compression</h2>\n<p>Compression = the share of the prompt's K/V "
                         "entries a sequence does not hold of its own (<code>prompt_kv_own</code>): evicted, or read from the "
                         "shared scaffold cache (the scaffold policy is the blank cell: scaffold:L,W holds L / n_layer of its "
                         "prompt K/V; solid lines compress from the first step, dashed once W tokens are generated).</p>\n");
        rc = emit_figure(dir, "kv_policies.svg", &svg, &html, err);
        sb_printf(&html, "%s", race.p);
    }
    free(race.p);
    if (rc) goto out;
    sb_printf(&html, "<h2>Per-cell metrics</h2>\n<p>KL = mean KL(clean ‖ edited) of the next-token distributions over the "
                     "first steps after the edit; agreement = share of generated tokens from step W on equal to the clean "
                     "continuation.</p>\n<table><tr><th>condition</th><th>L</th><th>W</th><th>n</th><th>accuracy</th>"
                     "<th>95%% CI</th><th>KL</th><th>agreement</th></tr>\n");
    for (int i = 0; i < r.n_a; i++) {
        agg *a = &r.a[i];
        double lo, hi;
        kvp_wilson((int)lround(a->score), a->n, &lo, &hi);
        sb_printf(&html, "<tr><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%.1f%%</td><td>%.1f–%.1f%%</td>", a->cond, a->L, a->W,
                  a->n, 100 * a->score / a->n, 100 * lo, 100 * hi);
        if (a->kl_n) sb_printf(&html, "<td>%.4f</td>", a->kl / a->kl_n);
        else sb_printf(&html, "<td>–</td>");
        sb_printf(&html, "<td>%.3f</td></tr>\n", a->agree / a->n);
    }
    sb_printf(&html, "</table>\n");
    paired_tables(&r, &html, &pcsv);
    failure_tables(&r, &html, &fcsv);
    if ((pcsv.p && (rc = sb_write_file(dir, "paired.csv", pcsv.p, err))) || (rc = sb_write_file(dir, "failures.csv", fcsv.p, err)))
        goto out;
    sb_printf(&html, "<h2>Example completions</h2>\n");
    /* For the first examples: clean next to blank and zero at the deepest-edit cell shown. */
    int shown = 0, Lpick = r.n_L ? r.Ls[r.n_L / 2] : 0, Wpick = r.n_W ? r.Ws[0] : 0;
    for (int i = 0; i < r.n_s && shown < 3; i++) {
        if (strcmp(r.s[i].cond, "clean")) continue;
        shown++;
        sb_printf(&html, "<h3>");
        sb_html(&html, r.s[i].id);
        sb_printf(&html, " — edits at L=%d, W=%d</h3>\n<div class=\"cols\">", Lpick, Wpick);
        const char *const *want = COMPLETION_CONDS;
        for (int k = 0; k < 3; k++)
            for (int q = 0; q < r.n_s; q++) {
                sample *s = &r.s[q];
                if (strcmp(s->id, r.s[i].id) || strcmp(s->cond, want[k]) || (k && (s->L != Lpick || s->W != Wpick))) continue;
                sb_printf(&html, "<div><b>%s</b> (score %.0f)<pre>", want[k], s->score);
                sb_html(&html, s->text);
                sb_printf(&html, "</pre></div>");
                break;
            }
        sb_printf(&html, "</div>\n");
    }
    sb_printf(&html, "<p>Generated by kvprobe %s from <code>results.jsonl</code>.</p></body></html>\n", KVPROBE_VERSION);
    rc = sb_write_file(dir, "report.html", html.p, err);
out:
    free(csv.p);
    free(html.p);
    free(svg.p);
    free(pcsv.p);
    free(fcsv.p);
    for (int i = 0; i < r.n_ids; i++) free(r.id_keys[i]);
    free(r.id_keys);
    free(r.cells_of);
    free(r.c);
    strmap_free(&r.ids);
    for (int i = 0; i < r.n_s; i++) free(r.s[i].id), free(r.s[i].cond), free(r.s[i].text);
    free(r.s);
    free(r.a);
    return rc;
}
