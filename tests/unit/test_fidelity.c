/* The sweep's default numeric path computes what the reference computes on edited caches: a
 * small real grid (SmolLM2, SST-2, zero / blank / drop / mean x 3 L x 2 W) run at the default
 * precision and at f32 (--exact, equal to transformers token for token) must give identical
 * tokens in every cell, except where f32 itself had a near-tie (top-1 minus top-2 logit below
 * TIE) at the first differing step. The same grid at q8 must fail that bar under ZERO: the test
 * can tell a path that drifts from one that does not. tools/compare_precision.py prints the
 * same comparison for real runs. */
#include <cjson/cJSON.h>

#include "harness.h"
#include "kvprobe/kvprobe.h"
#include "../../src/util/readfile.h"

#define MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define TIE 0.05
#define N_REC 128

typedef struct run {
    cJSON *rec[N_REC];
    int n;
} run;

static int sweep(const char *precision, const char *dir, run *out) {
    kvp_error err = {0};
    kvp_sweep_opts o = {.model_path = MODEL, .dataset = "sst2:3", .out_dir = dir, .threads = 2, .quiet = 1,
                        .conds = {KVP_COND_ZERO, KVP_COND_BLANK, KVP_COND_DROP, KVP_COND_MEAN}, .n_conds = 4,
                        .layers = {0, 15, 25}, .n_layers = 3, .steps = {0, 3}, .n_steps = 2, .max_new_tokens = 16,
                        .no_report = 1, .margins = 1, .precision = precision};
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return -1;
    if (kvp_sweep_run(&o, &err)) {
        NOTE("%s: %s", precision ? precision : "default", err.msg);
        return -1;
    }
    snprintf(cmd, sizeof cmd, "%s/results.jsonl", dir);
    size_t len;
    char *text = kvp_read_file(cmd, &len);
    out->n = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line && out->n < N_REC; line = strtok(NULL, "\n"))
        out->rec[out->n++] = cJSON_Parse(line);
    free(text);
    return out->n ? 0 : -1;
}

static const char *str(const cJSON *r, const char *k) { return cJSON_GetObjectItem(r, k)->valuestring; }
static int num(const cJSON *r, const char *k) { return cJSON_GetObjectItem(r, k)->valueint; }

static const cJSON *find(const run *r, const cJSON *like) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(str(r->rec[i], "example_id"), str(like, "example_id")) &&
            !strcmp(str(r->rec[i], "condition"), str(like, "condition")) && num(r->rec[i], "L") == num(like, "L") &&
            num(r->rec[i], "W") == num(like, "W"))
            return r->rec[i];
    return NULL;
}

/* Per condition: cells compared, identical, near-tie differences, other differences. */
typedef struct tally {
    int cells, same, tie, unexplained;
} tally;

static void compare(const run *test, const run *ref, const char *cond, tally *t) {
    memset(t, 0, sizeof *t);
    for (int i = 0; i < ref->n; i++) {
        const cJSON *b = ref->rec[i], *a = find(test, b);
        if (!a || strcmp(str(b, "condition"), cond)) continue;
        t->cells++;
        const cJSON *ta = cJSON_GetObjectItem(a, "tokens"), *tb = cJSON_GetObjectItem(b, "tokens");
        int na = cJSON_GetArraySize(ta), nb = cJSON_GetArraySize(tb), s = 0;
        while (s < na && s < nb && cJSON_GetArrayItem(ta, s)->valueint == cJSON_GetArrayItem(tb, s)->valueint) s++;
        if (s == na && s == nb && !strcmp(str(a, "stop_reason"), str(b, "stop_reason"))) {
            t->same++;
            continue;
        }
        const cJSON *m = cJSON_GetObjectItem(b, "margins");
        if (s < cJSON_GetArraySize(m) && cJSON_GetArrayItem(m, s)->valuedouble < TIE) t->tie++;
        else t->unexplained++;
    }
}

int main(void) {
    run def, f32, q8;
    int ok = 0;
    TEST("fidelity: the grid runs at the default precision, f32 and q8") {
        ok = sweep(NULL, "/tmp/kvprobe-test-fid-default", &def) == 0 && sweep("f32", "/tmp/kvprobe-test-fid-f32", &f32) == 0 &&
             sweep("q8", "/tmp/kvprobe-test-fid-q8", &q8) == 0;
        CHECK(ok, "a sweep failed");
        CHECK(ok && def.n == f32.n && def.n == 3 * (1 + 4 * 3 * 2), "%d / %d records", def.n, f32.n);
        CHECK(ok && !strcmp(str(def.rec[0], "activations"), kvp_precision_name(KVP_SWEEP_PRECISION)) &&
                  !strcmp(str(f32.rec[0], "activations"), "f32"),
              "records name their numeric path");
    }
    if (!ok) return harness_finish();
    static const char *const conds[] = {"clean", "zero", "blank", "drop", "mean"};
    for (size_t c = 0; c < sizeof conds / sizeof conds[0]; c++) {
        char title[160];
        snprintf(title, sizeof title, "fidelity: %s cells at %s equal f32 except at f32 near-ties (< %.2g)", conds[c],
                 kvp_precision_name(KVP_SWEEP_PRECISION), TIE);
        TEST(title) {
            tally t;
            compare(&def, &f32, conds[c], &t);
            CHECK(t.cells > 0 && t.unexplained == 0, "%d of %d cells differ where f32 had no near-tie", t.unexplained, t.cells);
            NOTE("%s: %d/%d identical, %d near-tie differences", conds[c], t.same, t.cells, t.tie);
        }
    }
    TEST("fidelity: q8 fails the same bar under ZERO (the comparison can tell)") {
        tally t;
        compare(&q8, &f32, "zero", &t);
        CHECK(t.unexplained > 0, "q8 zero cells: %d/%d identical, none differs outside near-ties", t.same, t.cells);
        NOTE("q8 zero: %d/%d identical, %d near-tie, %d other differences", t.same, t.cells, t.tie, t.unexplained);
    }
    for (int i = 0; i < def.n; i++) cJSON_Delete(def.rec[i]);
    for (int i = 0; i < f32.n; i++) cJSON_Delete(f32.rec[i]);
    for (int i = 0; i < q8.n; i++) cJSON_Delete(q8.rec[i]);
    return harness_finish();
}
