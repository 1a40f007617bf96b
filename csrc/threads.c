/* Thread count and a parallel-for over a persistent pool of pthreads.
 *
 * Decode calls ~190 small products per token, so threads are started once (lazily, at the first parallel
 * call) and then reused: a call posts a job, wakes the workers and works on it itself. The pool grows when
 * set_threads asks for more; it is joined at exit and forgotten in a forked child (which starts its own).
 *
 * Work is handed out in chunks from a shared counter, so on a machine whose cores are shared a descheduled
 * worker delays nobody: the caller never waits for a worker that has not joined the job yet. It closes the
 * job when the chunks run out and waits only for workers still inside a chunk; a late worker finds the job
 * closed and goes back to sleep without touching it.
 *
 * Idle workers and a caller waiting for a worker spin briefly before sleeping on a condition variable:
 * the products of one layer follow each other within microseconds, and a futex wake costs more than that.
 *
 * Thread safety: one job runs at a time. A call made while another Python thread's job holds the pool (cffi
 * releases the GIL) runs on its own thread instead of waiting, so concurrent callers are safe, only slower.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "qgpu_core.h"

enum { MAX_THREADS = 256 };
/* Below this much work per thread (about one multiply-add per unit, ~10 us) waking a worker costs more
 * than it saves. */
static const size_t MIN_WORK_PER_THREAD = 1u << 17;
/* How long an idle worker, or a caller waiting for a worker's last chunk, spins before sleeping. */
static const long SPIN_NS = 50000;

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

/* About this many chunks per thread: small enough that a late thread's share is taken by the others. */
enum { CHUNKS_PER_THREAD = 8 };

/* ---- the pool; every field below is guarded by `mu` unless it is accessed atomically ---- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER; /* a job was posted, or stop */
static pthread_cond_t idle = PTHREAD_COND_INITIALIZER; /* the last worker left the job */
static pthread_t workers[MAX_THREADS];
static int n_workers = 0;
static int hooks_installed = 0;
static int stopping = 0;
static int busy = 0;               /* atomic: a caller owns the pool */
static unsigned long generation = 0; /* atomic: bumped when a job is posted */

static struct {
    qgpu_range_fn fn;
    void *ctx;
    size_t n, chunk;
    size_t next;   /* atomic: the next unclaimed index */
    int open;      /* workers may still join */
    int inside;    /* atomic (changed under mu): workers that joined and have not left */
    int seats;     /* workers that may still join (the job's thread count - 1) */
} job;

static void run_chunks(void) {
    for (;;) {
        size_t begin = __atomic_fetch_add(&job.next, job.chunk, __ATOMIC_RELAXED);
        if (begin >= job.n) return;
        job.fn(job.ctx, begin, begin + job.chunk < job.n ? begin + job.chunk : job.n);
    }
}

static long elapsed_ns(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000000000L + (t.tv_nsec - t0->tv_nsec);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spin until *p != value or SPIN_NS pass; returns whether it changed. */
static int spin_while_equal(const unsigned long *p, unsigned long value) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 1;; i++) {
        if (__atomic_load_n(p, __ATOMIC_ACQUIRE) != value) return 1;
        cpu_relax();
        if (i % 256 == 0 && elapsed_ns(&t0) > SPIN_NS) return 0;
    }
}

static void *worker_main(void *arg) {
    unsigned long seen = (unsigned long)(size_t)arg;
    for (;;) {
        spin_while_equal(&generation, seen);
        pthread_mutex_lock(&mu);
        while (generation == seen && !stopping) pthread_cond_wait(&wake, &mu);
        if (stopping) {
            pthread_mutex_unlock(&mu);
            return NULL;
        }
        seen = generation;
        int joined = job.open && job.seats > 0;
        if (joined) {
            job.seats--;
            __atomic_add_fetch(&job.inside, 1, __ATOMIC_RELAXED);
        }
        pthread_mutex_unlock(&mu);
        if (!joined) continue;
        run_chunks();
        pthread_mutex_lock(&mu);
        if (__atomic_sub_fetch(&job.inside, 1, __ATOMIC_RELEASE) == 0) pthread_cond_signal(&idle);
        pthread_mutex_unlock(&mu);
    }
}

static void stop_pool(void) {
    pthread_mutex_lock(&mu);
    stopping = 1;
    pthread_cond_broadcast(&wake);
    int n = n_workers;
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < n; i++) pthread_join(workers[i], NULL);
    n_workers = 0;
}

/* In a forked child only the forking thread exists: forget the parent's workers and start afresh. */
static void forget_pool_in_child(void) {
    pthread_mutex_init(&mu, NULL);
    pthread_cond_init(&wake, NULL);
    pthread_cond_init(&idle, NULL);
    n_workers = 0;
    stopping = 0;
    busy = 0;
}

/* Called with `mu` held; returns the number of workers running (may be fewer if creation fails). */
static int grow_pool(int wanted) {
    if (!hooks_installed) {
        hooks_installed = 1;
        atexit(stop_pool);
        pthread_atfork(NULL, NULL, forget_pool_in_child);
    }
    while (n_workers < wanted) {
        void *seen = (void *)(size_t)generation;
        if (pthread_create(&workers[n_workers], NULL, worker_main, seen) != 0) break;
        n_workers++;
    }
    return n_workers;
}

void qgpu_parallel_for(size_t n, size_t grain, size_t work, qgpu_range_fn fn, void *ctx) {
    if (n == 0) return;
    if (grain == 0) grain = 1;
    size_t grains = (n + grain - 1) / grain;
    size_t nt = (size_t)qgpu_get_threads();
    if (nt > grains) nt = grains;
    if (nt > 1 && work / nt < MIN_WORK_PER_THREAD) nt = work / MIN_WORK_PER_THREAD;
    int expected = 0;
    if (nt <= 1 || !__atomic_compare_exchange_n(&busy, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        fn(ctx, 0, n); /* too small to split, or another thread holds the pool */
        return;
    }
    size_t chunk_grains = grains / (nt * CHUNKS_PER_THREAD);
    pthread_mutex_lock(&mu);
    int helpers = grow_pool((int)nt - 1);
    job.fn = fn;
    job.ctx = ctx;
    job.n = n;
    job.chunk = (chunk_grains ? chunk_grains : 1) * grain;
    job.next = 0;
    job.open = 1;
    __atomic_store_n(&job.inside, 0, __ATOMIC_RELAXED);
    job.seats = helpers < (int)nt - 1 ? helpers : (int)nt - 1;
    __atomic_add_fetch(&generation, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&mu);

    run_chunks();

    /* Close the job so late workers skip it, then wait for those still inside a chunk. */
    pthread_mutex_lock(&mu);
    job.open = 0;
    if (__atomic_load_n(&job.inside, __ATOMIC_RELAXED) > 0) {
        pthread_mutex_unlock(&mu);
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 1; __atomic_load_n(&job.inside, __ATOMIC_ACQUIRE) > 0; i++) {
            cpu_relax();
            if (i % 256 == 0 && elapsed_ns(&t0) > SPIN_NS) break;
        }
        pthread_mutex_lock(&mu);
        while (__atomic_load_n(&job.inside, __ATOMIC_RELAXED) > 0) pthread_cond_wait(&idle, &mu);
    }
    pthread_mutex_unlock(&mu);
    __atomic_store_n(&busy, 0, __ATOMIC_RELEASE);
}
