// Broadcast through a __shared__ scalar: the block's last thread writes it, every thread reads it
// after the barrier (arrays cover the whole grid).
__global__ void broadcast_last(const int* in, int* out) {
    __shared__ int last;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.x == blockDim.x - 1) last = in[i];
    __syncthreads();
    out[i] = last;
}
