// The "last block" reduction (CUDA's threadFenceReduction sample): each block stores its partial
// sum, and the block that finishes last, found with an atomic ticket, adds up all the partials.
__device__ unsigned blocks_done = 0;

__global__ void sum_last_block(const int* in, int* partial, int* total, int n) {
    __shared__ int s[32];
    __shared__ bool is_last;
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? in[i] : 0;
    __syncthreads();
    if (t == 0) {
        int sum = 0;
        for (int k = 0; k < blockDim.x; ++k) sum += s[k];
        partial[blockIdx.x] = sum;
        __threadfence();
        unsigned ticket = atomicInc(&blocks_done, gridDim.x);
        is_last = ticket == gridDim.x - 1;
    }
    __syncthreads();
    if (is_last && t == 0) {
        int sum = 0;
        for (int b = 0; b < gridDim.x; ++b) sum += partial[b];
        *total = sum;
        blocks_done = 0;
    }
}
