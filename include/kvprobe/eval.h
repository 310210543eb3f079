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
    char *entry_point;  /* CODE: the function the tests call (HumanEval's entry_point; MBPP: the
                           reference solution's function named in the first test) */
    char *test_code;    /* CODE: Python run after the solution */
    int source_line;    /* 1-based line (or array index) in the source file */
    /* LABEL / CHOICE: the cloze form for base models (lm-eval style), frame and content
     * alternating: cloze[0] frame, cloze[1] content, cloze[2] frame, ... up to the first NULL
     * (ARC: "Question: ", the question, "\nAnswer:"). A candidate continues it with " " and
     * its label word or option text. The frame is scaffolding; content is user text. */
    char *cloze[KVP_CLOZE_PARTS];
    char *demo;         /* a reference answer as a model should write it, for few-shot turns
                           (GSM8K: worked solution + "The answer is N."; code: the response
                           prefix, the solution and the closing fence); NULL: the gold answer */
    char *response_prefix; /* the assistant turn opens with this text and the model continues it
                              (EvalPlus's "Below is a Python script ...:\n```python\n"); NULL: none.
                              Scoring reads response_prefix + the generated text. */
    char *stop;         /* generation also ends once the text (prefix included) holds this (code:
                           the closing fence "\n```"); NULL: end of turn / token limit only */
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
    /* why it failed, one word: "pass"; code: "no_code" (no code in the answer), "syntax",
     * "wrong_name" (the answer never defines the tested function), "assertion", "runtime"
     * (another exception), "timeout", "killed" (a signal: memory or process limits); other
     * tasks: "no_answer" (nothing extracted), "wrong" */
    char error[16];
    char exception[96]; /* code: the last line of the traceback ("" if none) */
} kvp_score_result;

/* Score one generated text (the model's continuation; an example's response_prefix is put
 * before it). Code tasks run in the sandbox (opts may be NULL). */
int kvp_score(const kvp_example *ex, const char *output, const kvp_sandbox_opts *sb, kvp_score_result *res,
              kvp_error *err);

/* Extraction helpers (exposed for tests). Return 1 and fill out if something was found. */
int kvp_extract_number(const char *text, double *out, char *repr, size_t cap);
int kvp_extract_choice(const char *text, int n_choices, char *letter);
int kvp_extract_label(const char *text, const char *labels, char *out, size_t cap);
/* First ```python (or ```) code block, else the whole text; a column-0
 * `if __name__ == "__main__":` block and what follows it are dropped (a script's demo, not the
 * solution). malloc'd. */
char *kvp_extract_code(const char *text);

#ifdef __cplusplus
}
#endif
#endif
