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
    static const char *const cues[] = {"answer is", "answer:", "####", "\\boxed{"};
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

/* Skip whitespace, quotes, '*', '(' and similar wrappers at the start of an answer. */
static const char *answer_start(const char *p) {
    while (*p && (isspace((unsigned char)*p) || *p == '*' || *p == '"' || *p == '\'' || *p == '(' || *p == '[')) p++;
    return p;
}

/* A letter set off as an option label ("B.", "(C)", "D:", "A" alone on its line) rather
 * than the article "A" opening a sentence. */
static int option_letter(const char *text, const char *p, int n_choices) {
    if (!standalone_letter(text, p, n_choices)) return 0;
    char c = p[1];
    return c == 0 || c == '.' || c == ')' || c == ':' || c == ',' || c == '\n' || c == ']' || c == '*' ||
           (c == ' ' && (p[2] == 0 || p[2] == '\n'));
}

/* A letter: right after an explicit cue ("answer is", "Answer:"), else an option label at the
 * start of the output, else the only option label anywhere. An output that names several
 * letters without a cue (e.g. one echoing the options) has no answer. */
int kvp_extract_choice(const char *text, int n_choices, char *letter) {
    static const char *const cues[] = {"answer is", "answer:"};
    for (size_t i = 0; i < sizeof cues / sizeof cues[0]; i++) {
        const char *c = find_ci(text, cues[i], 0);
        if (!c) continue;
        const char *p = answer_start(c + strlen(cues[i]));
        if (standalone_letter(text, p, n_choices)) {
            *letter = *p;
            return 1;
        }
    }
    const char *p = answer_start(text);
    if (option_letter(text, p, n_choices)) {
        *letter = *p;
        return 1;
    }
    char found = 0;
    for (p = text; *p; p++)
        if (option_letter(text, p, n_choices)) {
            if (found && found != *p) return 0; /* several candidates: ambiguous */
            found = *p;
        }
    if (!found) return 0;
    *letter = found;
    return 1;
}

/* Label i of a '|'-separated list into out; returns its length or 0 past the end. */
static size_t label_at(const char *labels, int i, char *out, size_t cap) {
    for (const char *l = labels; *l; i--) {
        const char *bar = strchr(l, '|');
        size_t n = bar ? (size_t)(bar - l) : strlen(l);
        if (i == 0) {
            snprintf(out, cap, "%.*s", (int)n, l);
            return n;
        }
        if (!bar) break;
        l = bar + 1;
    }
    return 0;
}

static int word_at(const char *text, const char *p, const char *w, size_t n) {
    return !strncasecmp(p, w, n) && (p == text || !isalpha((unsigned char)p[-1])) && !isalpha((unsigned char)p[n]);
}

/* A label word at the start of the output, else the only label named anywhere. An output
 * naming several labels (e.g. echoing "positive or negative") has no answer. */
