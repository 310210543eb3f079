/* kvprobe — the splice sweep: conditions x layer cutoffs L x decoding steps W over a dataset.
 *
 * Per example: one clean prefill of the prompt without its last token, one prefill per
 * donor (BLANK, OTHER), one clean greedy decode. For each W the clean cache is forked at
 * step W, every (condition, L) cell is spliced, and the cells of every W decode together as
 * one batch (one forward pass per step, weights read once) until their end token or the
 * token limit; once fewer than half are left, the next example's cells join the batch.
 * Greedy and deterministic: the same command gives the same records, and a rerun resumes,
 * skipping finished cells. Outputs in out_dir:
 *   results.jsonl  one record per example x cell (appended and flushed as cells finish, so
 *                  the records of two examples in flight interleave)
 *   summary.csv    accuracy per condition x L x W with n and a Wilson 95% interval
 *   report.html    heatmaps, accuracy-vs-L curves, metrics, example completions
 *   *.svg          the figures alone */
#ifndef KVPROBE_SWEEP_H
#define KVPROBE_SWEEP_H

#include <stdint.h>
#include <stdio.h>

#include "kvprobe/error.h"
#include "kvprobe/policy.h"
#include "kvprobe/splice.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVP_SWEEP_MAX_LAYERS 128
#define KVP_SWEEP_MAX_STEPS 64
#define KVP_SWEEP_MAX_POLICIES 32

/* How a label / multiple-choice answer is read. The generated text is always recorded; with a
 * read-out, its own score is kept beside as text_score. */
typedef enum kvp_readout {
    KVP_READOUT_TEXT,        /* extract the answer from the generated text */
    KVP_READOUT_FIRST_TOKEN, /* the candidate whose first token has the highest logit at step 0 */
    KVP_READOUT_LOGLIK,      /* the candidate whose continuation (label word, or the option's text)
                                has the highest summed token log-probability, teacher-forced; the
                                edit lands before the forward pass that predicts its token W */
    KVP_READOUT_LOGLIK_NORM, /* the same per byte of the continuation (lm-eval's acc_norm) */
} kvp_readout;

/* What the model is shown. */
typedef enum kvp_prompt_format {
    KVP_FORMAT_INSTRUCT = 0, /* the dataset's instruction as a user turn, in the chat template */
    KVP_FORMAT_CLOZE,        /* base models, lm-eval style, no chat template: "Question: ...\nAnswer:"
                                (frame = scaffold, question = user content), read out by log-likelihood
                                of " " + each candidate; few-shot demos end with the gold candidate */
} kvp_prompt_format;

typedef struct kvp_sweep_opts {
    const char *model_path;
    const char *dataset;        /* NAME[:N] or PATH.jsonl[:N] */
    const char *data_dir;       /* NULL: $KVPROBE_DATA or ../shared/datasets */
    int skip_bad_rows;
    kvp_condition conds[KVP_COND_COUNT];
    int n_conds;                /* 0: clean, blank, zero */
    int layers[KVP_SWEEP_MAX_LAYERS];
    int n_layers;               /* 0: auto, about 8 cutoffs evenly from 0 to n_layer-1 */
    int steps[KVP_SWEEP_MAX_STEPS];
    int n_steps;                /* 0: 0,1,2,4,8,16,32 */
    int max_new_tokens;         /* 0: the dataset's default */
    int extend;                 /* 1: out_dir may hold this sweep with a smaller max_new_tokens; its
                                   records cut by that limit (and every record of an example whose
                                   clean run it cut) are redone, the rest kept (src/sweep/extend.c) */
    kvp_span span;
    const char *filler;         /* BLANK filler text (NULL: KVP_DEFAULT_FILLER) */
    const char *system;         /* optional system message */
    const char *template_name;  /* NULL: from the GGUF */
    int thinking;               /* Qwen3 enable_thinking (default 0: off, as the study) */
    const char *out_dir;
    int threads;
    int unbatched;              /* 1: decode each cell alone (for benchmarks) */
    uint64_t seed;              /* noise condition */
    int kl_steps;               /* KL window after the edit (default 8) */
    int quiet;                  /* no progress line */
    int no_report;              /* skip summary/report at the end */
    const char *precision;      /* matmul activations: "q8x2" (NULL: the default), "q8", or "f32"
                                   (the parity path); see kvp_precision */
    kvp_readout readout;        /* label / choice tasks: how the answer is read (see kvp_readout) */
    int shots;                  /* few-shot: this many demonstrations (the dataset's last rows) as
                                   earlier user/assistant turns; 0 = zero-shot */
    kvp_prompt_format format;   /* instruct (default) or cloze (label / choice datasets, loglik read-outs) */
    int margins;                /* 1: records hold "margins", the top-1 minus top-2 logit of every
                                   decode step (how near a tie each greedy choice was) */
    /* --kv-policy: prefill policies (streaming, h2o, snapkv) as extra cells of every example,
     * condition = the policy's canonical spec, L = 0, W = 0; their records hold the KV memory
     * they keep. scaffold:L,W and drop-content:L,W are the blank and drop-content cells (L, W):
     * the same K/V, bit for bit (tests/unit/test_policy.c) */
    kvp_kv_policy policies[KVP_SWEEP_MAX_POLICIES];
    int n_policies;
} kvp_sweep_opts;

/* The sweep's default precision: two 8-bit planes, whose records agree with f32 on edited
 * caches too (q8 does not under ZERO; docs/results.md, "Numeric path"). */
#define KVP_SWEEP_PRECISION KVP_PREC_Q8X2

int kvp_sweep_run(const kvp_sweep_opts *o, kvp_error *err);

/* What the sweep would feed the model, without running it: one JSON line per example with
 * example_id, gold, the rendered prompt text, its token ids and per-token segments
 * (s = scaffold, y = system, u = user, a = assistant), the BLANK donor's ids,
 * max_new_tokens and the end-of-generation ids. For checking prompts, and for reference implementations of the sweep. */
int kvp_sweep_prompts(const kvp_sweep_opts *o, FILE *out, kvp_error *err);

/* Write summary.csv, report.html and the SVG figures from out_dir/results.jsonl. */
int kvp_sweep_report(const char *out_dir, kvp_error *err);

/* Wilson score interval for k successes out of n at 95%. */
void kvp_wilson(int k, int n, double *lo, double *hi);

#ifdef __cplusplus
}
#endif
#endif
