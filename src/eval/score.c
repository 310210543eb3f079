/* Answer extraction and scoring (include/kvprobe/eval.h). The rules, in order of
 * preference, are documented in the README next to each dataset's prompt. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvprobe/eval.h"

/* Case-insensitive search for needle; returns the last (last = 1) or first match. */
static const char *find_ci(const char *hay, const char *needle, int last) {
    size_t n = strlen(needle);
    const char *hit = NULL;
    for (const char *p = hay; *p; p++)
        if (!strncasecmp(p, needle, n)) {
            hit = p;
            if (!last) break;
        }
    return hit;
}

/* Parse a number at p: optional sign, digits with thousands commas, optional decimals.
 * Returns its length or 0. */
static size_t number_at(const char *p, double *v, char *repr, size_t cap) {
    const char *s = p;
    char buf[64];
    size_t k = 0;
    if (*s == '-' || *s == '+') buf[k++] = *s++;
    if (!isdigit((unsigned char)*s)) return 0;
    while ((isdigit((unsigned char)*s) || (*s == ',' && isdigit((unsigned char)s[1]))) && k + 1 < sizeof buf) {
        if (*s != ',') buf[k++] = *s;
        s++;
    }
    if (*s == '.' && isdigit((unsigned char)s[1])) {
        buf[k++] = *s++;
        while (isdigit((unsigned char)*s) && k + 1 < sizeof buf) buf[k++] = *s++;
    }
    buf[k] = 0;
    *v = strtod(buf, NULL);
    if (repr) snprintf(repr, cap, "%s", buf);
    return (size_t)(s - p);
}

/* First number at or after p. */
static int first_number(const char *p, double *v, char *repr, size_t cap) {
    for (; *p; p++) {
        int prev_ok = !isalnum((unsigned char)p[-1]); /* p is past a cue: p[-1] exists */
        if ((isdigit((unsigned char)*p) || ((*p == '-') && isdigit((unsigned char)p[1]))) && prev_ok &&
            number_at(p, v, repr, cap))
            return 1;
    }
    return 0;
}

int kvp_extract_number(const char *text, double *out, char *repr, size_t cap) {
    static const char *const cues[] = {"answer:", "answer is", "####"};
    for (size_t i = 0; i < sizeof cues / sizeof cues[0]; i++) {
        const char *c = find_ci(text, cues[i], 1);
        if (c && first_number(c + strlen(cues[i]), out, repr, cap)) return 1;
    }
    /* No cue: the last number in the text. */
    int found = 0;
    for (const char *p = text; *p; p++) {
        double v;
        char r[64];
        size_t n = (p == text || !isalnum((unsigned char)p[-1])) ? number_at(p, &v, r, sizeof r) : 0;
        if (n && (isdigit((unsigned char)*p) || *p == '-')) {
            *out = v;
            if (repr) snprintf(repr, cap, "%s", r);
            found = 1;
            p += n - 1;
        }
    }
    return found;
}

/* Is c at p a standalone option letter? (not part of a word) */
static int standalone_letter(const char *text, const char *p, int n_choices) {
    if (*p < 'A' || *p >= 'A' + n_choices) return 0;
    int before = p == text || !isalnum((unsigned char)p[-1]);
    int after = !isalnum((unsigned char)p[1]);
    return before && after;
}

int kvp_extract_choice(const char *text, int n_choices, char *letter) {
    static const char *const cues[] = {"answer is", "answer:", "option"};
    for (size_t i = 0; i < sizeof cues / sizeof cues[0]; i++) {
        const char *c = find_ci(text, cues[i], 0);
        if (!c) continue;
        for (const char *p = c + strlen(cues[i]); *p && p < c + strlen(cues[i]) + 6; p++)
            if (standalone_letter(text, p, n_choices)) {
                *letter = *p;
                return 1;
            }
    }
    for (const char *p = text; *p; p++)
        if (standalone_letter(text, p, n_choices)) {
            *letter = *p;
            return 1;
        }
    return 0;
}

int kvp_extract_label(const char *text, const char *labels, char *out, size_t cap) {
    const char *best = NULL;
    char bestlab[64] = "";
    for (const char *l = labels; *l;) {
        const char *bar = strchr(l, '|');
        size_t n = bar ? (size_t)(bar - l) : strlen(l);
        char lab[64];
        snprintf(lab, sizeof lab, "%.*s", (int)n, l);
        for (const char *p = text; *p; p++) /* earliest whole-word occurrence of any label */
            if (!strncasecmp(p, lab, n) && (p == text || !isalpha((unsigned char)p[-1])) && !isalpha((unsigned char)p[n])) {
                if (!best || p < best) {
                    best = p;
                    snprintf(bestlab, sizeof bestlab, "%s", lab);
                }
                break;
            }
        l += n + (bar ? 1 : 0);
    }
    if (!best) return 0;
    snprintf(out, cap, "%s", bestlab);
    return 1;
}

