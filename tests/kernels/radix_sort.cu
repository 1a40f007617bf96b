// Block-local LSD radix sort on the low `bits` bits (stable), one bit per pass: each pass computes
// an exclusive scan of the zero flags in shared memory and scatters the keys into a second buffer.
#define MAXB 32

__device__ int block_exclusive_scan(int* tmp, int v) {
    int t = threadIdx.x;
    tmp[t] = v;
    __syncthreads();
    for (int d = 1; d < blockDim.x; d *= 2) {
        int add = t >= d ? tmp[t - d] : 0;
        __syncthreads();
        tmp[t] += add;
        __syncthreads();
    }
    int inclusive = tmp[t];
    __syncthreads();
    return inclusive - v;
}

__global__ void radix_sort(unsigned* keys, int bits) {
    __shared__ unsigned buf[2][MAXB];
    __shared__ int tmp[MAXB];
    __shared__ int zeros_total;
    int t = threadIdx.x, base = blockIdx.x * blockDim.x;
    int cur = 0;
    buf[0][t] = keys[base + t];
    __syncthreads();
    for (int b = 0; b < bits; ++b) {
        unsigned key = buf[cur][t];
        int is_zero = ((key >> b) & 1) == 0;
        int before = block_exclusive_scan(tmp, is_zero);
        if (t == blockDim.x - 1) zeros_total = before + is_zero;
        __syncthreads();
        int dst = is_zero ? before : zeros_total + (t - before);
        buf[cur ^ 1][dst] = key;
        cur ^= 1;
        __syncthreads();
    }
    keys[base + t] = buf[cur][t];
}
