// Exclusive scan of each block's slice, plus the block's total.
__global__ void exclusive_scan(const int* in, int* out, int* totals, int n) {
    __shared__ int buf[33];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    buf[tid + 1] = i < n ? in[i] : 0;
    if (tid == 0) buf[0] = 0;
    __syncthreads();
    for (int d = 1; d <= blockDim.x; d *= 2) {
        int add = tid + 1 > d ? buf[tid + 1 - d] : 0;
        __syncthreads();
        buf[tid + 1] += add;
        __syncthreads();
    }
    if (i < n) out[i] = buf[tid];
    if (tid == blockDim.x - 1) totals[blockIdx.x] = buf[tid + 1];
}
