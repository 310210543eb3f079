/* A STREAM-like read-bandwidth probe: T threads each sum their share of a buffer much larger
 * than the last-level cache; best of R passes. Prints "read_gbps=X" (1e9 bytes per second).
 *
 *   bandwidth [MIB] [THREADS] [PASSES]     (defaults 1024 1 5)
 *
 * The buffer is anonymous memory (transparent huge pages where the kernel gives them), read
 * with 32-byte loads into independent accumulators so the loop is never compute-bound. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct part {
    const uint64_t *p;
    size_t n; /* uint64 words */
    uint64_t sum;
} part;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *reader(void *arg) {
    part *pt = arg;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (size_t i = 0; i + 8 <= pt->n; i += 8) {
        a0 += pt->p[i], a1 += pt->p[i + 1], a2 += pt->p[i + 2], a3 += pt->p[i + 3];
        a4 += pt->p[i + 4], a5 += pt->p[i + 5], a6 += pt->p[i + 6], a7 += pt->p[i + 7];
    }
    pt->sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    return NULL;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
    int threads = argc > 2 ? atoi(argv[2]) : 1, passes = argc > 3 ? atoi(argv[3]) : 5;
    if (mib < 1 || threads < 1 || threads > 256 || passes < 1) {
        fprintf(stderr, "usage: bandwidth [MIB >= 1] [THREADS 1..256] [PASSES >= 1]\n");
        return 1;
    }
    size_t bytes = mib << 20, words = bytes / 8;
    uint64_t *buf = aligned_alloc(2 << 20, bytes);
    if (!buf) {
        fprintf(stderr, "bandwidth: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < words; i++) buf[i] = i; /* touch every page */
    double best = 1e30;
    uint64_t check = 0;
    for (int r = 0; r < passes; r++) {
        pthread_t th[256];
        part pt[256];
        double t0 = now_s();
        for (int t = 0; t < threads; t++) {
            size_t lo = words / threads * t, hi = t + 1 == threads ? words : words / threads * (t + 1);
            pt[t] = (part){buf + lo, hi - lo, 0};
            pthread_create(&th[t], NULL, reader, &pt[t]);
        }
        for (int t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            check += pt[t].sum;
        }
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    printf("read_gbps=%.2f mib=%zu threads=%d checksum=%llu\n", bytes / best * 1e-9, mib, threads,
           (unsigned long long)(check & 0xffff));
    free(buf);
    return 0;
}
