// Square n x n matmul with 4x4 tiles staged in shared memory; launch with 4x4 blocks.
#define TILE 4

__global__ void matmul_tiled(const int* A, const int* B, int* C, int n) {
    __shared__ int As[TILE][TILE];
    __shared__ int Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty;
    int col = blockIdx.x * TILE + tx;
    int acc = 0;
    for (int t = 0; t < (n + TILE - 1) / TILE; ++t) {
        int ac = t * TILE + tx, br = t * TILE + ty;
        As[ty][tx] = (row < n && ac < n) ? A[row * n + ac] : 0;
        Bs[ty][tx] = (br < n && col < n) ? B[br * n + col] : 0;
        __syncthreads();
        for (int j = 0; j < TILE; ++j) acc += As[ty][j] * Bs[j][tx];
        __syncthreads();
    }
    if (row < n && col < n) C[row * n + col] = acc;
}
