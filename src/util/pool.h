/* A persistent thread pool: n-1 workers plus the calling thread run task indices
 * [0, n_tasks) of one job at a time. No threads are created per call. */
#ifndef KVPROBE_POOL_H
#define KVPROBE_POOL_H

typedef void (*kvp_task_fn)(void *arg, int task, int thread);

typedef struct kvp_pool kvp_pool;

kvp_pool *kvp_pool_new(int n_threads); /* n_threads >= 1 */
void kvp_pool_free(kvp_pool *p);
int kvp_pool_size(const kvp_pool *p);
/* Run fn(arg, task, thread) for every task in [0, n_tasks); returns when all are done.
 * thread is in [0, size) and identifies per-thread scratch. */
void kvp_pool_run(kvp_pool *p, kvp_task_fn fn, void *arg, int n_tasks);

#endif
