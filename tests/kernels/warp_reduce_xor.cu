// Butterfly warp reduction with __shfl_xor_sync: every lane ends with the warp's max and sum.
__global__ void warp_allreduce(const int* in, int* sums, int* maxs, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? in[i] : 0;
    int s = v, m = v;
    for (int mask = 1; mask < warpSize; mask <<= 1) {
        s += __shfl_xor_sync(0xffffffff, s, mask);
        m = max(m, __shfl_xor_sync(0xffffffff, m, mask));
    }
    if (i < n) {
        sums[i] = s;
        maxs[i] = m;
    }
}
