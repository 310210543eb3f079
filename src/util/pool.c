/* Persistent thread pool. Within a job, tasks are claimed with an atomic counter so uneven
 * tasks balance themselves. A forward pass runs hundreds of short jobs per token, so waking
 * workers through a condition variable each time would cost more than many of the jobs:
 * workers and the caller spin briefly (POOL_SPIN_NS) on the job counter before sleeping. */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define POOL_SPIN_NS 200000L /* 0.2 ms: longer than the gaps inside a pass, short when idle */

struct kvp_pool {
    int n_threads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    /* Job state: fn/arg/n_tasks are written before generation is bumped and read after a
     * worker sees the new generation (seq_cst atomics order them). */
    kvp_task_fn fn;
    void *arg;
    int n_tasks;
    atomic_int next;
    atomic_ulong generation; /* bumped per job */
    atomic_int busy;         /* workers still inside the current job */
    atomic_int sleepers;     /* workers blocked on `wake` */
    atomic_int stopping;
};

typedef struct worker_arg {
    kvp_pool *pool;
    int id;
} worker_arg;

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static int job_posted(kvp_pool *p, unsigned long seen) {
    return atomic_load(&p->generation) != seen || atomic_load(&p->stopping);
}

static int job_done(kvp_pool *p, unsigned long unused) {
    (void)unused;
    return atomic_load(&p->busy) == 0;
}

/* Spin until cond(p, arg) holds or POOL_SPIN_NS pass; returns whether it holds. */
static int spin_until(kvp_pool *p, int (*cond)(kvp_pool *, unsigned long), unsigned long arg) {
    long t0 = 0;
    for (unsigned i = 1;; i++) {
        if (cond(p, arg)) return 1;
        cpu_relax();
        if ((i & 255) == 0) {
            long t = now_ns();
            if (!t0) t0 = t;
            else if (t - t0 > POOL_SPIN_NS) return cond(p, arg);
        }
    }
}

static void run_tasks(kvp_pool *p, int thread) {
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= p->n_tasks) break;
        p->fn(p->arg, t, thread);
    }
}

static void *worker_main(void *a) {
    worker_arg *wa = a;
    kvp_pool *p = wa->pool;
    int id = wa->id;
    free(wa);
    unsigned long seen = 0;
    for (;;) {
        if (!spin_until(p, job_posted, seen)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (!job_posted(p, seen)) pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stopping)) break;
        seen = atomic_load(&p->generation);
        run_tasks(p, id);
        if (atomic_fetch_sub(&p->busy, 1) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

kvp_pool *kvp_pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    kvp_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) {
        kvp_pool_free(p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            kvp_pool_free(p);
            return NULL;
        }
        wa->pool = p;
        wa->id = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            kvp_pool_free(p);
            return NULL;
        }
        p->n_threads = i + 1;
    }
    return p;
}

void kvp_pool_free(kvp_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stopping, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

int kvp_pool_size(const kvp_pool *p) { return p->n_threads; }

void kvp_pool_run(kvp_pool *p, kvp_task_fn fn, void *arg, int n_tasks) {
    if (n_tasks <= 0) return;
    if (p->n_threads == 1 || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store(&p->next, 0);
    atomic_store(&p->busy, p->n_threads - 1);
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    run_tasks(p, 0);
    if (!spin_until(p, job_done, 0)) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->busy) > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
