// Inclusive prefix sum (cumsum) in place, in ONE CTA: thread t scans the chunk [t * chunk, (t + 1) * chunk) of
// the list, thread 0 turns the chunk totals into offsets in shared memory (a serial pass over at most
// 32 totals: fewer warp steps than a tree), and each thread adds the offset of its chunk. The host picks
// chunk with the launch shape (blockDim.x * chunk >= n), which spares the kernel a division (a loop here).
__global__ void calc_cumsum(int* data, int n, int chunk) {
    __shared__ unsigned offset[32];
    int t = threadIdx.x;
    int lo = t * chunk;
    int hi = min(lo + chunk, n);
    unsigned s = 0;                                   // unsigned: wraps as int32
    #pragma unroll 1      // unrolled loops only lengthen the program (ROM and prompt tokens)
    for (int i = lo; i < hi; ++i) {
        s += (unsigned)data[i];
        data[i] = (int)s;
    }
    offset[t] = s;
    __syncthreads();
    if (t == 0) {
        unsigned acc = 0;
        #pragma unroll 1
        for (int j = 0; j < blockDim.x; ++j) {
            unsigned v = offset[j];
            offset[j] = acc;
            acc += v;
        }
    }
    __syncthreads();
    unsigned before = offset[t];
    #pragma unroll 1
    for (int i = lo; i < hi; ++i) data[i] = (int)((unsigned)data[i] + before);
}
