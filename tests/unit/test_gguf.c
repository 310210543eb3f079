/* GGUF reader: a valid file built byte by byte parses with the right values; every
 * truncation, targeted corruptions and thousands of random mutations fail cleanly with
 * KVP_E_FORMAT/UNSUPPORTED and a message naming the problem (run under ASan in CI). */
#include <stdint.h>

#include "harness.h"
#include "kvprobe/kvprobe.h"

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void f32(buf *b, float v) { put(b, &v, 4); }
static void str(buf *b, const char *s) {
    u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void key(buf *b, const char *k, uint32_t type) {
    str(b, k);
    u32(b, type);
}

/* Offsets of interesting fields, recorded while building, for targeted corruption. */
typedef struct layout {
    size_t n_tensors_at, n_kv_at, strlen_at, arr_count_at, nested_type_at, tensor0_type_at, tensor0_ndims_at,
        tensor0_dim_at, tensor1_offset_at, data_at;
} layout;

/* A small valid GGUF v3: 7 keys (u32, f32, bool, string, string array, nested array, i8
 * array), tensors "a" F32 [4] and "b" Q8_0 [32, 2]. */
static buf build(layout *lo) {
    buf b = {0};
    u32(&b, 0x46554747u);
    u32(&b, 3);
    lo->n_tensors_at = b.n;
    u64(&b, 2);
    lo->n_kv_at = b.n;
    u64(&b, 7);
    key(&b, "general.architecture", GGUF_VT_STRING);
    lo->strlen_at = b.n;
    str(&b, "test");
    key(&b, "test.count", GGUF_VT_UINT32);
    u32(&b, 42);
    key(&b, "test.scale", GGUF_VT_FLOAT32);
    f32(&b, 0.5f);
    key(&b, "test.flag", GGUF_VT_BOOL);
    put(&b, "\x01", 1);
    key(&b, "test.words", GGUF_VT_ARRAY);
    u32(&b, GGUF_VT_STRING);
    lo->arr_count_at = b.n;
    u64(&b, 3);
    str(&b, "alpha");
    str(&b, "");
    str(&b, "gamma");
    key(&b, "test.nested", GGUF_VT_ARRAY);
    lo->nested_type_at = b.n;
    u32(&b, GGUF_VT_ARRAY);
    u64(&b, 2);
    u32(&b, GGUF_VT_INT32);
    u64(&b, 2);
    u32(&b, 7);
    u32(&b, (uint32_t)-7);
    u32(&b, GGUF_VT_INT32);
    u64(&b, 0);
    key(&b, "test.small", GGUF_VT_ARRAY);
    u32(&b, GGUF_VT_INT8);
    u64(&b, 3);
    put(&b, "\x01\xff\x7f", 3);
    /* tensor infos */
    str(&b, "a");
    lo->tensor0_ndims_at = b.n;
    u32(&b, 1);
    lo->tensor0_dim_at = b.n;
    u64(&b, 4);
    lo->tensor0_type_at = b.n;
    u32(&b, KVP_TYPE_F32);
    u64(&b, 0);
    str(&b, "b");
    u32(&b, 2);
    u64(&b, 32);
    u64(&b, 2);
    u32(&b, KVP_TYPE_Q8_0);
    lo->tensor1_offset_at = b.n;
    u64(&b, 32); /* after "a" (16 bytes) padded to 32 */
    while (b.n % 32) put(&b, "", 1);
    lo->data_at = b.n;
    float a[4] = {1, -2, 3.5f, 0};
    put(&b, a, sizeof a);
    uint8_t pad[16] = {0};
    put(&b, pad, 16);
    for (int blk = 0; blk < 2; blk++) {
        uint16_t d = 0x3c00; /* 1.0 */
        put(&b, &d, 2);
        for (int i = 0; i < 32; i++) {
            int8_t q = (int8_t)(i - 16 + blk);
            put(&b, &q, 1);
        }
    }
    return b;
}

static int parse_fails(const uint8_t *p, size_t n, int *code, char *msg, size_t cap) {
    kvp_error err = {0};
    gguf_file *f = gguf_parse_buffer(p, n, "t.gguf", &err);
    if (f) {
        gguf_close(f);
        return 0;
    }
    *code = err.code;
    snprintf(msg, cap, "%s", err.msg);
    return 1;
}

/* Patch a copy of the valid file and expect a failure whose message contains `want`. */
static void expect_corrupt(const buf *good, size_t at, const void *bytes, size_t n, const char *want, const char *what) {
    uint8_t *c = malloc(good->n);
    memcpy(c, good->p, good->n);
    memcpy(c + at, bytes, n);
    int code = 0;
    char msg[1024] = "";
    TEST(what) {
        CHECK(parse_fails(c, good->n, &code, msg, sizeof msg), "corrupt file parsed");
        CHECK(code == KVP_E_FORMAT || code == KVP_E_UNSUPPORTED, "code %d", code);
        CHECK(strstr(msg, want) != NULL, "message '%s' lacks '%s'", msg, want);
        CHECK(strstr(msg, "t.gguf") != NULL, "message '%s' lacks the file name", msg);
    }
    free(c);
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

int main(void) {
    layout lo;
    buf good = build(&lo);

    TEST("gguf: a valid v3 file parses with every value type") {
        kvp_error err = {0};
        gguf_file *f = gguf_parse_buffer(good.p, good.n, "t.gguf", &err);
        CHECK(f != NULL, "%s", err.msg);
        if (!f) continue;
        uint64_t u = 0;
        double d = 0;
        int flag = 0;
        gguf_str s;
        CHECK(f->version == 3 && f->n_kv == 7 && f->n_tensors == 2 && f->alignment == 32, "header");
        CHECK(gguf_get_u64(f, "test.count", &u, &err) == 0 && u == 42, "u32");
        CHECK(gguf_get_f64(f, "test.scale", &d, &err) == 0 && d == 0.5, "f32");
        CHECK(gguf_get_bool(f, "test.flag", &flag, &err) == 0 && flag == 1, "bool");
        CHECK(gguf_get_str(f, "general.architecture", &s, &err) == 0 && gguf_str_eq(s, "test"), "string");
        CHECK(gguf_get_u64(f, "missing", &u, &err) == 1, "absent key reports 1");
        CHECK(gguf_get_str(f, "test.count", &s, &err) == KVP_E_FORMAT && strstr(err.msg, "test.count"), "type mismatch");
        const gguf_kv *w = gguf_find_kv(f, "test.words");
        CHECK(w && w->value.v.arr.n == 3 && gguf_str_eq(w->value.v.arr.elems[2].v.s, "gamma") &&
                  w->value.v.arr.elems[1].v.s.len == 0, "string array");
        const gguf_kv *nk = gguf_find_kv(f, "test.nested");
        CHECK(nk && nk->value.v.arr.n == 2 && gguf_arr_i64(&nk->value.v.arr.elems[0], 1) == -7 &&
                  nk->value.v.arr.elems[1].v.arr.n == 0, "nested array");
        const gguf_kv *sm = gguf_find_kv(f, "test.small");
        CHECK(sm && gguf_arr_i64(&sm->value, 1) == -1 && gguf_arr_i64(&sm->value, 2) == 127, "i8 array");
        const gguf_tensor *a = gguf_find_tensor(f, "a"), *bq = gguf_find_tensor(f, "b");
        CHECK(a && a->type == KVP_TYPE_F32 && a->ne[0] == 4 && ((const float *)a->data)[2] == 3.5f, "tensor a");
        CHECK(bq && bq->type == KVP_TYPE_Q8_0 && bq->ne[1] == 2 && bq->nbytes == 68, "tensor b");
        float row[32];
        if (bq) kvp_dequantize_row(bq->type, (const uint8_t *)bq->data + 34, row, 32);
        CHECK(bq && row[0] == -15.0f && row[31] == 16.0f, "tensor b data");
        gguf_close(f);
    }

    TEST("gguf: every truncation fails cleanly with a format error") {
        int bad = 0;
        for (size_t n = 0; n < good.n; n++) {
            int code = 0;
            char msg[1024];
            uint8_t *c = malloc(n ? n : 1); /* exact-size copy so ASan sees any overread */
            memcpy(c, good.p, n);
            if (!parse_fails(c, n, &code, msg, sizeof msg) || code != KVP_E_FORMAT) {
                if (bad++ < 3) NOTE("length %zu: parsed=%d code=%d", n, !parse_fails(c, n, &code, msg, sizeof msg), code);
            }
            free(c);
        }
        CHECK(bad == 0, "%d truncations misbehaved", bad);
    }

    expect_corrupt(&good, 0, "GGUX", 4, "not a GGUF file", "gguf: bad magic");
    uint32_t v1 = 1, big_endian_v3 = 0x03000000u;
    expect_corrupt(&good, 4, &v1, 4, "unsupported GGUF version 1", "gguf: version 1 rejected");
    expect_corrupt(&good, 4, &big_endian_v3, 4, "byte-swapped", "gguf: big-endian file reported");
    uint64_t huge = UINT64_MAX / 2;
    expect_corrupt(&good, lo.n_tensors_at, &huge, 8, "tensor count", "gguf: absurd tensor count");
    expect_corrupt(&good, lo.n_kv_at, &huge, 8, "metadata count", "gguf: absurd metadata count");
    expect_corrupt(&good, lo.strlen_at, &huge, 8, "beyond end of file", "gguf: string length past EOF");
    expect_corrupt(&good, lo.arr_count_at, &huge, 8, "claims", "gguf: array count past EOF");
    uint32_t bad_vt = 77;
    expect_corrupt(&good, lo.nested_type_at, &bad_vt, 4, "invalid element type 77", "gguf: invalid array element type");
    uint32_t unknown_type = 4; /* retired Q4_2 */
    expect_corrupt(&good, lo.tensor0_type_at, &unknown_type, 4, "unknown or unsupported tensor type 4",
                   "gguf: unknown tensor type named");
    uint32_t internal_type = KVP_TYPE_Q4_K_LB; /* kvprobe's own layout, made at load, never read */
    expect_corrupt(&good, lo.tensor0_type_at, &internal_type, 4, "unknown or unsupported tensor type 60",
                   "gguf: kvprobe's internal types are refused in a file");
    uint32_t five_dims = 5;
    expect_corrupt(&good, lo.tensor0_ndims_at, &five_dims, 4, "5 dimensions", "gguf: too many dimensions");
    uint64_t many = 1000;
    expect_corrupt(&good, lo.tensor0_dim_at, &many, 8, "beyond the end of the file", "gguf: tensor data past EOF");
    uint64_t misaligned = 33;
    expect_corrupt(&good, lo.tensor1_offset_at, &misaligned, 8, "not a multiple of the alignment",
                   "gguf: misaligned tensor offset");

    TEST("gguf: random byte mutations never crash") {
        uint64_t seed = 0x1234567;
        int parsed = 0, failed = 0;
        for (int it = 0; it < 4000; it++) {
            uint8_t *c = malloc(good.n);
            memcpy(c, good.p, good.n);
            int flips = 1 + (int)(rng_next(&seed) % 4);
            for (int k = 0; k < flips; k++) c[rng_next(&seed) % good.n] = (uint8_t)rng_next(&seed);
            size_t n = rng_next(&seed) % 8 == 0 ? rng_next(&seed) % good.n : good.n;
            kvp_error err = {0};
            gguf_file *f = gguf_parse_buffer(c, n, "m.gguf", &err);
            if (f) {
                parsed++;
                /* touch every tensor byte: must be inside the buffer */
                uint64_t sum = 0;
                for (uint64_t t = 0; t < f->n_tensors; t++)
                    for (uint64_t i = 0; i < f->tensors[t].nbytes; i++) sum += ((const uint8_t *)f->tensors[t].data)[i];
                (void)sum;
                gguf_close(f);
            } else {
                failed++;
                CHECK(err.code == KVP_E_FORMAT || err.code == KVP_E_UNSUPPORTED || err.code == KVP_E_NOMEM, "code %d: %s",
                      err.code, err.msg);
            }
            free(c);
        }
        NOTE("4000 mutants: %d parsed, %d rejected", parsed, failed);
    }

    TEST("gguf: missing file and directory give I/O errors") {
        kvp_error err = {0};
        CHECK(gguf_open("tests/does-not-exist.gguf", &err) == NULL && err.code == KVP_E_IO, "missing file");
        CHECK(gguf_open("tests", &err) == NULL && err.code == KVP_E_IO, "directory");
    }

    TEST("model: unknown architecture and missing tensors are named") {
        kvp_error err = {0};
        gguf_file *f = gguf_parse_buffer(good.p, good.n, "t.gguf", &err);
        kvp_model *m = f ? kvp_model_from_gguf(f, &err) : NULL;
        CHECK(m == NULL && err.code == KVP_E_UNSUPPORTED && strstr(err.msg, "unknown architecture 'test'"), "%s", err.msg);
        kvp_model_free(m);
    }
    TEST("model: a missing tensor and a wrong shape are named") {
        FILE *fp = fopen("tests/fixtures/tiny-llama-f32.gguf", "rb");
        CHECK(fp != NULL, "fixture missing");
        if (!fp) continue;
        fseek(fp, 0, SEEK_END);
        long n = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        uint8_t *orig = malloc((size_t)n), *c = malloc((size_t)n);
        CHECK(fread(orig, 1, (size_t)n, fp) == (size_t)n, "read");
        fclose(fp);
        const char *name = "blk.2.ffn_up.weight";
        uint8_t *at = memmem(orig, (size_t)n, name, strlen(name));
        CHECK(at != NULL, "tensor name not found in fixture");
        if (at) {
            kvp_error err = {0};
            memcpy(c, orig, (size_t)n);
            c[at - orig + 10] = 'q'; /* blk.2.ffn_uq.weight */
            gguf_file *f = gguf_parse_buffer(c, (size_t)n, "tiny.gguf", &err);
            kvp_model *m = f ? kvp_model_from_gguf(f, &err) : NULL;
            CHECK(!m && err.code == KVP_E_FORMAT && strstr(err.msg, "missing tensor 'blk.2.ffn_up.weight'"), "%s", err.msg);
            kvp_model_free(m);
            /* The name is followed by n_dims (u32) and ne[0] (u64): make the row length 32. */
            memcpy(c, orig, (size_t)n);
            uint64_t ne0 = 32;
            memcpy(c + (at - orig) + strlen(name) + 4, &ne0, 8);
            f = gguf_parse_buffer(c, (size_t)n, "tiny.gguf", &err);
            m = f ? kvp_model_from_gguf(f, &err) : NULL;
            CHECK(!m && strstr(err.msg, "tensor 'blk.2.ffn_up.weight' has shape [32, 128"), "%s", err.msg);
            kvp_model_free(m);
        }
        free(orig);
        free(c);
    }
    free(good.p);
    return harness_finish();
}
