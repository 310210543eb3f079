/* kvprobe — evaluation datasets, prompts and scoring.
 *
 * Built-in datasets are read from their upstream formats (default directory
 * ../shared/datasets, or --data-dir / $KVPROBE_DATA): gsm8k, mbpp, humaneval, arc-easy,
 * arc-challenge, sst2, boolq, bbh/<task>. Users' own data: a .jsonl path with
 * {id, prompt, answer} (exact match, numeric when the answer is a number) or
 * {id, question, choices, answer} (multiple choice; answer = 0-based index or letter).
 * Every example carries its zero-shot user-turn prompt; the README documents each format. */
#ifndef KVPROBE_EVAL_H
#define KVPROBE_EVAL_H

#include "kvprobe/error.h"
#include "kvprobe/sandbox.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvp_task_kind {
    KVP_TASK_NUMBER = 0, /* final number, compared numerically */
    KVP_TASK_LABEL,      /* one word out of a fixed set (sentiment, yes/no) */
    KVP_TASK_CHOICE,     /* a letter A.. */
    KVP_TASK_EXACT,      /* normalized exact match */
    KVP_TASK_CODE,       /* the extracted code must pass the tests */
} kvp_task_kind;

#define KVP_CLOZE_PARTS 5

typedef struct kvp_example {
    char *id;
    char *prompt;       /* user-turn text */
    char *answer;       /* gold: number, label word, letter, or exact string */
    kvp_task_kind kind;
    int n_choices;      /* CHOICE: options A.. */
    char **choices;     /* CHOICE: the option texts, n_choices of them */
    char *labels;       /* LABEL: alternatives separated by '|' */
    char *code_header;  /* CODE (HumanEval): prompt code prepended when the answer lacks it */
    char *entry_point;  /* CODE (HumanEval) */
    char *test_code;    /* CODE: Python run after the solution */
    int source_line;    /* 1-based line (or array index) in the source file */
    /* LABEL / CHOICE: the cloze form for base models (lm-eval style), frame and content
     * alternating: cloze[0] frame, cloze[1] content, cloze[2] frame, ... up to the first NULL
     * (ARC: "Question: ", the question, "\nAnswer:"). A candidate continues it with " " and
     * its label word or option text. The frame is scaffolding; content is user text. */
    char *cloze[KVP_CLOZE_PARTS];
    char *demo;         /* a reference answer as a model should write it, for few-shot turns
                           (GSM8K: worked solution + "Answer: N"; code: the solution in a
                           ```python block); NULL: the gold answer itself */
} kvp_example;

typedef struct kvp_dataset {
    char name[96];
    kvp_example *ex;
    int n;
    int n_skipped;      /* malformed rows skipped with skip_bad_rows */
    int max_new_tokens; /* default generation budget for the task */
    kvp_example *demos; /* few-shot demonstrations: the last rows of the file, never evaluated */
    int n_demos;
} kvp_dataset;

/* spec: NAME or NAME:N (first N in file order) or PATH.jsonl[:N]. data_dir may be NULL. */
int kvp_dataset_load(const char *spec, const char *data_dir, int skip_bad_rows, kvp_dataset *out, kvp_error *err);
/* The same, with `shots` demonstrations taken from the end of the whole file (so the first N
 * examples are the zero-shot ones, and NAME:N needs N + shots rows). */
int kvp_dataset_load_shots(const char *spec, const char *data_dir, int skip_bad_rows, int shots, kvp_dataset *out,
                           kvp_error *err);
void kvp_dataset_free(kvp_dataset *d);
/* The text a demonstration turn answers with. */
const char *kvp_example_demo(const kvp_example *e);

typedef struct kvp_score_result {
    double score;        /* 1 correct, 0 wrong */
    char extracted[256]; /* what was taken from the output as the answer (code: first line) */
} kvp_score_result;

/* Score one generated text. Code tasks run in the sandbox (opts may be NULL). */
int kvp_score(const kvp_example *ex, const char *output, const kvp_sandbox_opts *sb, kvp_score_result *res,
              kvp_error *err);

/* Extraction helpers (exposed for tests). Return 1 and fill out if something was found. */
int kvp_extract_number(const char *text, double *out, char *repr, size_t cap);
int kvp_extract_choice(const char *text, int n_choices, char *letter);
int kvp_extract_label(const char *text, const char *labels, char *out, size_t cap);
/* First ```python (or ```) code block, else the whole text. malloc'd. */
char *kvp_extract_code(const char *text);

#ifdef __cplusplus
}
#endif
#endif
