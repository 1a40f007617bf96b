// Reverse each block's slice through shared memory: needs every warp of the CTA at the barrier.
__global__ void block_reverse(const int* in, int* out, int n) {
    __shared__ int s[32];
    int base = blockIdx.x * blockDim.x;
    int t = threadIdx.x;
    int count = min((int)blockDim.x, n - base);
    if (t < count) s[t] = in[base + t];
    __syncthreads();
    if (t < count) out[base + t] = s[count - 1 - t];
}
