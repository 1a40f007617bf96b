// Histogram with global atomics over a grid-stride loop; bins is a power of two.
__global__ void histogram(const unsigned* data, unsigned* hist, int n, unsigned bins) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&hist[data[i] & (bins - 1)], 1u);
}

#include <cstdlib>
#include <cuda_runtime.h>

int main(int argc, char** argv) {
    const int n = 1 << 10;
    const unsigned bins = 16;
    unsigned* h = (unsigned*)malloc(n * sizeof(unsigned));
    for (int i = 0; i < n; ++i) h[i] = rand();
    unsigned *d_data, *d_hist;
    cudaMalloc(&d_data, n * sizeof(unsigned));
    cudaMalloc(&d_hist, bins * sizeof(unsigned));
    cudaMemset(d_hist, 0, bins * sizeof(unsigned));
    cudaMemcpy(d_data, h, n * sizeof(unsigned), cudaMemcpyHostToDevice);
    histogram<<<8, 32>>>(d_data, d_hist, n, bins);
    cudaDeviceSynchronize();
    free(h);
    return 0;
}
