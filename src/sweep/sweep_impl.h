/* Internal state shared by the sweep's files: the run (plan, read-out candidates, score cache,
 * resume keys), one example's prompts and caches, and one cell of the grid. */
#ifndef KVPROBE_SWEEP_IMPL_H
#define KVPROBE_SWEEP_IMPL_H

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../util/readfile.h"
#include "../util/strmap.h"
#include "kvprobe/kvprobe.h"
#include "kvprobe/sweep.h"

#define KVP_MAX_CAND 26 /* choices A..Z */
#define KVP_LOGLIK_MAX_TOKENS 64 /* a longer continuation is scored on its first 64 tokens */
#define KVP_SWEEP_FLIGHTS 4      /* examples in flight at most (schedule.c) */

typedef struct run_ctx {
    const kvp_sweep_opts *o;
    kvp_model *m;
    const kvp_hparams *hp;
    kvp_tokenizer *tok;
    kvp_template tmpl;
    kvp_dataset ds;
    kvp_ctx *ctx;
    kvp_precision prec;
    int max_new;
    int kl_steps;
    kvp_condition conds[KVP_COND_COUNT];
    int n_conds;
    int layers[KVP_SWEEP_MAX_LAYERS], n_layers;
    int steps[KVP_SWEEP_MAX_STEPS], n_steps;
    char policy_name[KVP_SWEEP_MAX_POLICIES][96]; /* canonical specs: the records' condition */
    int n_policies;
    char model_sha[65];
    FILE *out;
    strmap done;          /* keys of finished records */
    char **done_keys;
    int n_done, cap_done;
    /* --readout: this example's candidate answers, their first tokens (first-token) and their
     * continuations' tokens (loglik) */
    int n_cand;
    char cand[KVP_MAX_CAND][32];
    int32_t cand_tok[KVP_MAX_CAND][4];
    int cand_nv[KVP_MAX_CAND];
    int32_t *cont[KVP_MAX_CAND];
    int n_cont[KVP_MAX_CAND];
    size_t cont_bytes[KVP_MAX_CAND]; /* loglik-norm divides by the continuation's length in bytes */
    /* scores of the distinct outputs of the examples in flight: cells often repeat the clean
     * text, and a code score costs a sandboxed Python run */
    struct scored { const kvp_example *ex; char *text; kvp_score_result res; } *scored;
    int n_scored, cap_scored;
    int cells_per_example; /* edited and policy cells of one example */
    int flights;           /* examples whose cells decode together (schedule.c) */
    /* progress */
    long cells_total, cells_finished, cells_this_run;
    double t_start, t_last_progress;
    kvp_error *err;
} run_ctx;

/* Why a generation ended. */
typedef enum stop_reason {
    STOP_MAX_TOKENS = 0, /* --max-new-tokens reached */
    STOP_EOG,            /* an end-of-generation token (end of turn), not part of the text */
    STOP_SEQUENCE,       /* the example's stop sequence (code: the closing fence), kept in the text */
} stop_reason;

/* A generation's text as bytes (after the example's response prefix), grown token by token so
 * the stop sequence is seen the step it appears. */
typedef struct gen_text {
    char *p;
    size_t len, cap, start; /* start: bytes of the response prefix before the generation */
} gen_text;

typedef struct cell {
    kvp_condition cond;
    int policy;           /* -1, or the --kv-policy this cell runs (its cache is the compressed prefill) */
    int L, W;
    kvp_kv *kv;
    int32_t *tok;         /* generated tokens from step 0 (clean prefix before W) */
    int n_tok;
    int done, applied;
    stop_reason stop;
    gen_text text;
    float *margin;        /* --margins: top-1 minus top-2 logit at each step (clean before W) */
    double kl_sum;
    int kl_n;
    float *logits;
    double t0;
    double prompt_own;    /* share of the prompt's K/V the cell holds of its own (sweep_prompt_kv_own) */
    int readout;          /* --readout: the candidate chosen (-1: none) */
    double cand_lp[KVP_MAX_CAND]; /* --readout loglik: each candidate's log-probability */
} cell;

/* One finished cell (or the clean run), as records.c writes it. */
typedef struct outcome {
    const char *cond;
    int L, W, applied;
    const int32_t *tok;
    int n_tok;
    stop_reason stop;
    double kl;            /* summed over kl_n steps */
    int kl_n;
    double agreement;
    int first_div;
    int n_prompt;
    int readout;
    const double *cand_lp;
    const float *margin;  /* [decode steps] or NULL */
    double seconds;
    size_t kv_bytes;      /* > 0: the memory the cell's cache referenced when it finished */
    long kv_entries;      /*   and its (layer, KV head, position) entries */
    double prompt_own;    /* sweep_prompt_kv_own after the edit (1: unedited) */
} outcome;

