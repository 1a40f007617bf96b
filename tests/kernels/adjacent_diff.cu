// Differences of neighbours across block boundaries, reading global memory only.
__global__ void adjacent_diff(const int* in, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) out[0] = in[0];
    else if (i < n) out[i] = in[i] - in[i - 1];
}
