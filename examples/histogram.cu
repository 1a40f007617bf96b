// Histogram of values into `bins` buckets (value mod bins), counted with atomicAdd.
//
//   qgpu-min run examples/histogram.cu --arg '[1,5,2,7,1,1,3,6,0,4]' --arg 'zeros(4)' --arg 10 --arg 4
//
// prints hist = [2, 4, 2, 2]: 0 and 4 fall in bucket 0; 1, 5, 1, 1 in bucket 1; and so on.
__global__ void histogram(const unsigned* data, unsigned* hist, int n, unsigned bins) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&hist[data[i] % bins], 1u);
}
