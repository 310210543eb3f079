/* Dataset loaders: upstream formats in, uniform examples out (include/kvprobe/eval.h).
 * Each loader names the file and line of a malformed row; with skip_bad_rows the row is
 * counted and skipped instead. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/readfile.h"
#include "kvprobe/eval.h"

/* ---- small string helpers ---------------------------------------------------------------- */

static char *xstrdup(const char *s) {
    char *p = strdup(s ? s : "");
    return p;
}

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(NULL, 0, f, ap);
    va_end(ap);
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, f);
    vsnprintf(s, (size_t)n + 1, f, ap);
    va_end(ap);
    return s;
}

/* ---- building the dataset ----------------------------------------------------------------- */

typedef struct builder {
    kvp_dataset *d;
    int cap, limit, skip_bad;
    const char *path;
    kvp_error *err;
} builder;

static int full(const builder *b) { return b->limit > 0 && b->d->n >= b->limit; }

static kvp_example *add(builder *b) {
    kvp_dataset *d = b->d;
    if (d->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 256;
        kvp_example *e = realloc(d->ex, (size_t)cap * sizeof *e);
        if (!e) {
            fprintf(stderr, "kvprobe: out of memory loading %s\n", b->path);
            abort();
        }
        d->ex = e;
        b->cap = cap;
    }
    kvp_example *e = &d->ex[d->n++];
    memset(e, 0, sizeof *e);
    return e;
}

static void free_example(kvp_example *e) {
    free(e->id);
    free(e->prompt);
    free(e->answer);
    free(e->labels);
    free(e->code_header);
    free(e->entry_point);
    free(e->test_code);
    free(e->demo);
    free(e->response_prefix);
    free(e->stop);
    for (int i = 0; i < KVP_CLOZE_PARTS; i++) free(e->cloze[i]);
    for (int i = 0; e->choices && i < e->n_choices; i++) free(e->choices[i]);
    free(e->choices);
}

/* A multiple-choice example's options: the prompt lists them; --readout loglik scores them. */
static void set_choices(kvp_example *e, const char *const *texts, int n) {
    e->kind = KVP_TASK_CHOICE;
    e->n_choices = n;
    e->choices = calloc((size_t)n, sizeof *e->choices);
    for (int i = 0; e->choices && i < n; i++) e->choices[i] = xstrdup(texts[i]);
}

/* A malformed row: error, or counted and skipped. Returns non-zero to stop. */
static int bad_row(builder *b, int line, const char *why) {
    if (b->skip_bad) {
        b->d->n_skipped++;
        return 0;
    }
    return kvp_fail(b->err, KVP_E_FORMAT, "%s:%d: %s (use --skip-bad-rows to skip such rows)", b->path, line, why);
}

static const char *jstr(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Iterate the lines of a buffer (modifies it). */
#define FOR_LINES(buf, line, lineno)                                                   \
    for (char *_p = (buf), *line = NULL, *_nl; _p && *_p &&                            \
                                               ((line = _p), (_nl = strchr(_p, '\n')), \
                                                (_nl ? (*_nl = 0, _p = _nl + 1) : (_p = NULL)), 1); \
         (lineno)++)

static int is_blank(const char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    return !*s;
}

/* ---- prompts ------------------------------------------------------------------------------ */

/* Code tasks are asked the way EvalPlus asks instruct models (evalplus codegen, the default
 * instruct recipe): the problem in a markdown block after this instruction as the user turn,
 * and the assistant turn opened with the response prefix, so the model writes the code and
 * closes the block (the stop sequence). */
#define CODE_INSTRUCTION "Please provide a self-contained Python script that solves the following problem in a markdown code block:"
#define CODE_RESPONSE_PREFIX                                                                                           \
    "Below is a Python script with a self-contained function that solves the problem and passes corresponding tests:\n" \
    "```python\n"
#define CODE_STOP "\n```"

/* Python's str.strip() for ASCII whitespace (the prompts are ASCII-indented code). */
static char *strip_dup(const char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) n--;
    char *p = malloc(n + 1);
    if (p) memcpy(p, s, n), p[n] = 0;
    return p;
}

/* The user turn, the response prefix, the stop sequence and the demonstration answer of a
 * code task whose problem text is `problem` and reference solution `solution` (may be NULL). */
