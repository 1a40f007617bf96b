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
/* Below this much work (about one multiply-add per unit) a second thread costs more than it saves. */
static const size_t MIN_WORK_PER_THREAD = 1u << 15;

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

int qgpu_get_threads(void) { return threads_override > 0 ? threads_override : default_threads(); }

void qgpu_set_threads(int n) { threads_override = n > 0 ? (n < MAX_THREADS ? n : MAX_THREADS) : 0; }

typedef struct {
    qgpu_range_fn fn;
    void *ctx;
    size_t begin, end;
} range_job;

static void *run_job(void *arg) {
    range_job *job = (range_job *)arg;
    job->fn(job->ctx, job->begin, job->end);
    return NULL;
}

void qgpu_parallel_for(size_t n, size_t grain, size_t work, qgpu_range_fn fn, void *ctx) {
    if (n == 0) return;
    if (grain == 0) grain = 1;
    size_t chunks = (n + grain - 1) / grain;
    size_t nt = (size_t)qgpu_get_threads();
    if (nt > chunks) nt = chunks;
    if (nt > 1 && work / nt < MIN_WORK_PER_THREAD) nt = work / MIN_WORK_PER_THREAD;
    if (nt <= 1) {
        fn(ctx, 0, n);
        return;
    }
    range_job jobs[MAX_THREADS];
    pthread_t tids[MAX_THREADS];
    int started[MAX_THREADS];
    for (size_t t = 0; t < nt; t++) {
        jobs[t].fn = fn;
        jobs[t].ctx = ctx;
        jobs[t].begin = (chunks * t / nt) * grain;
        jobs[t].end = t + 1 == nt ? n : (chunks * (t + 1) / nt) * grain;
    }
    /* Thread 0's range runs on the calling thread; a range whose thread cannot start runs here too. */
    for (size_t t = 1; t < nt; t++) started[t] = pthread_create(&tids[t], NULL, run_job, &jobs[t]) == 0;
    run_job(&jobs[0]);
    for (size_t t = 1; t < nt; t++) {
        if (started[t]) pthread_join(tids[t], NULL);
        else run_job(&jobs[t]);
    }
}
