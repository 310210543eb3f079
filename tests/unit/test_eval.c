/* Datasets, prompts, answer extraction and scoring. */
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "kvprobe/eval.h"

static void write_tmp(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

int main(void) {
    kvp_error err = {0};
    struct {
        const char *spec, *first_answer;
        kvp_task_kind kind;
        int full_count;
    } sets[] = {
        {"gsm8k", "18", KVP_TASK_NUMBER, 1319},       {"sst2", "positive", KVP_TASK_LABEL, 872},
        {"boolq", "yes", KVP_TASK_LABEL, 3270},       {"arc-easy", "A", KVP_TASK_CHOICE, 2376},
        {"arc-challenge", NULL, KVP_TASK_CHOICE, 1170}, {"mbpp", "", KVP_TASK_CODE, 427},
        {"humaneval", "", KVP_TASK_CODE, 164},        {"bbh/boolean_expressions", "False", KVP_TASK_EXACT, 250},
    };
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        char title[128];
        snprintf(title, sizeof title, "dataset %s loads every row with its gold answer", sets[i].spec);
        TEST(title) {
            kvp_dataset d;
            CHECK(kvp_dataset_load(sets[i].spec, NULL, 0, &d, &err) == 0, "%s", err.msg);
            if (d.n == 0) continue;
            CHECK(d.n == sets[i].full_count, "%d rows, expected %d", d.n, sets[i].full_count);
            CHECK(d.ex[0].kind == sets[i].kind, "kind");
            if (sets[i].first_answer) CHECK(!strcmp(d.ex[0].answer, sets[i].first_answer), "first answer '%s'", d.ex[0].answer);
            for (int k = 0; k < d.n; k++)
                if (!d.ex[k].prompt || !*d.ex[k].prompt || !d.ex[k].id) {
                    CHECK(0, "row %d incomplete", k);
                    break;
                }
            kvp_dataset_free(&d);
        }
    }
    TEST("dataset NAME:N takes the first N in file order") {
        kvp_dataset d;
        CHECK(kvp_dataset_load("gsm8k:7", NULL, 0, &d, &err) == 0 && d.n == 7 && !strcmp(d.ex[0].id, "gsm8k-1"), "%s", err.msg);
        CHECK(strstr(d.ex[0].prompt, "Janet") && strstr(d.ex[0].prompt, "The answer is N."), "prompt");
        kvp_dataset_free(&d);
        CHECK(kvp_dataset_load("gsm8k:0", NULL, 0, &d, &err) != 0, "N = 0 accepted");
        CHECK(kvp_dataset_load("nonsense", NULL, 0, &d, &err) != 0 && strstr(err.msg, "unknown dataset"), "%s", err.msg);
        CHECK(kvp_dataset_load("bbh/../gsm8k/test", NULL, 0, &d, &err) != 0, "path traversal accepted");
    }
    TEST("few-shot: demonstrations are the file's last rows, never evaluated; demo answers") {
        kvp_dataset all, d;
        CHECK(kvp_dataset_load("gsm8k", NULL, 0, &all, &err) == 0, "%s", err.msg);
        CHECK(kvp_dataset_load_shots("gsm8k:5", NULL, 0, 3, &d, &err) == 0, "%s", err.msg);
        CHECK(d.n == 5 && d.n_demos == 3 && !strcmp(d.ex[0].id, all.ex[0].id), "split %d + %d", d.n, d.n_demos);
        CHECK(!strcmp(d.demos[2].id, all.ex[all.n - 1].id) && !strcmp(d.demos[0].id, all.ex[all.n - 3].id), "demos");
        const char *demo = kvp_example_demo(&d.demos[0]);
        char want[96];
        snprintf(want, sizeof want, "\nThe answer is %s.", d.demos[0].answer);
        CHECK(strstr(demo, want) && !strstr(demo, "<<") && !strstr(demo, "####"), "gsm8k demo: %s", demo);
        kvp_dataset_free(&d);
        CHECK(kvp_dataset_load_shots("sst2:3", NULL, 0, 2, &d, &err) == 0 && !strcmp(kvp_example_demo(&d.demos[0]), d.demos[0].answer),
              "label demo is the gold label");
        kvp_dataset_free(&d);
        CHECK(kvp_dataset_load_shots("mbpp:2", NULL, 0, 1, &d, &err) == 0 &&
                  !strncmp(kvp_example_demo(&d.demos[0]), d.demos[0].response_prefix, strlen(d.demos[0].response_prefix)) &&
                  strstr(kvp_example_demo(&d.demos[0]), "\n```") && strstr(d.demos[0].response_prefix, "```python\n"),
              "code demo: the response prefix, the solution, the closing fence");
        kvp_dataset_free(&d);
        CHECK(kvp_dataset_load_shots("gsm8k:1318", NULL, 0, 2, &d, &err) != 0 && strstr(err.msg, "need"), "too many rows: %s", err.msg);
        kvp_dataset_free(&all);
    }
    TEST("cloze forms: frame and content alternate (arc, sst2, boolq, choice jsonl); others have none") {
        kvp_dataset d;
        CHECK(kvp_dataset_load("arc-easy:1", NULL, 0, &d, &err) == 0, "%s", err.msg);
        const kvp_example *e = &d.ex[0];
        CHECK(!strcmp(e->cloze[0], "Question: ") && !strcmp(e->cloze[2], "\nAnswer:") && !e->cloze[3] &&
                  strstr(e->prompt, e->cloze[1]) && strstr(e->cloze[1], "photosynthesis") && !strchr(e->cloze[1], '\n'),
              "arc cloze: '%s' '%s' '%s'", e->cloze[0], e->cloze[1], e->cloze[2]);
        kvp_dataset_free(&d);
        CHECK(kvp_dataset_load("sst2:1", NULL, 0, &d, &err) == 0, "%s", err.msg);
        e = &d.ex[0];
        CHECK(!strcmp(e->cloze[0], "") && strstr(e->prompt, e->cloze[1]) && *e->cloze[1] &&
                  !strcmp(e->cloze[2], "\nQuestion: Is this sentence positive or negative?\nAnswer:") && !e->cloze[3],
              "sst2 cloze");
        kvp_dataset_free(&d);
        CHECK(kvp_dataset_load("boolq:1", NULL, 0, &d, &err) == 0, "%s", err.msg);
        e = &d.ex[0];
        size_t ql = e->cloze[3] ? strlen(e->cloze[3]) : 0;
        CHECK(!strcmp(e->cloze[0], "") && strstr(e->prompt, e->cloze[1]) && !strcmp(e->cloze[2], "\nQuestion: ") && ql > 1 &&
                  e->cloze[3][ql - 1] == '?' && !strcmp(e->cloze[4], "\nAnswer:"),
              "boolq cloze");
        kvp_dataset_free(&d);
        CHECK(kvp_dataset_load("gsm8k:1", NULL, 0, &d, &err) == 0 && !d.ex[0].cloze[0], "gsm8k has no cloze form");
        kvp_dataset_free(&d);
        const char *p = "/tmp/kvprobe-test-cloze.jsonl";
        write_tmp(p, "{\"id\": 1, \"question\": \"Sky?\", \"choices\": [\"red\", \"blue\"], \"answer\": 1}\n");
        CHECK(kvp_dataset_load(p, NULL, 0, &d, &err) == 0 && d.n == 1 && !strcmp(d.ex[0].cloze[1], "Sky?") &&
                  !strcmp(d.ex[0].cloze[0], "Question: "),
              "jsonl cloze");
        kvp_dataset_free(&d);
        unlink(p);
    }
    TEST("user jsonl: exact, numeric and multiple choice rows") {
        const char *p = "/tmp/kvprobe-test-user.jsonl";
        write_tmp(p, "{\"id\": \"a\", \"prompt\": \"2+2?\", \"answer\": \"4\"}\n"
                     "{\"id\": 7, \"question\": \"Sky?\", \"choices\": [\"red\", \"blue\"], \"answer\": 1}\n"
                     "{\"id\": \"c\", \"question\": \"Sky?\", \"choices\": [\"red\", \"blue\"], \"answer\": \"b\"}\n"
                     "{\"id\": \"d\", \"prompt\": \"Capital of France?\", \"answer\": \"Paris\"}\n");
        kvp_dataset d;
        CHECK(kvp_dataset_load(p, NULL, 0, &d, &err) == 0 && d.n == 4, "%s", err.msg);
        if (d.n == 4) {
            CHECK(d.ex[0].kind == KVP_TASK_NUMBER && d.ex[1].kind == KVP_TASK_CHOICE && !strcmp(d.ex[1].answer, "B") &&
                      !strcmp(d.ex[1].id, "7") && !strcmp(d.ex[2].answer, "B") && d.ex[3].kind == KVP_TASK_EXACT,
                  "parsed rows");
            CHECK(strstr(d.ex[1].prompt, "A. red\nB. blue") != NULL, "choice prompt");
        }
        kvp_dataset_free(&d);
        unlink(p);
    }
    TEST("malformed rows: error names file and line; --skip-bad-rows counts them") {
        const char *p = "/tmp/kvprobe-test-bad.jsonl";
        write_tmp(p, "{\"id\": \"a\", \"prompt\": \"x\", \"answer\": \"1\"}\n{not json\n"
                     "{\"id\": \"c\", \"question\": \"q\", \"choices\": [\"x\"], \"answer\": 3}\n"
                     "{\"id\": \"d\", \"prompt\": \"y\", \"answer\": \"2\"}\n");
        kvp_dataset d;
        CHECK(kvp_dataset_load(p, NULL, 0, &d, &err) != 0 && strstr(err.msg, "kvprobe-test-bad.jsonl:2:"), "%s", err.msg);
        CHECK(kvp_dataset_load(p, NULL, 1, &d, &err) == 0 && d.n == 2 && d.n_skipped == 2, "skipped %d", d.n_skipped);
        kvp_dataset_free(&d);
        unlink(p);
        const char *q = "/tmp/kvprobe-test-bad";
        char dir[256];
        snprintf(dir, sizeof dir, "%s/sst2", q);
        mkdir(q, 0755);
        mkdir(dir, 0755);
        write_tmp("/tmp/kvprobe-test-bad/sst2/dev.tsv", "text\tlabel\ngood film\t1\nno label here\nbad\t7\nok\t0\n");
        CHECK(kvp_dataset_load("sst2", q, 0, &d, &err) != 0 && strstr(err.msg, "dev.tsv:3:"), "%s", err.msg);
        CHECK(kvp_dataset_load("sst2", q, 1, &d, &err) == 0 && d.n == 2 && d.n_skipped == 2, "%s", err.msg);
        kvp_dataset_free(&d);
    }
    TEST("extraction: numbers, choices, labels, code blocks") {
        double v;
        char r[64], letter;
        CHECK(kvp_extract_number("She has 3 apples... Answer: 1,234.5 dollars", &v, r, sizeof r) && v == 1234.5, "%g", v);
        CHECK(kvp_extract_number("first 12 then 7 and finally 42.", &v, r, sizeof r) && v == 42, "last number %g", v);
        CHECK(kvp_extract_number("The answer is -3", &v, r, sizeof r) && v == -3, "%g", v);
        CHECK(!kvp_extract_number("no digits", &v, r, sizeof r), "found a number in none");
        CHECK(kvp_extract_choice("The answer is (C).", 4, &letter) && letter == 'C', "%c", letter);
        CHECK(kvp_extract_choice("B. Because blue", 4, &letter) && letter == 'B', "%c", letter);
        CHECK(kvp_extract_choice("**(D)** is correct", 4, &letter) && letter == 'D', "wrapped start: %c", letter);
        CHECK(kvp_extract_choice("I think it is C.", 4, &letter) && letter == 'C', "only option label: %c", letter);
        CHECK(!kvp_extract_choice("A plant needs light", 4, &letter), "the article A is not an answer");
        CHECK(!kvp_extract_choice("Question: which? A. red B. blue", 4, &letter), "an echo of the options is no answer");
        CHECK(!kvp_extract_choice("E", 4, &letter), "E out of range");
        CHECK(kvp_extract_label("Negative. It is not positive.", "positive|negative", r, sizeof r) && !strcmp(r, "negative"), "%s", r);
        CHECK(kvp_extract_label("The sentiment is positive.", "positive|negative", r, sizeof r) && !strcmp(r, "positive"), "%s", r);
        CHECK(!kvp_extract_label("Is it positive or negative? Answer", "positive|negative", r, sizeof r), "an echo is no answer");
        CHECK(!kvp_extract_label("Yesterday", "yes|no", r, sizeof r), "'yes' inside a word");
        char *c = kvp_extract_code("Here:\n```python\ndef f():\n    return 1\n```\nDone");
        CHECK(!strcmp(c, "def f():\n    return 1\n"), "'%s'", c);
        free(c);
        c = kvp_extract_code("```\npython\ndef f():\n    return 1\n```");
        CHECK(!strcmp(c, "def f():\n    return 1\n"), "the language tag on its own line: '%s'", c);
        free(c);
        c = kvp_extract_code("```python\ndef f():\n    return 1\n\nif __name__ == \"__main__\":\n    print(input())\n```");
        CHECK(!strcmp(c, "def f():\n    return 1\n\n"), "a __main__ demo is dropped: '%s'", c);
        free(c);
        char rep[32];
        CHECK(kvp_extract_number("so the total is \\boxed{1,024} dollars", &v, rep, sizeof rep) && v == 1024, "boxed: %s", rep);
        CHECK(kvp_extract_number("3 + 4 = 7 apples. The answer is 7.", &v, rep, sizeof rep) && v == 7, "answer is: %s", rep);
        CHECK(kvp_extract_number("48 / 2 = 24, 48 + 24 = 72\n#### 72", &v, rep, sizeof rep) && v == 72, "####: %s", rep);
    }
    TEST("scoring: numbers, labels, choices, exact match") {
        kvp_example num = {.kind = KVP_TASK_NUMBER, .answer = "18"};
        kvp_example lab = {.kind = KVP_TASK_LABEL, .answer = "positive", .labels = "positive|negative"};
        kvp_example ch = {.kind = KVP_TASK_CHOICE, .answer = "B", .n_choices = 4};
        kvp_example ex = {.kind = KVP_TASK_EXACT, .answer = "(A)"};
        kvp_score_result s;
        kvp_score(&num, "16 - 3 - 4 = 9 eggs, 9 * 2 = 18.\nAnswer: $18", NULL, &s, &err);
        CHECK(s.score == 1 && !strcmp(s.extracted, "18"), "%s", s.extracted);
        kvp_score(&num, "Answer: 17", NULL, &s, &err);
        CHECK(s.score == 0, "17 scored");
        kvp_score(&lab, "Positive", NULL, &s, &err);
        CHECK(s.score == 1, "label");
        kvp_score(&ch, "B", NULL, &s, &err);
        CHECK(s.score == 1, "choice");
        kvp_score(&ex, "A\n", NULL, &s, &err);
        CHECK(s.score == 1, "exact with parens: %s", s.extracted);
        kvp_score(&ex, "The answer is (B).", NULL, &s, &err);
        CHECK(s.score == 0, "exact wrong");
        kvp_score(&ex, "(A) because the others fail", NULL, &s, &err);
        CHECK(s.score == 1, "parenthesized answer opening a line");
        kvp_example yes = {.kind = KVP_TASK_EXACT, .answer = "yes"};
        kvp_score(&yes, "Yes, the sentence is plausible.", NULL, &s, &err);
        CHECK(s.score == 1, "answer word opening the line");
        kvp_score(&yes, "Yesterday it was not.", NULL, &s, &err);
        CHECK(s.score == 0, "prefix inside a word");
        /* A long first line cut to the 256-byte field must not end inside a UTF-8 sequence. */
        char longline[700];
        size_t k = 0;
        while (k + 2 < sizeof longline - 1) longline[k++] = (char)0xC2, longline[k++] = (char)0xB7; /* U+00B7 */
        longline[k] = 0;
        kvp_score(&yes, longline, NULL, &s, &err);
        size_t el = strlen(s.extracted);
        CHECK(el > 200 && el % 2 == 0 && (unsigned char)s.extracted[el - 1] == 0xB7, "extracted cut inside a sequence (%zu bytes)", el);
    }
    TEST("code prompts: EvalPlus instruct format, response prefix, closing-fence stop, tested function") {
        kvp_dataset he, mb;
        CHECK(kvp_dataset_load("humaneval:1", NULL, 0, &he, &err) == 0 && kvp_dataset_load("mbpp:1", NULL, 0, &mb, &err) == 0,
              "%s", err.msg);
        const char *instr = "Please provide a self-contained Python script that solves the following problem in a markdown "
                            "code block:\n```\n";
        CHECK(!strncmp(he.ex[0].prompt, instr, strlen(instr)) && strstr(he.ex[0].prompt, "def has_close_elements(") &&
                  !strcmp(he.ex[0].prompt + strlen(he.ex[0].prompt) - 8, "\"\"\"\n```\n"),
              "humaneval prompt: '%s'", he.ex[0].prompt);
        CHECK(strstr(mb.ex[0].prompt, "\"\"\"\nWrite a function to find the shared elements") &&
                  strstr(mb.ex[0].prompt, "assert set(similar_elements("),
              "mbpp prompt: the task and its first test in a docstring: '%s'", mb.ex[0].prompt);
        CHECK(he.ex[0].response_prefix && !strcmp(he.ex[0].stop, "\n```") && mb.ex[0].entry_point &&
                  !strcmp(mb.ex[0].entry_point, "similar_elements") && !strcmp(he.ex[0].entry_point, "has_close_elements"),
              "prefix, stop, entry points");
        kvp_dataset_free(&he);
        kvp_dataset_free(&mb);
    }
    TEST("scoring code: canonical solutions pass, wrong ones fail with their error class (sandboxed)") {
        kvp_dataset he, mb;
        CHECK(kvp_dataset_load("humaneval:2", NULL, 0, &he, &err) == 0 && kvp_dataset_load("mbpp:1", NULL, 0, &mb, &err) == 0,
              "%s", err.msg);
        kvp_score_result s;
        /* Outputs continue the response prefix (which opens the ```python block). HumanEval/0:
         * the body alone (header prepended because the answer lacks the def). */
        const char *body = "    for i, a in enumerate(numbers):\n        for j, b in enumerate(numbers):\n"
                           "            if i != j and abs(a - b) < threshold:\n                return True\n    return False\n```";
        CHECK(kvp_score(&he.ex[0], body, NULL, &s, &err) == 0 && s.score == 1 && !strcmp(s.error, "pass"),
              "canonical body failed: %s %s", s.error, err.msg);
        CHECK(kvp_score(&he.ex[0], "def has_close_elements(numbers, threshold):\n    return False\n```", NULL, &s, &err) == 0 &&
                  s.score == 0 && !strcmp(s.error, "assertion") && !strcmp(s.exception, "AssertionError"),
              "wrong solution: %g %s '%s'", s.score, s.error, s.exception);
        const char *mb_ok = "def similar_elements(a, b):\n    return tuple(set(a) & set(b))\n```";
        CHECK(kvp_score(&mb.ex[0], mb_ok, NULL, &s, &err) == 0 && s.score == 1, "mbpp solution failed");
        /* Only the answer's definitions run (EvalPlus's sanitizer): its own demo calls and asserts,
         * a wrong one and one cut by the token limit, do not fail a right function. */
        const char *mb_demo = "import math\ndef similar_elements(a, b):\n    return tuple(set(a) & set(b))\n\n"
                              "print(similar_elements((1, 2), (2, 3)))\nassert similar_elements((1,), (2,)) == (9,)\n"
                              "assert similar_elements((3, 4), (4, 5)) ==";
        CHECK(kvp_score(&mb.ex[0], mb_demo, NULL, &s, &err) == 0 && s.score == 1,
              "a right function with its own failing / cut asserts: %s %s", s.error, s.exception);
        CHECK(kvp_score(&mb.ex[0], "def similar_elements(a, b):\n    while True: pass\n", &(kvp_sandbox_opts){.timeout_s = 1}, &s,
                        &err) == 0 && s.score == 0 && !strcmp(s.error, "timeout"), "looping solution: %s", s.error);
        static const struct {
            const char *out, *error;
        } bad[] = {
            {"def shared(a, b):\n    return tuple(set(a) & set(b))\n```", "wrong_name"},
            {"def similar_elements(a, b)\n    return 1\n```", "syntax"},
            {"def similar_elements(a, b):\n    return a[99]\n```", "runtime"},
            {"```", "no_code"},
            {"\n\n```", "no_code"},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
            CHECK(kvp_score(&mb.ex[0], bad[i].out, NULL, &s, &err) == 0 && s.score == 0 && !strcmp(s.error, bad[i].error),
                  "'%s': %s, want %s (%s)", bad[i].out, s.error, bad[i].error, s.exception);
        CHECK(kvp_score(&mb.ex[0], "def similar_elements(a, b):\n    return a[99]\n```", NULL, &s, &err) == 0 &&
                  !strcmp(s.exception, "IndexError: tuple index out of range"),
              "exception line: '%s'", s.exception);
        kvp_example num = {.kind = KVP_TASK_NUMBER, .answer = "18"};
        kvp_score(&num, "I cannot tell.", NULL, &s, &err);
        CHECK(!strcmp(s.error, "no_answer"), "no number: %s", s.error);
        kvp_score(&num, "The answer is 17.", NULL, &s, &err);
        CHECK(!strcmp(s.error, "wrong"), "wrong number: %s", s.error);
        kvp_dataset_free(&he);
        kvp_dataset_free(&mb);
    }
    return harness_finish();
}