static void set_code_prompt(kvp_example *e, const char *problem, const char *solution) {
    char *p = strip_dup(problem);
    e->prompt = p ? fmt("%s\n```\n%s\n```\n", CODE_INSTRUCTION, p) : NULL;
    free(p);
    e->response_prefix = xstrdup(CODE_RESPONSE_PREFIX);
    e->stop = xstrdup(CODE_STOP);
    if (solution) e->demo = fmt("%s%s\n```", CODE_RESPONSE_PREFIX, solution);
}

static char *choice_prompt(const char *question, const char *const *texts, int n) {
    size_t cap = strlen(question) + 256;
    for (int i = 0; i < n; i++) cap += strlen(texts[i]) + 8;
    char *s = malloc(cap);
    if (!s) return NULL;
    int k = snprintf(s, cap, "Answer the following multiple-choice question with the letter of the correct option only.\n\n"
                             "Question: %s\n", question);
    for (int i = 0; i < n; i++) k += snprintf(s + k, cap - (size_t)k, "%c. %s\n", 'A' + i, texts[i]);
    return s;
}

/* The cloze form: frame, content, frame, ... (NULL ends the list). */
static void set_cloze(kvp_example *e, const char *f0, const char *c1, const char *f2, const char *c3, const char *f4) {
    const char *parts[KVP_CLOZE_PARTS] = {f0, c1, f2, c3, f4};
    for (int i = 0; i < KVP_CLOZE_PARTS && parts[i]; i++) e->cloze[i] = xstrdup(parts[i]);
}

/* ---- loaders ------------------------------------------------------------------------------ */

/* The worked solution without its calculator annotations (<<48/2=24>>), then "The answer is N.". */
static char *gsm8k_demo(const char *answer, const char *hash, const char *gold) {
    size_t n = (size_t)(hash - answer), k = 0;
    char *out = malloc(n + strlen(gold) + 16);
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *close = answer[i] == '<' && answer[i + 1] == '<' ? strstr(answer + i, ">>") : NULL;
        if (close && close < hash) {
            i = (size_t)(close - answer) + 1;
            continue;
        }
        out[k++] = answer[i];
    }
    while (k && isspace((unsigned char)out[k - 1])) k--;
    sprintf(out + k, "\nThe answer is %s.", gold);
    return out;
}

static int load_gsm8k(builder *b, char *buf) {
    int line = 1;
    FOR_LINES(buf, l, line) {
        if (full(b)) break;
        if (is_blank(l)) continue;
        cJSON *j = cJSON_Parse(l);
        const char *q = jstr(j, "question"), *a = jstr(j, "answer"), *hash = a ? strstr(a, "####") : NULL;
        if (!q || !hash) {
            cJSON_Delete(j);
            if (bad_row(b, line, "expected {\"question\", \"answer\" with \"#### N\"}")) return b->err->code;
            continue;
        }
        kvp_example *e = add(b);
        char gold[64];
        size_t k = 0;
        for (const char *p = hash + 4; *p && k + 1 < sizeof gold; p++)
            if (!isspace((unsigned char)*p) && *p != ',') gold[k++] = *p;
        gold[k] = 0;
        e->id = fmt("gsm8k-%d", line);
        e->kind = KVP_TASK_NUMBER;
        e->answer = xstrdup(gold);
        e->prompt = fmt("Solve the following math problem step by step. End with the final answer as a number, in "
                        "the form \"The answer is N.\"\n\n%s", q);
        e->demo = gsm8k_demo(a, hash, gold);
        e->source_line = line;
        cJSON_Delete(j);
    }
    return 0;
}

