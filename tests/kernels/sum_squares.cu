// Sum of squares with 32-bit wrap-around, reduced per warp with shuffles then by atomics.
__global__ void sum_squares(const int* in, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = 0;
    for (; i < n; i += gridDim.x * blockDim.x) v += in[i] * in[i];
    for (int o = warpSize / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    if ((threadIdx.x & (warpSize - 1)) == 0) atomicAdd(out, v);
}
