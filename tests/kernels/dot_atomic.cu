// Dot product: each thread sums a grid-stride slice, then one atomicAdd per thread.
__global__ void dot(const int* a, const int* b, int* out, int n) {
    int sum = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        sum += a[i] * b[i];
    atomicAdd(out, sum);
}