static int load_sst2(builder *b, char *buf) {
    int line = 1;
    FOR_LINES(buf, l, line) {
        if (line == 1 || is_blank(l)) continue; /* header: text<TAB>label */
        if (full(b)) break;
        char *tab = strrchr(l, '\t');
        char *end = NULL;
        long lab = tab ? strtol(tab + 1, &end, 10) : -1;
        if (!tab || (lab != 0 && lab != 1) || (end && *end && !isspace((unsigned char)*end))) {
            if (bad_row(b, line, "expected 'text<TAB>0|1'")) return b->err->code;
            continue;
        }
        *tab = 0;
        kvp_example *e = add(b);
        e->id = fmt("sst2-%d", line);
        e->kind = KVP_TASK_LABEL;
        e->labels = xstrdup("positive|negative");
        e->answer = xstrdup(lab ? "positive" : "negative");
        e->prompt = fmt("Is the sentiment of this movie review sentence positive or negative? Answer with one word: "
                        "positive or negative.\n\nSentence: %s", l);
        set_cloze(e, "", l, "\nQuestion: Is this sentence positive or negative?\nAnswer:", NULL, NULL);
        e->source_line = line;
    }
    return 0;
}

/* RFC 4180 CSV: fields separated by commas, quoted fields may hold commas, quotes ("") and
 * newlines. Parses one record at *p; returns field count (<= max) and advances *p and *line. */
static int csv_record(char **p, char **fields, int max, int *line) {
    int n = 0;
    char *s = *p;
    for (;;) {
        char *out = s, *start = s;
        if (*s == '"') {
            s++;
            for (;;) {
                if (!*s) return -1; /* unterminated quote */
                if (*s == '"' && s[1] == '"') *out++ = '"', s += 2;
                else if (*s == '"') {
                    s++;
                    break;
                } else {
                    if (*s == '\n') (*line)++;
                    *out++ = *s++;
                }
            }
        } else {
            while (*s && *s != ',' && *s != '\n' && *s != '\r') *out++ = *s++;
        }
        char sep = *s;
        *out = 0;
        if (n < max) fields[n] = start;
        n++;
        if (sep == ',') {
            s++;
            continue;
        }
        /* The terminator was read into sep before *out = 0 may have overwritten it. */
        if (sep == '\r') s++, sep = *s;
        if (sep == '\n') s++, (*line)++;
        else if (sep) return -1; /* junk after a closing quote */
        break;
    }
    *p = s;
    return n;
}

static int load_boolq_file(builder *b, const char *path) {
    size_t len;
    char *buf = kvp_read_file(path, &len);
    if (!buf) return kvp_fail(b->err, KVP_E_IO, "%s: cannot read", path);
    b->path = path;
    char *p = buf, *f[8];
    int line = 1, rc = 0;
    if (csv_record(&p, f, 8, &line) < 5) rc = kvp_fail(b->err, KVP_E_FORMAT, "%s:1: expected the BoolQ header", path);
    while (!rc && *p && !full(b)) {
        int at = line, n = csv_record(&p, f, 8, &line);
        if (n < 0) { /* cannot resynchronize inside a broken quote: always an error */
            rc = kvp_fail(b->err, KVP_E_FORMAT, "%s:%d: unterminated quoted field", path, at);
            break;
        }
        if (n == 1 && !*f[0]) continue;
        int yes = n >= 5 && !strcmp(f[3], "True"), no = n >= 5 && !strcmp(f[3], "False");
        if (n < 5 || (!yes && !no) || !*f[1] || !*f[4]) {
            rc = bad_row(b, at, "expected ',question,title,answer,passage,split' with answer True/False");
            continue;
        }
        kvp_example *e = add(b);
        e->id = fmt("boolq-%s", f[0]);
        e->kind = KVP_TASK_LABEL;
        e->labels = xstrdup("yes|no");
        e->answer = xstrdup(yes ? "yes" : "no");
        e->prompt = fmt("%s\n\nQuestion: %s?\nAnswer with one word: yes or no.", f[4], f[1]);
        char *q = fmt("%s?", f[1]);
        set_cloze(e, "", f[4], "\nQuestion: ", q, "\nAnswer:");
        free(q);
        e->source_line = at;
    }
    free(buf);
    return rc;
}

