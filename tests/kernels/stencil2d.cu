// 2-D five-point stencil (4*c - n - s - e - w) over a w x h grid, halo in shared memory.
__global__ void stencil2d(const int* in, int* out, int w, int h) {
    __shared__ int tile[128];
    int bx = blockDim.x, by = blockDim.y;
    int tx = threadIdx.x, ty = threadIdx.y;
    int x = blockIdx.x * bx + tx, y = blockIdx.y * by + ty;
    int pitch = bx + 2;
    // every thread of the block loads tile cells in strides, halo included
    for (int t = ty * bx + tx; t < pitch * (by + 2); t += bx * by) {
        int gx = blockIdx.x * bx + t % pitch - 1;
        int gy = blockIdx.y * by + t / pitch - 1;
        tile[t] = (gx >= 0 && gx < w && gy >= 0 && gy < h) ? in[gy * w + gx] : 0;
    }
    __syncthreads();
    if (x < w && y < h) {
        int c = (ty + 1) * pitch + tx + 1;
        out[y * w + x] = 4 * tile[c] - tile[c - 1] - tile[c + 1] - tile[c - pitch] - tile[c + pitch];
    }
}
