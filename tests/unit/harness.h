/* Minimal test harness: each CHECK is one counted assertion; TEST blocks group them.
 * Output is TAP-like ("ok N - name" / "not ok N - name"); tests/run.sh totals the counts. */
#ifndef KVPROBE_HARNESS_H
#define KVPROBE_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct harness {
    int passed, failed;
    const char *test;  /* current test name */
    int test_failed;
} harness;

static harness H;

#define TEST(name) for (int _once = (H.test = (name), H.test_failed = 0, 1); _once; _once = 0, test_end())

static void test_end(void) {
    if (H.test_failed) {
        H.failed++;
        printf("not ok - %s\n", H.test);
    } else {
        H.passed++;
        printf("ok - %s\n", H.test);
    }
    fflush(stdout);
}

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            H.test_failed = 1;                                                           \
            printf("#   %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);          \
            printf(__VA_ARGS__);                                                         \
            printf("\n");                                                                \
        }                                                                                \
    } while (0)

#define NOTE(...) (printf("# "), printf(__VA_ARGS__), printf("\n"))

static int harness_finish(void) {
    printf("# subtotal: %d ok, %d not ok\n", H.passed, H.failed);
    return H.failed ? 1 : 0;
}

/* KVP_TEST_QUICK=1 (set by make sanitize and make check-isa, where every kernel runs 5-40x
 * slower): the real-model tests check the same properties on fewer examples and steps. make
 * test runs them at full size. */
static inline int test_quick(void) {
    const char *q = getenv("KVP_TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

/* Path of a test data file relative to the repo root (tests run from there). */
static inline int file_exists(const char *p) {
    FILE *f = fopen(p, "rb");
    if (f) fclose(f);
    return f != NULL;
}

#endif
