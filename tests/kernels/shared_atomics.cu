// Per-block maximum through an atomicCAS loop on shared memory, and a block sum through shared atomicAdd.
__device__ void cas_max(int* addr, int v) {
    int old = *addr;
    while (old < v) {
        int seen = atomicCAS(addr, old, v);
        if (seen == old) break;
        old = seen;
    }
}

__global__ void block_stats(const int* in, int* block_max, int* block_sum, int n) {
    __shared__ int mx, sum;
    if (threadIdx.x == 0) {
        mx = -2147483647 - 1;
        sum = 0;
    }
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        cas_max(&mx, in[i]);
        atomicAdd(&sum, in[i]);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        block_max[blockIdx.x] = mx;
        block_sum[blockIdx.x] = sum;
    }
}