typedef struct example_state {
    kvp_prompt prompt, blank, other;
    kvp_kv *base, *donor_blank, *donor_other, *clean;
    int32_t *clean_tok;
    int n_clean, clean_steps;            /* steps = forward passes the clean run made */
    stop_reason clean_stop;
    float *clean_margin;                 /* --margins: [clean_steps] */
    float *clean_logits;                 /* [n_saved][V] logits of steps 0..n_saved-1 */
    int n_saved;
    int clean_readout;                   /* --readout: the clean run's candidate */
    double clean_lp[KVP_MAX_CAND];       /* --readout loglik: clean log-probability per candidate */
    kvp_kv *cont_kv[KVP_MAX_CAND];       /* --readout loglik: the prompt + each continuation, clean */
    double *cont_lp[KVP_MAX_CAND];       /*   and the clean log-probability of each of its tokens */
    double t0;                           /* when its prompt was built (the clean record's timing) */
} example_state;

/* policies.c */
/* Share of the prompt span's (layer, KV head, position) entries that kv holds as its own right
 * after an edit (sp) or a prefill policy (sp NULL): evicted entries do not count, nor entries
 * spliced in from the BLANK / OTHER donor, which the scaffold policy shares between requests
 * (scaffold:L,W is the blank cell (L, W) bit for bit). The x axis of the KV-policy race. */
double sweep_prompt_kv_own(const kvp_kv *kv, const kvp_splice *sp, int n_prompt);
/* A prefill policy's cell (streaming, h2o, snapkv): the prompt prefilled and compressed. */
int sweep_policy_cell(run_ctx *r, const example_state *s, const kvp_example *ex, int i, cell *ce);
/* The (L, W) of policy i's records: an edit policy's (in a sweep, scaffold / drop-content come
 * with a recent window; without, they are the blank / drop-content cells), or (0, 0). */
void sweep_policy_cell_at(const run_ctx *r, int i, int *L, int *W);

/* plan.c */
int sweep_setup(run_ctx *r);
void sweep_free_run(run_ctx *r);

/* prompts.c */
int sweep_user_prompt(run_ctx *r, const kvp_example *ex, kvp_prompt *p);
int sweep_other_donor(run_ctx *r, const kvp_prompt *p, const kvp_example *other, kvp_prompt *d);

/* readout.c */
const char *sweep_readout_name(kvp_readout ro);
int sweep_is_loglik(kvp_readout ro);
int sweep_readout_candidates(run_ctx *r, const kvp_example *ex);
int sweep_readout(const run_ctx *r, const float *logits);
int sweep_loglik_clean(run_ctx *r, example_state *s);
int sweep_loglik_cell(run_ctx *r, const example_state *s, const kvp_splice *sp, int W, double *cand_lp, int *pick);

/* decode.c */
kvp_kv *sweep_prefill(run_ctx *r, const int32_t *ids, int n, int n_ctx);
int sweep_is_end(const run_ctx *r, int32_t t);
int sweep_clean_decode(run_ctx *r, const kvp_example *ex, example_state *s, int n_save);
/* The clean runs of n examples side by side (one forward pass per step for all). */
int sweep_clean_decode_group(run_ctx *r, const kvp_example *const *ex, example_state *const *s, int n, int n_save);
/* The cells of one example in flight (its current wave). */
typedef struct cell_group {
    const example_state *s;
    const kvp_example *ex;
    cell *cells;
    int n_cells;
} cell_group;
int sweep_decode_step(run_ctx *r, cell_group *g, int n_groups);
/* A cell's text so far: the response prefix, then the clean run's first W tokens. */
int sweep_text_start(run_ctx *r, const kvp_example *ex, const example_state *s, int W, gen_text *t);
/* A cell's token, margin and logit buffers, and its text up to W. */
int sweep_cell_buffers(run_ctx *r, const kvp_example *ex, const example_state *s, int W, cell *ce);
/* The clean run's outcome, for the clean record and for cells whose W lies past its end. */
outcome sweep_clean_outcome(const run_ctx *r, const example_state *s, const char *cond, int L, int W);

/* records.c */
/* Forget the remembered scores of example ex (NULL: of every example). */
void sweep_forget_scores(run_ctx *r, const kvp_example *ex);
int sweep_write_record(run_ctx *r, const kvp_example *ex, const outcome *o);
void sweep_progress(run_ctx *r, int ex_done, int force);

/* resume.c */
void sweep_cell_key(char *buf, size_t cap, const char *id, const char *cond, int L, int W);
int sweep_is_done(const run_ctx *r, const char *id, const char *cond, int L, int W);
int sweep_mark_done(run_ctx *r, const char *key);
int sweep_load_done(run_ctx *r, const char *path);
/* --extend (extend.c): drop from DIR/results.jsonl what a limit of old_max tokens cut. */
int sweep_extend_records(run_ctx *r, const char *dir, int old_max);
int sweep_check_config(run_ctx *r, const char *dir);

/* schedule.c: the examples of the dataset from the first, their cells decoding together */
int sweep_run_examples(run_ctx *r);

/* sweep.c */
double sweep_now_s(void);
/* Does example ei still have a record to write? */
int sweep_has_work(const run_ctx *r, int ei);
/* The example's prompt and prefills (the clean one and the donors its conditions need). */
int sweep_prepare(run_ctx *r, int ei, example_state *s);
/* Its read-out candidates and the clean record, once the clean run is decoded. */
int sweep_begin_example(run_ctx *r, int ei, example_state *s);
int sweep_max_step(const run_ctx *r);
void sweep_free_state(example_state *s);
void sweep_free_cell(cell *c);

#endif
