// Prefix sum of the whole array by one block: scans blockDim-sized chunks, carrying the running total.
__global__ void prefix_sum(const int* in, int* out, int n) {
    __shared__ int buf[32];
    __shared__ int carry;
    int t = threadIdx.x;
    if (t == 0) carry = 0;
    __syncthreads();
    for (int base = 0; base < n; base += blockDim.x) {
        int i = base + t;
        buf[t] = i < n ? in[i] : 0;
        __syncthreads();
        for (int d = 1; d < blockDim.x; d *= 2) {
            int add = t >= d ? buf[t - d] : 0;
            __syncthreads();
            buf[t] += add;
            __syncthreads();
        }
        if (i < n) out[i] = buf[t] + carry;
        __syncthreads();
        if (t == blockDim.x - 1) carry += buf[t];
        __syncthreads();
    }
}