static int load_arc(builder *b, char *buf, const char *name) {
    int line = 1;
    FOR_LINES(buf, l, line) {
        if (full(b)) break;
        if (is_blank(l)) continue;
        cJSON *j = cJSON_Parse(l);
        const cJSON *q = cJSON_GetObjectItemCaseSensitive(j, "question"), *ch = cJSON_GetObjectItemCaseSensitive(q, "choices");
        const char *stem = jstr(q, "stem"), *key = jstr(j, "answerKey"), *id = jstr(j, "id");
        int n = cJSON_GetArraySize(ch), gold = -1;
        const char *texts[8];
        if (stem && key && n >= 2 && n <= 8) {
            for (int i = 0; i < n; i++) {
                const cJSON *c = cJSON_GetArrayItem(ch, i);
                texts[i] = jstr(c, "text");
                const char *lab = jstr(c, "label");
                if (!texts[i] || !lab) gold = -2;
                else if (gold != -2 && !strcmp(lab, key)) gold = i;
            }
        }
        if (gold < 0) {
            cJSON_Delete(j);
            if (bad_row(b, line, "expected {question: {stem, choices: [{text, label}]}, answerKey}")) return b->err->code;
            continue;
        }
        kvp_example *e = add(b);
        e->id = fmt("%s-%s", name, id ? id : "?");
        set_choices(e, texts, n);
        e->answer = fmt("%c", 'A' + gold);
        e->prompt = choice_prompt(stem, texts, n);
        set_cloze(e, "Question: ", stem, "\nAnswer:", NULL, NULL);
        e->source_line = line;
        cJSON_Delete(j);
    }
    return 0;
}

/* The function the first test calls: the first name the reference code defines ("def NAME(")
 * that the test names as a call ("NAME("). NULL if there is none. */
static int is_ident(char c) { return isalnum((unsigned char)c) || c == '_'; }

static int calls(const char *test, const char *name) {
    size_t n = strlen(name);
    for (const char *t = test; (t = strstr(t, name)); t++)
        if (t[n] == '(' && (t == test || !is_ident(t[-1]))) return 1;
    return 0;
}

static char *tested_function(const char *code, const char *test) {
    for (const char *p = code; (p = strstr(p, "def ")); p += 4) {
        if (p != code && p[-1] != '\n' && p[-1] != ' ') continue;
        const char *s = p + 4, *q = s;
        while (is_ident(*q)) q++;
        char *name = q > s && *q == '(' ? fmt("%.*s", (int)(q - s), s) : NULL;
        if (name && calls(test, name)) return name;
        free(name);
    }
    return NULL;
}

static int load_mbpp(builder *b, char *buf) {
    cJSON *arr = cJSON_Parse(buf);
    if (!cJSON_IsArray(arr)) {
        cJSON_Delete(arr);
        return kvp_fail(b->err, KVP_E_FORMAT, "%s: expected a JSON array of MBPP tasks", b->path);
    }
    int idx = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, arr) {
        idx++;
        if (full(b)) break;
        const char *prompt = jstr(t, "prompt");
        const cJSON *tests = cJSON_GetObjectItemCaseSensitive(t, "test_list"), *imps = cJSON_GetObjectItemCaseSensitive(t, "test_imports");
        const cJSON *tid = cJSON_GetObjectItemCaseSensitive(t, "task_id");
        if (!prompt || cJSON_GetArraySize(tests) < 1 || !cJSON_IsString(cJSON_GetArrayItem(tests, 0))) {
            if (bad_row(b, idx, "expected {task_id, prompt, test_list: [...]} (entry number)")) {
                cJSON_Delete(arr);
                return b->err->code;
            }
            continue;
        }
        size_t cap = 64;
        const cJSON *x;
        cJSON_ArrayForEach(x, tests) cap += cJSON_IsString(x) ? strlen(x->valuestring) + 1 : 0;
        cJSON_ArrayForEach(x, imps) cap += cJSON_IsString(x) ? strlen(x->valuestring) + 1 : 0;
        char *test = malloc(cap);
        size_t k = 0;
        test[0] = 0;
        cJSON_ArrayForEach(x, imps) if (cJSON_IsString(x)) k += (size_t)snprintf(test + k, cap - k, "%s\n", x->valuestring);
        cJSON_ArrayForEach(x, tests) if (cJSON_IsString(x)) k += (size_t)snprintf(test + k, cap - k, "%s\n", x->valuestring);
        kvp_example *e = add(b);
        e->id = cJSON_IsNumber(tid) ? fmt("mbpp-%d", tid->valueint) : fmt("mbpp-%d", idx);
        e->kind = KVP_TASK_CODE;
        e->answer = xstrdup("");
        e->test_code = test;
        /* EvalPlus's MBPP+ problem: the task and its first test in a docstring */
        const char *test0 = cJSON_GetArrayItem(tests, 0)->valuestring, *code = jstr(t, "code");
        char *problem = fmt("\"\"\"\n%s\n%s\n\"\"\"\n", prompt, test0);
        set_code_prompt(e, problem ? problem : "", code);
        free(problem);
        e->entry_point = code ? tested_function(code, test0) : NULL;
        e->source_line = idx;
    }
    cJSON_Delete(arr);
    return 0;
}

