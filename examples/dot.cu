// Dot product of two integer vectors, accumulated with atomicAdd.
//
//   qgpu-min run examples/dot.cu --arg '[1,2,3]' --arg '[4,5,6]' --arg 'zeros(1)' --arg 3
//
// prints a, b and out = [32]. Each thread sums a grid-stride slice, then adds it to *out.
__global__ void dot(const int* a, const int* b, int* out, int n) {
    int sum = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        sum += a[i] * b[i];
    atomicAdd(out, sum);
}
