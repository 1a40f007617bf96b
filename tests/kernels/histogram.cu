// Histogram with global atomics over a grid-stride loop; bins is a power of two.
__global__ void histogram(const unsigned* data, unsigned* hist, int n, unsigned bins) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&hist[data[i] & (bins - 1)], 1u);
}