static int load_humaneval(builder *b, char *buf) {
    int line = 1;
    FOR_LINES(buf, l, line) {
        if (full(b)) break;
        if (is_blank(l)) continue;
        cJSON *j = cJSON_Parse(l);
        const char *id = jstr(j, "task_id"), *prompt = jstr(j, "prompt"), *test = jstr(j, "test"), *ep = jstr(j, "entry_point");
        if (!id || !prompt || !test || !ep) {
            cJSON_Delete(j);
            if (bad_row(b, line, "expected {task_id, prompt, test, entry_point}")) return b->err->code;
            continue;
        }
        kvp_example *e = add(b);
        e->id = xstrdup(id);
        e->kind = KVP_TASK_CODE;
        e->answer = xstrdup("");
        e->code_header = xstrdup(prompt);
        e->entry_point = xstrdup(ep);
        e->test_code = fmt("%s\ncheck(%s)\n", test, ep);
        const char *sol = jstr(j, "canonical_solution");
        char *whole = sol ? fmt("%s%s", prompt, sol) : NULL, *whole_s = whole ? strip_dup(whole) : NULL;
        set_code_prompt(e, prompt, whole_s);
        free(whole);
        free(whole_s);
        e->source_line = line;
        cJSON_Delete(j);
    }
    return 0;
}

static int load_bbh(builder *b, char *buf, const char *task) {
    cJSON *j = cJSON_Parse(buf);
    const cJSON *exs = cJSON_GetObjectItemCaseSensitive(j, "examples"), *x;
    if (!cJSON_IsArray(exs)) {
        cJSON_Delete(j);
        return kvp_fail(b->err, KVP_E_FORMAT, "%s: expected {\"examples\": [{input, target}]}", b->path);
    }
    int idx = 0;
    cJSON_ArrayForEach(x, exs) {
        idx++;
        if (full(b)) break;
        const char *in = jstr(x, "input"), *target = jstr(x, "target");
        if (!in || !target) {
            if (bad_row(b, idx, "expected {input, target} (example number)")) {
                cJSON_Delete(j);
                return b->err->code;
            }
            continue;
        }
        kvp_example *e = add(b);
        e->id = fmt("bbh-%s-%d", task, idx);
        e->kind = KVP_TASK_EXACT;
        e->answer = xstrdup(target);
        e->prompt = fmt("%s\n\nGive only the final answer, with no explanation.", in);
        e->source_line = idx;
    }
    cJSON_Delete(j);
    return 0;
}

static int is_number_text(const char *s) {
    char *end;
    if (!*s) return 0;
    strtod(s, &end);
    return !*end;
}

