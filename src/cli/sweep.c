/* kvprobe sweep / kvprobe report: thin wrappers over kvp_sweep_run / kvp_sweep_report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kvprobe/kvprobe.h"
#include "kvprobe/sweep.h"

static void sweep_usage(FILE *f) {
    fprintf(f,
            "usage: kvprobe sweep -m MODEL --dataset NAME[:N] [options]\n"
            "  --dataset SPEC         gsm8k mbpp humaneval arc-easy arc-challenge sst2 boolq bbh/<task>,\n"
            "                         or a .jsonl file; NAME:N = first N examples\n"
            "  --conditions LIST      clean,blank,zero,mean,noise,other,drop,drop-content (default clean,blank,zero)\n"
            "  --kv-policy SPEC       (repeatable) a KV policy as a cell of every example (include/kvprobe/policy.h):\n"
            "                         streaming:budget=B, h2o:budget=B, snapkv:budget=B at L = 0, W = 0;\n"
            "                         scaffold:L=..,W=..,recent=N (drop-content: too) at its L, W, the prompt's\n"
            "                         last N positions kept; records hold kv_bytes / kv_entries.\n"
            "                         scaffold:L,W without recent = the blank cell (L, W)\n"
            "  --layers auto|L1,L2..  first edited layer cutoffs (auto: ~8 evenly spaced)\n"
            "  --steps W1,W2,...      decoding steps of the edit (default 0,1,2,4,8,16,32)\n"
            "  --span all-prompt|user-content|scaffold   prompt positions edited (default all-prompt)\n"
            "  --max-new-tokens N     generation limit (default: per dataset)\n"
            "  --filler TEXT          BLANK donor filler text\n"
            "  --system TEXT          system message\n"
            "  --readout text|first-token|loglik|loglik-norm\n"
            "                         label / multiple-choice scoring: the answer\n"
            "                         extracted from the generated text (default); the candidate whose\n"
            "                         first token has the highest logit at step 0; or the candidate whose\n"
            "                         continuation (label word / option text) has the highest summed\n"
            "                         log-probability, teacher-forced, edited at its token W;\n"
            "                         loglik-norm: the same per byte (lm-eval's acc_norm)\n"
            "  --format instruct|cloze   instruct: the task's instruction as a chat user turn (default);\n"
            "                         cloze: base-model text 'Question: ...\\nAnswer:' with no chat\n"
            "                         template (arc, sst2, boolq, choice .jsonl; needs a loglik read-out)\n"
            "  --shots K              few-shot: K demonstrations (the dataset's last K rows, never\n"
            "                         evaluated) as earlier user/assistant turns (default 0)\n"
            "  --template NAME        chat template override\n"
            "  --thinking             Qwen3: enable_thinking=true (default off)\n"
            "  --data-dir DIR         datasets directory (default $KVPROBE_DATA or ../shared/datasets)\n"
            "  --skip-bad-rows        skip malformed dataset rows (count reported)\n"
            "  --seed S               noise condition seed (default 1)\n"
            "  --out DIR              output directory (default sweep-out); rerunning resumes\n"
            "  --extend               resume a run made with a smaller --max-new-tokens: what its limit\n"
            "                         cut is redone, the rest kept (old records: DIR/results.maxN.jsonl)\n"
            "  -t, --threads N        threads\n"
            "  --unbatched            decode every cell alone (same records; for benchmarks)\n"
            "  --precision P          matmul activations: q8x2 (default: two 8-bit planes, agrees with\n"
            "                         f32 on edited caches), q8 (fastest; drifts under ZERO), f32\n"
            "  --exact                = --precision f32 (the parity path, within 1e-3 of transformers)\n"
            "  --quiet                no progress line\n"
            "  --margins              records hold each step's top-1 minus top-2 logit (\"margins\")\n"
            "  --prompts-only         print each example's prompt, token ids, segments and BLANK donor\n"
            "                         as JSON lines on stdout, and run nothing\n"
            "usage: kvprobe report DIR    rebuild summary.csv, report.html and figures from DIR/results.jsonl\n");
}

static int parse_list(const char *opt, const char *s, int *out, int max, int *n) {
    *n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1000000 || (*end && *end != ',') || *n >= max) {
            fprintf(stderr, "kvprobe sweep: %s expects comma-separated non-negative integers, got '%s'\n", opt, s);
            return -1;
        }
        out[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    return *n ? 0 : -1;
}

int cmd_sweep(int argc, char **argv) {
    kvp_sweep_opts o;
    memset(&o, 0, sizeof o);
    o.out_dir = "sweep-out";
    o.seed = 1;
    int prompts_only = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = !strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--dataset") || !strcmp(a, "--conditions") ||
                    !strcmp(a, "--layers") || !strcmp(a, "--steps") || !strcmp(a, "--span") || !strcmp(a, "--max-new-tokens") ||
                    !strcmp(a, "--filler") || !strcmp(a, "--system") || !strcmp(a, "--template") || !strcmp(a, "--data-dir") ||
                    !strcmp(a, "--seed") || !strcmp(a, "--out") || !strcmp(a, "-t") || !strcmp(a, "--threads") ||
                    !strcmp(a, "--shots") || !strcmp(a, "--readout") || !strcmp(a, "--format") ||
                    !strcmp(a, "--precision") || !strcmp(a, "--kv-policy");
        if (takes && !v) {
            fprintf(stderr, "kvprobe sweep: %s needs a value\n", a);
            return 1;
        }
        if (takes) i++;
        long n;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o.model_path = v;
        else if (!strcmp(a, "--dataset")) o.dataset = v;
        else if (!strcmp(a, "--data-dir")) o.data_dir = v;
        else if (!strcmp(a, "--filler")) o.filler = v;
        else if (!strcmp(a, "--system")) o.system = v;
        else if (!strcmp(a, "--template")) o.template_name = v;
        else if (!strcmp(a, "--out")) o.out_dir = v;
        else if (!strcmp(a, "--thinking")) o.thinking = 1;
        else if (!strcmp(a, "--skip-bad-rows")) o.skip_bad_rows = 1;
        else if (!strcmp(a, "--unbatched")) o.unbatched = 1;
        else if (!strcmp(a, "--extend")) o.extend = 1;
        else if (!strcmp(a, "--exact")) o.precision = "f32";
        else if (!strcmp(a, "--precision")) o.precision = v;
        else if (!strcmp(a, "--prompts-only")) prompts_only = 1;
        else if (!strcmp(a, "--quiet")) o.quiet = 1;
        else if (!strcmp(a, "--margins")) o.margins = 1;
        else if (!strcmp(a, "--seed")) {
            if (cli_int(a, v, 0, 0x7fffffff, &n)) return 1;
            o.seed = (uint64_t)n;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (cli_int(a, v, 1, 256, &n)) return 1;
            o.threads = (int)n;
        } else if (!strcmp(a, "--shots")) {
            if (cli_int(a, v, 0, 64, &n)) return 1;
            o.shots = (int)n;
        } else if (!strcmp(a, "--max-new-tokens")) {
            if (cli_int(a, v, 1, 1 << 20, &n)) return 1;
            o.max_new_tokens = (int)n;
        } else if (!strcmp(a, "--layers")) {
            if (strcmp(v, "auto") && parse_list(a, v, o.layers, KVP_SWEEP_MAX_LAYERS, &o.n_layers)) return 1;
        } else if (!strcmp(a, "--steps")) {
            if (parse_list(a, v, o.steps, KVP_SWEEP_MAX_STEPS, &o.n_steps)) return 1;
        } else if (!strcmp(a, "--readout")) {
            static const struct { const char *name; kvp_readout ro; } ros[] = {
                {"text", KVP_READOUT_TEXT}, {"first-token", KVP_READOUT_FIRST_TOKEN},
                {"loglik", KVP_READOUT_LOGLIK}, {"loglik-norm", KVP_READOUT_LOGLIK_NORM}};
            int k = 0;
            while (k < 4 && strcmp(v, ros[k].name)) k++;
            if (k == 4) {
                fprintf(stderr, "kvprobe sweep: --readout is text, first-token, loglik or loglik-norm, not '%s'\n", v);
                return 1;
            }
            o.readout = ros[k].ro;
        } else if (!strcmp(a, "--format")) {
            if (strcmp(v, "instruct") && strcmp(v, "cloze")) {
                fprintf(stderr, "kvprobe sweep: --format is instruct or cloze, not '%s'\n", v);
                return 1;
            }
            o.format = !strcmp(v, "cloze") ? KVP_FORMAT_CLOZE : KVP_FORMAT_INSTRUCT;
        } else if (!strcmp(a, "--span")) {
            if (kvp_span_from_name(v, &o.span)) {
                fprintf(stderr, "kvprobe sweep: --span is all-prompt, user-content or scaffold, not '%s'\n", v);
                return 1;
            }
        } else if (!strcmp(a, "--conditions")) {
            char buf[512];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
                kvp_condition c;
                if (kvp_condition_from_name(tok, &c) || o.n_conds >= KVP_COND_COUNT) {
                    fprintf(stderr, "kvprobe sweep: unknown condition '%s' (clean, blank, zero, mean, noise, other, drop, drop-content)\n",
                            tok);
                    return 1;
                }
                o.conds[o.n_conds++] = c;
            }
        } else if (!strcmp(a, "--kv-policy")) {
            kvp_error e = {0};
            if (o.n_policies >= KVP_SWEEP_MAX_POLICIES) {
                fprintf(stderr, "kvprobe sweep: at most %d --kv-policy options\n", KVP_SWEEP_MAX_POLICIES);
                return 1;
            }
            if (kvp_kv_policy_parse(v, &o.policies[o.n_policies], &e)) {
                fprintf(stderr, "kvprobe sweep: --kv-policy: %s\n", e.msg);
                return 1;
            }
            o.n_policies++;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            sweep_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "kvprobe sweep: unknown option '%s'\n", a);
            sweep_usage(stderr);
            return 1;
        }
    }
    if (!o.model_path || !o.dataset) {
        sweep_usage(stderr);
        return 1;
    }
    kvp_error err = {0};
    if (prompts_only) return kvp_sweep_prompts(&o, stdout, &err) ? cli_error(&err) : 0;
    if (kvp_sweep_run(&o, &err)) return cli_error(&err);
    fprintf(stderr, "[sweep] report: %s/report.html (summary.csv, results.jsonl)\n", o.out_dir);
    return 0;
}

int cmd_report(int argc, char **argv) {
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: kvprobe report DIR\n");
        return 1;
    }
    kvp_error err = {0};
    if (kvp_sweep_report(argv[1], &err)) return cli_error(&err);
    printf("%s/report.html\n", argv[1]);
    return 0;
}
