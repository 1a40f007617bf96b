// Inclusive scan of each block's slice: Hillis-Steele in shared memory.
__global__ void block_scan(const int* in, int* out, int n) {
    __shared__ int buf[32];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    buf[tid] = i < n ? in[i] : 0;
    __syncthreads();
    for (int d = 1; d < blockDim.x; d <<= 1) {
        int add = tid >= d ? buf[tid - d] : 0;
        __syncthreads();
        buf[tid] += add;
        __syncthreads();
    }
    if (i < n) out[i] = buf[tid];
}
