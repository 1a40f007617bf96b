// A compare-and-swap loop implementing "atomic add of the absolute value", CUDA-manual style.
__device__ int atomic_add_abs(int* addr, int v) {
    int old = *addr, assumed;
    do {
        assumed = old;
        old = atomicCAS(addr, assumed, assumed + (v < 0 ? -v : v));
    } while (assumed != old);
    return old;
}

__global__ void sum_abs(const int* in, int* total, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomic_add_abs(total, in[i]);
}
