// Transpose a rows x cols matrix through a shared-memory tile (block up to 8 x 4 threads).
#define TILE_W 8
#define TILE_H 8

__global__ void transpose(const int* in, int* out, int rows, int cols) {
    __shared__ int tile[TILE_H][TILE_W + 1];
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[y * cols + x];
    __syncthreads();
    // the block's tile lands at the mirrored block position; threads swap roles
    int t = threadIdx.y * blockDim.x + threadIdx.x;
    int ty = t / blockDim.y, tx = t % blockDim.y;
    int ox = blockIdx.y * blockDim.y + tx;
    int oy = blockIdx.x * blockDim.x + ty;
    if (ox < rows && oy < cols) out[oy * rows + ox] = tile[tx][ty];
}
