// Block sum: interleaved tree reduction in shared memory; works for any block size.
__global__ void reduce_sum(const int* in, int* block_sums, int n) {
    __shared__ int s[32];
    unsigned tid = threadIdx.x;
    unsigned i = blockIdx.x * blockDim.x + tid;
    s[tid] = i < n ? in[i] : 0;
    __syncthreads();
    for (unsigned stride = 1; stride < blockDim.x; stride <<= 1) {
        if (tid % (2 * stride) == 0 && tid + stride < blockDim.x) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid == 0) block_sums[blockIdx.x] = s[0];
}
