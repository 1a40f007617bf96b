// Shuffles in a 2-D block: warps are formed from the linear thread index (x fastest), so with
// blockDim.x == 2 a warp spans two rows. Each thread gets its warp's total and its row's total.
__global__ void warp_2d(const int* in, int* warp_total, int* row_total, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int inside = x < w && y < h;
    int v = inside ? in[y * w + x] : 0;
    int s = v;
    for (int m = 1; m < warpSize; m <<= 1) s += __shfl_xor_sync(0xffffffff, s, m);
    int r = v + __shfl_xor_sync(0xffffffff, v, 1);  // the partner in the same row (blockDim.x == 2)
    if (inside) {
        warp_total[y * w + x] = s;
        row_total[y * w + x] = r;
    }
}