static int load_user(builder *b, char *buf) {
    int line = 1;
    FOR_LINES(buf, l, line) {
        if (full(b)) break;
        if (is_blank(l)) continue;
        cJSON *j = cJSON_Parse(l);
        const cJSON *idv = cJSON_GetObjectItemCaseSensitive(j, "id"), *ans = cJSON_GetObjectItemCaseSensitive(j, "answer");
        const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
        const char *prompt = jstr(j, "prompt"), *question = jstr(j, "question");
        char idbuf[64];
        const char *id = cJSON_IsString(idv) ? idv->valuestring
                                             : (cJSON_IsNumber(idv) ? (snprintf(idbuf, sizeof idbuf, "%g", idv->valuedouble), idbuf) : NULL);
        const char *why = NULL;
        if (!j) why = "not valid JSON";
        else if (!id) why = "missing \"id\"";
        else if (prompt && (cJSON_IsString(ans) || cJSON_IsNumber(ans))) {
            kvp_example *e = add(b);
            char num[64];
            e->id = xstrdup(id);
            e->answer = cJSON_IsString(ans) ? xstrdup(ans->valuestring) : (snprintf(num, sizeof num, "%.17g", ans->valuedouble), xstrdup(num));
            e->kind = is_number_text(e->answer) ? KVP_TASK_NUMBER : KVP_TASK_EXACT;
            e->prompt = xstrdup(prompt);
            e->source_line = line;
        } else if (question && cJSON_IsArray(choices)) {
            int n = cJSON_GetArraySize(choices), gold = -1;
            const char *texts[26];
            for (int i = 0; i < n && i < 26; i++) texts[i] = cJSON_IsString(cJSON_GetArrayItem(choices, i)) ? cJSON_GetArrayItem(choices, i)->valuestring : NULL;
            if (cJSON_IsNumber(ans)) gold = ans->valueint;
            else if (cJSON_IsString(ans) && strlen(ans->valuestring) == 1) gold = toupper((unsigned char)ans->valuestring[0]) - 'A';
            int ok = n >= 2 && n <= 26 && gold >= 0 && gold < n;
            for (int i = 0; ok && i < n; i++) ok = texts[i] != NULL;
            if (!ok) why = "\"choices\" must be 2..26 strings and \"answer\" a valid index or letter";
            else {
                kvp_example *e = add(b);
                e->id = xstrdup(id);
                set_choices(e, texts, n);
                e->answer = fmt("%c", 'A' + gold);
                e->prompt = choice_prompt(question, texts, n);
                set_cloze(e, "Question: ", question, "\nAnswer:", NULL, NULL);
                e->source_line = line;
            }
        } else {
            why = "expected {id, prompt, answer} or {id, question, choices, answer}";
        }
        cJSON_Delete(j);
        if (why && bad_row(b, line, why)) return b->err->code;
    }
    return 0;
}

/* ---- dispatch ---------------------------------------------------------------------------- */

const char *kvp_example_demo(const kvp_example *e) { return e->demo ? e->demo : e->answer; }

int kvp_dataset_load_shots(const char *spec, const char *data_dir, int skip_bad_rows, int shots, kvp_dataset *d,
                           kvp_error *err) {
    if (shots <= 0) return kvp_dataset_load(spec, data_dir, skip_bad_rows, d, err);
    char name[512];
    snprintf(name, sizeof name, "%s", spec);
    long limit = 0;
    char *colon = strrchr(name, ':');
    if (colon) {
        char *end;
        limit = strtol(colon + 1, &end, 10);
        if (*end || limit <= 0) return kvp_fail(err, KVP_E_INVALID, "dataset '%s': N in NAME:N must be a positive integer", spec);
        *colon = 0;
    }
    int rc = kvp_dataset_load(name, data_dir, skip_bad_rows, d, err); /* the whole file */
    if (rc) return rc;
    int n_eval = limit ? (int)limit : d->n - shots;
    if (n_eval <= 0 || n_eval + shots > d->n) {
        int have = d->n;
        kvp_dataset_free(d);
        return kvp_fail(err, KVP_E_INVALID, "dataset '%s': %d examples and %d demonstrations need %d rows, the file has %d",
                        spec, n_eval > 0 ? n_eval : 0, shots, (n_eval > 0 ? n_eval : 0) + shots, have);
    }
    if (!(d->demos = malloc((size_t)shots * sizeof *d->demos))) {
        kvp_dataset_free(d);
        return kvp_fail(err, KVP_E_NOMEM, "out of memory");
    }
    memcpy(d->demos, d->ex + d->n - shots, (size_t)shots * sizeof *d->demos);
    d->n_demos = shots;
    for (int i = n_eval; i < d->n - shots; i++) free_example(&d->ex[i]);
    d->n = n_eval;
    return 0;
}

