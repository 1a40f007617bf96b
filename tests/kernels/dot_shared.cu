// Dot product: per-block tree reduction in shared memory, then one atomicAdd per block.
#define MAX_BLOCK 32

__global__ void dot_shared(const int* a, const int* b, int* out, int n) {
    __shared__ int partial[MAX_BLOCK];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    partial[tid] = (i < n) ? a[i] * b[i] : 0;
    __syncthreads();
    for (int stride = 1; stride < blockDim.x; stride *= 2) {
        if (tid % (2 * stride) == 0 && tid + stride < blockDim.x)
            partial[tid] += partial[tid + stride];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, partial[0]);
}
