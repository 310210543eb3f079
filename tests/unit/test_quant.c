/* Tensor types against goldens from the gguf Python package (independent numpy
 * dequantizers): dequantization must be bit-exact, row dots within 1e-5 of sum|x*y|. */
#include <stdint.h>

#include "harness.h"
#include "kvprobe/kvprobe.h"

static const char *TYPES[] = {"f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1",
                              "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k"};

static void check_type(const char *name) {
    char path[256], title[64];
    snprintf(path, sizeof path, "tests/golden/quant/%s.gguf", name);
    snprintf(title, sizeof title, "quant %s: exact dequantization and dot", name);
    TEST(title) {
        kvp_error err = {0};
        gguf_file *f = gguf_open(path, &err);
        CHECK(f != NULL, "%s", err.msg);
        if (!f) continue;
        const gguf_tensor *q = gguf_find_tensor(f, "q"), *deq = gguf_find_tensor(f, "deq"), *y = gguf_find_tensor(f, "y");
        const gguf_kv *dot = gguf_find_kv(f, "ref.dot"), *absdot = gguf_find_kv(f, "ref.abs_dot");
        CHECK(q && deq && y && dot && absdot, "golden incomplete");
        if (!(q && deq && y && dot && absdot)) { gguf_close(f); continue; }
        int64_t cols = q->ne[0], rows = q->ne[1];
        CHECK(deq->type == KVP_TYPE_F32 && deq->ne[0] == cols && deq->ne[1] == rows, "deq shape");
        float *buf = malloc((size_t)cols * sizeof(float));
        size_t rb = kvp_row_bytes(q->type, cols);
        CHECK(rb * (size_t)rows == q->nbytes, "row bytes %zu x %lld != %llu", rb, (long long)rows,
              (unsigned long long)q->nbytes);
        int64_t mismatches = 0;
        double worst_dot = 0;
        for (int64_t r = 0; r < rows; r++) {
            const uint8_t *row = (const uint8_t *)q->data + r * rb;
            const float *ref = (const float *)deq->data + r * cols, *yr = (const float *)y->data + r * cols;
            kvp_dequantize_row(q->type, row, buf, cols);
            for (int64_t i = 0; i < cols; i++)
                if (memcmp(&buf[i], &ref[i], 4) != 0) {
                    if (mismatches < 3) NOTE("%s row %lld elem %lld: got %.9g want %.9g", name, (long long)r, (long long)i, buf[i], ref[i]);
                    mismatches++;
                }
            double want = gguf_arr_f64(&dot->value, (uint64_t)r), scale = gguf_arr_f64(&absdot->value, (uint64_t)r);
            double got = kvp_dot_row(q->type, row, yr, cols);
            double rel = fabs(got - want) / (scale > 0 ? scale : 1);
            if (rel > worst_dot) worst_dot = rel;
            /* Batched dot must equal the single-row dot bit for bit. */
            float two[2];
            float *ys = malloc((size_t)cols * 2 * sizeof(float));
            memcpy(ys, yr, (size_t)cols * sizeof(float));
            memcpy(ys + cols, yr, (size_t)cols * sizeof(float));
            kvp_dot_row_batch(q->type, row, ys, cols, 2, cols, two);
            CHECK(two[0] == (float)got && two[1] == (float)got, "batched dot differs: %g %g vs %g", two[0], two[1], got);
            free(ys);
        }
        CHECK(mismatches == 0, "%lld of %lld elements differ", (long long)mismatches, (long long)(rows * cols));
        CHECK(worst_dot <= 1e-5, "dot error %.3g of sum|x*y|", worst_dot);
        NOTE("%s: %lld elements bit-exact, worst dot error %.2g x sum|x*y|", name, (long long)(rows * cols), worst_dot);
        free(buf);
        gguf_close(f);
    }
}

int main(void) {
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++) check_type(TYPES[i]);

    TEST("fp16: every half converts to f32 and back unchanged") {
        int bad = 0;
        for (uint32_t h = 0; h < 65536; h++) {
            if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue; /* NaN payloads */
            if (kvp_f32_to_fp16(kvp_fp16_to_f32((uint16_t)h)) != h) bad++;
        }
        CHECK(bad == 0, "%d halves do not round-trip", bad);
    }
    TEST("fp16: f32 -> f16 rounds to nearest even, saturates to inf") {
        CHECK(kvp_f32_to_fp16(1.0f) == 0x3c00, "1.0");
        CHECK(kvp_f32_to_fp16(65504.0f) == 0x7bff, "max");
        CHECK(kvp_f32_to_fp16(65520.0f) == 0x7c00, "overflow rounds to inf");
        CHECK(kvp_f32_to_fp16(1.0f + 1.0f / 2048) == 0x3c00, "tie to even (down)");
        CHECK(kvp_f32_to_fp16(1.0f + 3.0f / 2048) == 0x3c02, "tie to even (up)");
        CHECK(kvp_f32_to_fp16(5.9604645e-8f) == 0x0001, "smallest subnormal");
        CHECK(kvp_f32_to_fp16(2.9802322e-8f) == 0x0000, "half of smallest subnormal ties to 0");
        CHECK(kvp_f32_to_fp16(-0.0f) == 0x8000, "negative zero");
    }
    TEST("type table: known ids, sizes, unknown ids rejected") {
        CHECK(kvp_type_get(KVP_TYPE_Q4_K)->block_bytes == 144, "Q4_K block");
        CHECK(kvp_type_get(KVP_TYPE_Q6_K)->block_bytes == 210, "Q6_K block");
        CHECK(kvp_type_get(4) == NULL && kvp_type_get(5) == NULL, "retired ids");
        CHECK(kvp_type_get(1000) == NULL, "out of range");
        CHECK(!strcmp(kvp_type_name(999), "unknown"), "unknown name");
    }
    return harness_finish();
}