int kvp_dataset_load(const char *spec, const char *data_dir, int skip_bad_rows, kvp_dataset *d, kvp_error *err) {
    memset(d, 0, sizeof *d);
    char name[512], path[1024];
    snprintf(name, sizeof name, "%s", spec);
    int limit = 0;
    char *colon = strrchr(name, ':');
    if (colon) {
        char *end;
        long v = strtol(colon + 1, &end, 10);
        if (*end || v <= 0) return kvp_fail(err, KVP_E_INVALID, "dataset '%s': N in NAME:N must be a positive integer", spec);
        limit = (int)v;
        *colon = 0;
    }
    if (!data_dir) data_dir = getenv("KVPROBE_DATA");
    if (!data_dir) data_dir = "../shared/datasets";
    builder b = {.d = d, .limit = limit, .skip_bad = skip_bad_rows, .path = path, .err = err};
    size_t nl = strlen(name);
    memcpy(d->name, name, nl < sizeof d->name ? nl + 1 : sizeof d->name - 1); /* display name; may be cut */
    int rc;
    char *buf = NULL;
    size_t len;
#define OPEN(fmtstr, ...)                                                                           \
    do {                                                                                          \
        snprintf(path, sizeof path, fmtstr, __VA_ARGS__);                                         \
        if (!(buf = kvp_read_file(path, &len))) return kvp_fail(err, KVP_E_IO, "%s: cannot read", path); \
    } while (0)
    if (nl > 6 && !strcmp(name + nl - 6, ".jsonl")) {
        OPEN("%s", name);
        const char *base = strrchr(name, '/');
        size_t bl = strlen(base ? base + 1 : name);
        memcpy(d->name, base ? base + 1 : name, bl < sizeof d->name ? bl + 1 : sizeof d->name - 1);
        d->max_new_tokens = 256;
        rc = load_user(&b, buf);
    } else if (!strcmp(name, "gsm8k")) {
        OPEN("%s/gsm8k/test.jsonl", data_dir);
        d->max_new_tokens = 512; /* the code and math limits cover the clean answers of the Qwen2.5-Coder
                                    instruct models (docs/results.md); 320 / 384 cut 20-26% of them */
        rc = load_gsm8k(&b, buf);
    } else if (!strcmp(name, "sst2")) {
        OPEN("%s/sst2/dev.tsv", data_dir);
        d->max_new_tokens = 16;
        rc = load_sst2(&b, buf);
    } else if (!strcmp(name, "boolq")) {
        d->max_new_tokens = 16;
        snprintf(path, sizeof path, "%s/boolq/dev_part1.csv", data_dir);
        rc = load_boolq_file(&b, path);
        char path2[1024];
        snprintf(path2, sizeof path2, "%s/boolq/dev_part2.csv", data_dir);
        if (!rc && !full(&b)) rc = load_boolq_file(&b, path2);
    } else if (!strcmp(name, "arc-easy") || !strcmp(name, "arc-challenge")) {
        OPEN("%s/%s/test.jsonl", data_dir, name[4] == 'e' ? "arc_easy" : "arc_challenge");
        d->max_new_tokens = 16;
        rc = load_arc(&b, buf, name);
    } else if (!strcmp(name, "mbpp")) {
        OPEN("%s/mbpp/sanitized-mbpp.json", data_dir);
        d->max_new_tokens = 512;
        rc = load_mbpp(&b, buf);
    } else if (!strcmp(name, "humaneval")) {
        OPEN("%s/humaneval/HumanEval.jsonl.gz", data_dir);
        d->max_new_tokens = 768; /* EvalPlus's default */
        rc = load_humaneval(&b, buf);
    } else if (!strncmp(name, "bbh/", 4) && name[4] && !strchr(name + 4, '/') && !strstr(name, "..")) {
        OPEN("%s/bbh/%s.json", data_dir, name + 4);
        d->max_new_tokens = 32;
        rc = load_bbh(&b, buf, name + 4);
    } else {
        rc = kvp_fail(err, KVP_E_INVALID,
                      "unknown dataset '%s' (gsm8k, mbpp, humaneval, arc-easy, arc-challenge, sst2, boolq, bbh/<task>, or a .jsonl file)",
                      name);
    }
#undef OPEN
    free(buf);
    if (!rc && d->n == 0) rc = kvp_fail(err, KVP_E_FORMAT, "dataset '%s': no usable examples", spec);
    if (rc) kvp_dataset_free(d);
    return rc;
}

void kvp_dataset_free(kvp_dataset *d) {
    for (int i = 0; i < d->n; i++) free_example(&d->ex[i]);
    for (int i = 0; i < d->n_demos; i++) free_example(&d->demos[i]);
    free(d->ex);
    free(d->demos);
    d->ex = d->demos = NULL;
    d->n = d->n_demos = 0;
}
