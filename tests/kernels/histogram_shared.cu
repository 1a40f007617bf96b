// Histogram privatised per block in shared memory, merged into the global one with atomics.
#define BINS 8

__global__ void histogram_shared(const int* data, int* hist, int n) {
    __shared__ int local[BINS];
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) local[b] = 0;
    __syncthreads();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int v = data[i];
        int bin = v < 0 ? 0 : (v >= 700 ? BINS - 1 : v / 100);
        atomicAdd(&local[bin], 1);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += blockDim.x)
        if (local[b]) atomicAdd(&hist[b], local[b]);
}