int kvp_extract_label(const char *text, const char *labels, char *out, size_t cap) {
    const char *start = answer_start(text);
    char lab[64];
    size_t n;
    for (int i = 0; (n = label_at(labels, i, lab, sizeof lab)); i++)
        if (word_at(text, start, lab, n)) {
            snprintf(out, cap, "%s", lab);
            return 1;
        }
    int found = -1;
    for (int i = 0; (n = label_at(labels, i, lab, sizeof lab)); i++)
        for (const char *p = text; *p; p++)
            if (word_at(text, p, lab, n)) {
                if (found >= 0 && found != i) return 0; /* several labels: ambiguous */
                found = i;
                break;
            }
    if (found < 0) return 0;
    label_at(labels, found, out, cap);
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
    if (skip == 3 && !strncmp(start, "python\n", 7)) start += 7; /* the language alone on the next line */
    const char *end = strstr(start, "```");
    size_t n = end ? (size_t)(end - start) : strlen(start);
    for (const char *m = start; (m = strstr(m, "if __name__")) && m < start + n; m++)
        if (m == start || m[-1] == '\n') { /* a script's demo: not part of the solution */
            n = (size_t)(m - start);
            break;
        }
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

/* A fixed-size copy can cut a UTF-8 sequence in two: drop an incomplete last sequence, so the
 * records stay valid JSON text. */
static void trim_partial_utf8(char *s) {
    size_t n = strlen(s), i = n;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--;
    if (i == 0) return;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (n - (i - 1) < need) s[i - 1] = 0;
}

/* The program run in the sandbox puts the answer through this first (_KVP_SRC: the answer's
 * code as hex, so no quoting can break out): only its definitions are executed, then the tests. */
static const char SOLUTION_HARNESS[] =
    "import ast as _kvp_ast\n"
    "\n"
    "\n"
    "def _kvp_solution(src):\n"
    "    # The answer's definitions, as EvalPlus's sanitizer keeps them: imports, functions,\n"
    "    # classes and top-level assignments; the answer's own demo calls, prints and asserts go.\n"
    "    # A stray top-level statement that does not parse (an assert cut by the token limit) is\n"
    "    # cut off with everything after it; a syntax error inside a definition stays one.\n"
    "    lines = src.split(\"\\n\")\n"
    "    while True:\n"
    "        try:\n"
    "            tree = _kvp_ast.parse(\"\\n\".join(lines))\n"
    "            break\n"
    "        except SyntaxError as e:\n"
    "            k = min(max((e.lineno or 1) - 1, 0), len(lines) - 1)\n"
    "            while k > 0 and (not lines[k].strip() or lines[k][0] in \" \\t#)]}\"):\n"
    "                k -= 1\n"
    "            head = lines[k].lstrip()\n"
    "            if k == 0 or lines[k][:1] in (\" \", \"\\t\") or head.startswith((\"def \", \"class \", \"@\", \"async \", \"import \", \"from \")):\n"
    "                raise\n"
    "            lines = lines[:k]\n"
    "    keep = (_kvp_ast.Import, _kvp_ast.ImportFrom, _kvp_ast.FunctionDef, _kvp_ast.AsyncFunctionDef, _kvp_ast.ClassDef,\n"
    "            _kvp_ast.Assign, _kvp_ast.AnnAssign)\n"
    "    body = [n for n in tree.body if isinstance(n, keep)]\n"
    "    return compile(_kvp_ast.Module(body=body, type_ignores=[]), \"<solution>\", \"exec\")\n"
    "\n"
    "\n"
    "exec(_kvp_solution(bytes.fromhex(_KVP_SRC).decode(\"utf-8\", \"replace\")))\n";

/* The exception a Python traceback ends with: its last non-empty line, and the class name
 * that line starts with ("NameError: name 'f' is not defined" -> "NameError"). */
static void last_exception(const char *out, char *line, size_t cap, char *cls, size_t ccap) {
    size_t n = strlen(out);
    while (n && isspace((unsigned char)out[n - 1])) n--;
    size_t b = n;
    while (b && out[b - 1] != '\n') b--;
    snprintf(line, cap, "%.*s", (int)(n - b), out + b);
    size_t k = 0;
    while (k + 1 < ccap && (isalnum((unsigned char)line[k]) || line[k] == '_' || line[k] == '.')) cls[k] = line[k], k++;
    cls[k] = 0;
}

static int defines(const char *code, const char *fn) {
    size_t n = strlen(fn);
    for (const char *p = code; (p = strstr(p, "def ")); p += 4)
        if (!strncmp(p + 4, fn, n) && p[4 + n] == '(') return 1;
    return 0;
}

/* Why a code answer failed, from what it defines and how the sandboxed run ended. */
static void code_error(const kvp_example *ex, const char *code, const kvp_sandbox_result *r, kvp_score_result *res) {
    char cls[64] = "";
    if (!r->passed) last_exception(r->output, res->exception, sizeof res->exception, cls, sizeof cls);
    const char *e = "runtime";
    if (r->passed) e = "pass";
    else if (r->timed_out) e = "timeout";
    else if (r->exit_code < 0) e = "killed";
    else if (!strcmp(cls, "SyntaxError") || !strcmp(cls, "IndentationError") || !strcmp(cls, "TabError")) e = "syntax";
    else if (ex->entry_point && !defines(code, ex->entry_point)) e = "wrong_name";
    else if (!strcmp(cls, "AssertionError")) e = "assertion";
    snprintf(res->error, sizeof res->error, "%s", e);
}

static int blank_text(const char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    return !*s;
}

static int score_kind(const kvp_example *ex, const char *output, const kvp_sandbox_opts *sb, kvp_score_result *res,
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
        if (blank_text(code)) {
            snprintf(res->error, sizeof res->error, "no_code");
            free(code);
            return 0;
        }
        int needs_header = ex->code_header && ex->entry_point && !defines(code, ex->entry_point);
        const char *hdr = needs_header ? ex->code_header : "";
        size_t nh = strlen(hdr), nc = strlen(code);
        size_t n = 2 * (nh + nc) + strlen(SOLUTION_HARNESS) + strlen(ex->test_code) + 32;
        char *prog = malloc(n);
        if (!prog) {
            free(code);
            return kvp_fail(err, KVP_E_NOMEM, "out of memory");
        }
        size_t k = (size_t)snprintf(prog, n, "_KVP_SRC = \"");
        for (size_t i = 0; i < nh + nc; i++)
            k += (size_t)snprintf(prog + k, n - k, "%02x", (unsigned char)(i < nh ? hdr[i] : code[i - nh]));
        snprintf(prog + k, n - k, "\"\n%s\n%s", SOLUTION_HARNESS, ex->test_code);
        snprintf(res->extracted, sizeof res->extracted, "%.*s", (int)strcspn(code, "\n"), code);
        kvp_sandbox_result r;
        int rc = kvp_sandbox_python(prog, sb, &r, err);
        free(prog);
        if (!rc) {
            res->score = r.passed;
            code_error(ex, code, &r, res);
        }
        free(code);
        return rc;
    }
    }
    return kvp_fail(err, KVP_E_INVALID, "unknown task kind %d", ex->kind);
}

int kvp_score(const kvp_example *ex, const char *output, const kvp_sandbox_opts *sb, kvp_score_result *res,
              kvp_error *err) {
    char *full = NULL;
    if (ex->response_prefix) { /* the model continued the prefix: read both */
        size_t a = strlen(ex->response_prefix), b = strlen(output);
        if (!(full = malloc(a + b + 1))) return kvp_fail(err, KVP_E_NOMEM, "out of memory");
        memcpy(full, ex->response_prefix, a);
        memcpy(full + a, output, b + 1);
        output = full;
    }
    int rc = score_kind(ex, output, sb, res, err);
    free(full);
    trim_partial_utf8(res->extracted);
    trim_partial_utf8(res->exception);
    if (!rc && !res->error[0]) snprintf(res->error, sizeof res->error, "%s", res->score ? "pass" : res->extracted[0] ? "wrong" : "no_answer");
    return rc;
}
