/* --extend: a run whose generation limit turned out too short is continued with a larger
 * --max-new-tokens instead of being redone.
 *
 * Greedy decoding is deterministic and batching never changes a bit, so a generation that
 * stopped (end of turn, stop sequence) before the old limit is exactly what the new limit gives.
 * Only two kinds of record change: cells cut by the old limit, and every record of an example
 * whose *clean* run was cut (the edited cells' agreement and first divergence are read against
 * the clean run). Those are dropped from results.jsonl and the resume redoes them; the file as
 * it was is kept beside it as results.max<OLD>.jsonl. */
#include "sweep_impl.h"

typedef struct line {
    const char *p;
    size_t n; /* with its newline */
} line;

/* The record's example id and whether it stopped at the token limit (and is clean). */
static int read_record(const line *l, char *id, size_t cap, int *cut, int *clean) {
    cJSON *j = cJSON_ParseWithLength(l->p, l->n);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "example_id"), *c = cJSON_GetObjectItemCaseSensitive(j, "condition");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "stop_reason");
    int ok = cJSON_IsString(e) && cJSON_IsString(c) && cJSON_IsString(s);
    if (ok) {
        snprintf(id, cap, "%s", e->valuestring);
        *cut = !strcmp(s->valuestring, "max_tokens");
        *clean = !strcmp(c->valuestring, kvp_condition_name(KVP_COND_CLEAN));
    }
    cJSON_Delete(j);
    return ok ? 0 : -1;
}

static int write_all(const char *path, const line *lines, int n, const char *keep) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int bad = 0;
    for (int i = 0; i < n && !bad; i++)
        if (keep[i]) bad = fwrite(lines[i].p, 1, lines[i].n, f) != lines[i].n;
    return fclose(f) != 0 || bad ? -1 : 0;
}

int sweep_extend_records(run_ctx *r, const char *dir, int old_max) {
    char path[4096], tmp[4096], bak[4096];
    snprintf(path, sizeof path, "%s/results.jsonl", dir);
    snprintf(tmp, sizeof tmp, "%s/results.jsonl.extending", dir);
    snprintf(bak, sizeof bak, "%s/results.max%d.jsonl", dir, old_max);
    size_t len;
    char *buf = kvp_read_file(path, &len);
    if (!buf) return errno == ENOENT ? 0 : kvp_fail(r->err, KVP_E_IO, "%s: cannot read", path);
    int n = 0, cap = 0, rc = 0;
    line *lines = NULL;
    for (char *p = buf, *end; p < buf + len && !rc; p = end + 1) {
        if (!(end = memchr(p, '\n', (size_t)(buf + len - p)))) break; /* a torn last line: resume drops it */
        if (n == cap) {
            line *nl = realloc(lines, (size_t)(cap = cap ? 2 * cap : 1024) * sizeof *nl);
            if (!nl) rc = kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
            else lines = nl;
        }
        if (!rc) lines[n++] = (line){p, (size_t)(end - p) + 1};
    }
    char *keep = calloc((size_t)(n ? n : 1), 1);
    char (*ids)[256] = calloc((size_t)(n ? n : 1), sizeof *ids);
    int *cut = calloc((size_t)(n ? n : 1), sizeof *cut);
    strmap redo = {0};
    if (!rc && (!keep || !ids || !cut || strmap_init(&redo, (size_t)n + 16))) rc = kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    /* pass 1: the examples whose clean run was cut; pass 2: what stays */
    for (int i = 0; i < n && !rc; i++) {
        int clean;
        if (read_record(&lines[i], ids[i], sizeof ids[i], &cut[i], &clean))
            rc = kvp_fail(r->err, KVP_E_FORMAT, "%s:%d: not a kvprobe record with a stop_reason", path, i + 1);
        else if (clean && cut[i] && strmap_put(&redo, ids[i], strlen(ids[i]), 1))
            rc = kvp_fail(r->err, KVP_E_NOMEM, "out of memory");
    }
    int kept = 0;
    for (int i = 0; i < n && !rc; i++) kept += keep[i] = !cut[i] && strmap_get(&redo, ids[i], strlen(ids[i])) < 0;
    /* the old file survives as the backup (a second extension from the same limit keeps the first) */
    if (!rc && write_all(tmp, lines, n, keep)) rc = kvp_fail(r->err, KVP_E_IO, "%s: cannot write", tmp);
    if (!rc && access(bak, F_OK) != 0 && link(path, bak) != 0)
        rc = kvp_fail(r->err, KVP_E_IO, "%s: cannot keep the old records: %s", bak, strerror(errno));
    if (!rc && rename(tmp, path) != 0) rc = kvp_fail(r->err, KVP_E_IO, "%s: cannot replace: %s", path, strerror(errno));
    if (!rc) /* (even with --quiet: it says what was dropped and where it went) */
        fprintf(stderr, "[sweep] --extend: max_new_tokens %d -> %d: %d of %d records kept, %d redone (cut by the old limit, "
                "or of an example whose clean run was); the old records are in %s\n",
                old_max, r->max_new, kept, n, n - kept, bak);
    if (rc) unlink(tmp);
    strmap_free(&redo);
    free(cut);
    free(ids);
    free(keep);
    free(lines);
    free(buf);
    return rc;
}
