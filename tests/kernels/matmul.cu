// C = A * B for row-major (m x k) and (k x p) matrices; one thread per output, 2-D blocks and grid.
__global__ void matmul(const int* A, const int* B, int* C, int m, int k, int p) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < m && col < p) {
        int acc = 0;
        for (int j = 0; j < k; ++j) acc += A[row * k + j] * B[j * p + col];
        C[row * p + col] = acc;
    }
}
