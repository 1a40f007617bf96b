// Fill a w x h matrix from its 2-D coordinates, with a 2-D grid of 2-D blocks.
__global__ void index_2d(int* out, int w, int h) {
    unsigned x = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < w && y < h) out[y * w + x] = (int)(x * 100 + y) - (int)(gridDim.x * blockDim.y);
}
