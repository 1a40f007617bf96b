// Block maximum: sequential-addressing halving reduction (block size a power of two).
__global__ void reduce_max(const int* in, int* block_max, int n) {
    __shared__ int s[32];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    s[tid] = i < n ? in[i] : -2147483647 - 1;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half >>= 1) {
        if (tid < half) s[tid] = max(s[tid], s[tid + half]);
        __syncthreads();
    }
    if (tid == 0) block_max[blockIdx.x] = s[0];
}