char *kvp_extract_code(const char *text) {
    const char *start = strstr(text, "```python");
    size_t skip = 9;
    if (!start) {
        start = strstr(text, "```");
        skip = 3;
    }
    if (!start) return strdup(text);
    start += skip;
    while (*start && *start != '\n') start++; /* rest of the fence line */
    if (*start) start++;
    const char *end = strstr(start, "```");
    size_t n = end ? (size_t)(end - start) : strlen(start);
    char *code = malloc(n + 1);
    if (code) {
        memcpy(code, start, n);
        code[n] = 0;
    }
    return code;
}

/* BBH / user exact match: lower-case, trim, drop surrounding parentheses and a final period. */
static void normalize_exact(const char *in, char *out, size_t cap) {
    while (isspace((unsigned char)*in)) in++;
    size_t n = strlen(in);
    while (n && (isspace((unsigned char)in[n - 1]) || in[n - 1] == '.')) n--;
    if (n >= 2 && in[0] == '(' && in[n - 1] == ')') in++, n -= 2;
    if (n >= cap) n = cap - 1;
    for (size_t i = 0; i < n; i++) out[i] = (char)tolower((unsigned char)in[i]);
    out[n] = 0;
}

static void first_line(const char *text, char *out, size_t cap) {
    while (*text == '\n' || *text == ' ') text++;
    const char *cue = find_ci(text, "answer is", 1);
    if (cue) text = cue + 9;
    while (*text == ' ' || *text == ':') text++;
    size_t n = strcspn(text, "\n");
    snprintf(out, cap, "%.*s", (int)n, text);
}

int kvp_score(const kvp_example *ex, const char *output, const kvp_sandbox_opts *sb, kvp_score_result *res,
              kvp_error *err) {
    memset(res, 0, sizeof *res);
    switch (ex->kind) {
    case KVP_TASK_NUMBER: {
        double got, want = strtod(ex->answer, NULL);
        if (kvp_extract_number(output, &got, res->extracted, sizeof res->extracted))
            res->score = fabs(got - want) <= 1e-6 * fmax(1.0, fabs(want));
        return 0;
    }
    case KVP_TASK_LABEL:
        if (kvp_extract_label(output, ex->labels, res->extracted, sizeof res->extracted))
            res->score = !strcasecmp(res->extracted, ex->answer);
        return 0;
    case KVP_TASK_CHOICE: {
        char letter;
        if (kvp_extract_choice(output, ex->n_choices, &letter)) {
            res->extracted[0] = letter;
            res->score = letter == ex->answer[0];
        }
        return 0;
    }
    case KVP_TASK_EXACT: {
        char line[256], a[256], b[256];
        first_line(output, line, sizeof line);
        normalize_exact(line, a, sizeof a);
        normalize_exact(ex->answer, b, sizeof b);
        snprintf(res->extracted, sizeof res->extracted, "%s", line);
        double x, y;
        char *e1, *e2;
        x = strtod(a, &e1);
        y = strtod(b, &e2);
        /* Equal, or the line starts with the answer as a whole word ("Yes, it is plausible."). */
        size_t nb = strlen(b);
        int prefix = nb && !strncmp(a, b, nb) && !isalnum((unsigned char)a[nb]);
        char pb[260]; /* a parenthesized gold "(b)" may open a longer line: "(B) because ..." */
        snprintf(pb, sizeof pb, "(%s)", b);
        size_t np = strlen(pb);
        int paren = !strncmp(a, pb, np) && !isalnum((unsigned char)a[np]);
        res->score = !strcmp(a, b) || prefix || paren || (*a && *b && !*e1 && !*e2 && x == y);
        return 0;
    }
    case KVP_TASK_CODE: {
        char *code = kvp_extract_code(output);
        if (!code) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
        int needs_header = ex->code_header && ex->entry_point && !strstr(code, ex->entry_point);
        size_t n = strlen(code) + strlen(ex->test_code) + (needs_header ? strlen(ex->code_header) : 0) + 8;
        char *prog = malloc(n);
        if (!prog) {
            free(code);
            return kvp_fail(err, KVP_E_NOMEM, "out of memory");
        }
        snprintf(prog, n, "%s%s\n\n%s", needs_header ? ex->code_header : "", code, ex->test_code);
        snprintf(res->extracted, sizeof res->extracted, "%.*s", (int)strcspn(code, "\n"), code);
        free(code);
        kvp_sandbox_result r;
        int rc = kvp_sandbox_python(prog, sb, &r, err);
        free(prog);
        if (rc) return rc;
        res->score = r.passed;
        return 0;
    }
    }
    return kvp_fail(err, KVP_E_INVALID, "unknown task kind %d", ex->kind);
}
