// Warp-synchronous exchange through shared memory with __syncwarp: each lane reads the value its
// left neighbour (in the same warp, cyclically) wrote.
__global__ void warp_rotate(const int* in, int* out, int n) {
    __shared__ int buf[32];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    buf[t] = i < n ? in[i] * 2 : 0;
    __syncwarp();
    int lane = t % warpSize, base = t - lane;
    int left = base + (lane + warpSize - 1) % warpSize;
    if (i < n) out[i] = buf[left] + 1;
}
