// Warp sum with __shfl_down_sync; lane 0 of every warp writes its warp's total.
__global__ void warp_sum(const int* in, int* warp_sums, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? in[i] : 0;
    for (int offset = warpSize / 2; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffff, v, offset);
    int warps_per_block = (blockDim.x + warpSize - 1) / warpSize;
    if (threadIdx.x % warpSize == 0)
        warp_sums[blockIdx.x * warps_per_block + threadIdx.x / warpSize] = v;
}
