// Waiting for another warp of the CTA (hung at the step limit until warps were preempted at loop back edges).

// The brief's minimal case: thread 4 (warp 1) raises a shared flag that thread 0 (warp 0) waits for.
__global__ void shared_flag(int *out)
{
    __shared__ volatile int flag;
    __shared__ volatile int payload;
    if (threadIdx.x == 0) flag = 0;
    __syncthreads();
    if (threadIdx.x == 4) { payload = 7; flag = 1; }
    if (threadIdx.x == 0) {
        while (flag == 0) { }
        out[0] = payload + 1;
    }
}

// A flag in global memory, set by the CTA's last thread after its payload.
__global__ void global_flag(volatile int *flag, int *out)
{
    if (threadIdx.x == 0) {
        while (flag[0] == 0) { }
        out[0] = flag[1];
    } else if (threadIdx.x == blockDim.x - 1) {
        flag[1] = 42;
        __threadfence();
        flag[0] = 1;
    }
}

// Warps take turns in REVERSE order: warp w waits until turn == (number of warps - 1 - w).
__global__ void warp_chain(volatile int *turn, int *order)
{
    int w = threadIdx.x / warpSize, nw = blockDim.x / warpSize;
    if (threadIdx.x % warpSize == 0) {
        while (turn[0] != nw - 1 - w) { }
        order[w] = turn[1];
        turn[1] = turn[1] + 1;
        turn[0] = turn[0] + 1;
    }
}

// A lock taken by ONE lane per warp (lane 0 adds its warp's elements, in a loop, while holding it):
// what works on a machine without independent thread scheduling.
__global__ void warp_lock_sum(int *lock, int *total, const int *v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x % warpSize == 0) {
        while (atomicCAS(lock, 0, 1) != 0) { }
        for (int k = i; k < i + warpSize && k < n; ++k) {
            int t = *(volatile int *)total;
            *(volatile int *)total = t + v[k];
        }
        __threadfence();
        atomicExch(lock, 0);
    }
}
