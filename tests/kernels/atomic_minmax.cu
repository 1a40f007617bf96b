// Global minimum, maximum and bitwise or/xor through atomics.
__global__ void atomic_stats(const int* in, int* mn, int* mx, int* orr, int* xr, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int v = in[i];
        atomicMin(mn, v);
        atomicMax(mx, v);
        atomicOr(orr, v);
        atomicXor(xr, v);
    }
}
