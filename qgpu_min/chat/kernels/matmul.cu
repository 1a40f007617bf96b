// C = A @ B for row-major A (m x k) and B (k x p); a list is a 1 x k or k x 1 matrix, so this one kernel
// does matrix-vector, vector-matrix and matrix-matrix. 2-D blocks and grid: x over columns, y over rows,
// with grid-stride loops in both, so any m x p fits whatever launch shape the host picked.
__global__ void calc_matmul(const int* A, const int* B, int* C, int m, int k, int p) {
    for (int row = blockIdx.y * blockDim.y + threadIdx.y; row < m; row += blockDim.y * gridDim.y) {
        for (int col = blockIdx.x * blockDim.x + threadIdx.x; col < p; col += blockDim.x * gridDim.x) {
            unsigned acc = 0;                         // unsigned: wraps as int32
            #pragma unroll 1      // unrolled, the loop spills registers to thread frames, which take memory
            for (int j = 0; j < k; ++j) acc += (unsigned)A[row * k + j] * (unsigned)B[j * p + col];
            C[row * p + col] = (int)acc;
        }
    }
}
