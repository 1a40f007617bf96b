// counts[v] = how many elements equal v, for v in 0..bins-1; values outside that range are not counted.
// counts arrives zeroed. Global atomics over a grid-stride loop.
__global__ void calc_histogram(const int* x, int* counts, int n, int bins) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        int v = x[i];
        if (v >= 0 && v < bins) atomicAdd(&counts[v], 1);
    }
}
