// Inclusive prefix sum (cumsum) in ONE CTA: each thread scans a contiguous chunk, thread 0 scans the
// chunk totals in shared memory (at most 32: cheaper than a tree here, where a warp step is the cost),
// and each thread adds the total of the chunks before its own.
__global__ void calc_cumsum(const int* in, int* out, int n) {
    __shared__ unsigned offset[32];
    int t = threadIdx.x;
    int chunk = (n + blockDim.x - 1) / blockDim.x;
    int lo = min(t * chunk, n);
    int hi = min(lo + chunk, n);
    unsigned s = 0;                                   // unsigned: wraps as int32
    for (int i = lo; i < hi; ++i) {
        s += (unsigned)in[i];
        out[i] = (int)s;
    }
    offset[t] = s;
    __syncthreads();
    if (t == 0) {
        unsigned acc = 0;
        for (int j = 0; j < blockDim.x; ++j) {
            unsigned v = offset[j];
            offset[j] = acc;
            acc += v;
        }
    }
    __syncthreads();
    unsigned before = offset[t];
    for (int i = lo; i < hi; ++i) out[i] = (int)((unsigned)out[i] + before);
}
