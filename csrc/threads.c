/* Thread count and a fork-join parallel-for over pthreads.
 *
 * Threads are created per call and joined before it returns: no pool to leak, fork-safe, and the cost
 * (tens of microseconds) is small next to the products it splits, which read megabytes of weights.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "qgpu_core.h"

enum { MAX_THREADS = 256 };
/* Below this much work per thread (about one multiply-add per unit, ~0.1 ms) starting a thread (~20 us)
 * costs more than it saves. */
static const size_t MIN_WORK_PER_THREAD = 1u << 20;

static int threads_override = 0;

static int default_threads(void) {
    const char *env = getenv("QGPU_THREADS");
    if (env && *env) {
        int n = atoi(env);
        if (n > 0) return n < MAX_THREADS ? n : MAX_THREADS;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1) return 1;
    return cpus < MAX_THREADS ? (int)cpus : MAX_THREADS;
}

/* Read once: sysconf reads /sys on every call, which costs microseconds per kernel call. */
static int threads_default = 0;

int qgpu_get_threads(void) {
    if (threads_override > 0) return threads_override;
    if (threads_default == 0) threads_default = default_threads();
    return threads_default;
}

void qgpu_set_threads(int n) { threads_override = n > 0 ? (n < MAX_THREADS ? n : MAX_THREADS) : 0; }

/* Work is handed out in chunks from a shared counter rather than split evenly up front: on a machine
 * whose cores are shared, a thread that is descheduled for a while then does less, instead of making
 * every other thread wait for its fixed share. */
enum { CHUNKS_PER_THREAD = 8 };

typedef struct {
    qgpu_range_fn fn;
    void *ctx;
    size_t n, chunk, next;
} shared_work;

static void *worker(void *arg) {
    shared_work *w = (shared_work *)arg;
    for (;;) {
        size_t begin = __atomic_fetch_add(&w->next, w->chunk, __ATOMIC_RELAXED);
        if (begin >= w->n) return NULL;
        w->fn(w->ctx, begin, begin + w->chunk < w->n ? begin + w->chunk : w->n);
    }
}

void qgpu_parallel_for(size_t n, size_t grain, size_t work, qgpu_range_fn fn, void *ctx) {
    if (n == 0) return;
    if (grain == 0) grain = 1;
    size_t grains = (n + grain - 1) / grain;
    size_t nt = (size_t)qgpu_get_threads();
    if (nt > grains) nt = grains;
    if (nt > 1 && work / nt < MIN_WORK_PER_THREAD) nt = work / MIN_WORK_PER_THREAD;
    if (nt <= 1) {
        fn(ctx, 0, n);
        return;
    }
    size_t chunk_grains = grains / (nt * CHUNKS_PER_THREAD);
    shared_work w = {fn, ctx, n, (chunk_grains ? chunk_grains : 1) * grain, 0};
    pthread_t tids[MAX_THREADS];
    int started[MAX_THREADS];
    /* The calling thread works too; if a thread cannot be created, the others take its chunks. */
    for (size_t t = 1; t < nt; t++) started[t] = pthread_create(&tids[t], NULL, worker, &w) == 0;
    worker(&w);
    for (size_t t = 1; t < nt; t++)
        if (started[t]) pthread_join(tids[t], NULL);
}
