// A spin lock around a critical section (a common forum answer). Lanes of one warp contend.
__global__ void locked_sum(int *lock, int *total, int *order, const int *v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    bool done = false;
    while (!done) {
        if (atomicCAS(lock, 0, 1) == 0) {
            int t = *total;
            *total = t + v[i];
            order[i] = atomicAdd(&order[n], 1);
            __threadfence();
            atomicExch(lock, 0);
            done = true;
        }
    }
}

// The naive form: spin until acquired, then the critical section (deadlocks on pre-Volta SIMT).
__global__ void naive_lock(int *lock, int *total, const int *v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    while (atomicCAS(lock, 0, 1) != 0) { }
    *total += v[i];
    __threadfence();
    atomicExch(lock, 0);
}
