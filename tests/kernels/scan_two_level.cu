// Block-wide inclusive scan in two levels: warp shuffles, then the warp totals in shared memory.
__device__ int warp_inclusive(int v) {
    int lane = threadIdx.x % warpSize;
    for (int d = 1; d < warpSize; d <<= 1) {
        int t = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v += t;
    }
    return v;
}

__global__ void scan_two_level(const int* in, int* out, int n) {
    __shared__ int warp_total[8];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int warp = threadIdx.x / warpSize;
    int v = warp_inclusive(i < n ? in[i] : 0);
    if (threadIdx.x % warpSize == warpSize - 1) warp_total[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        int nwarps = blockDim.x / warpSize;
        for (int w = 1; w < nwarps; ++w) warp_total[w] += warp_total[w - 1];
    }
    __syncthreads();
    if (warp > 0) v += warp_total[warp - 1];
    if (i < n) out[i] = v;
}
