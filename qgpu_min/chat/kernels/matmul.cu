// C = A @ B for row-major A (m x k) and B (k x p); a list is a 1 x k or k x 1 matrix, so this one kernel
// does matrix-vector, vector-matrix and matrix-matrix. One thread per element of C on a 2-D launch (x over
// columns, y over rows): C has at most the machine's 1024 words, fewer than the 64 x 32 threads of a
// full grid, so the host always covers it, and without grid-stride loops the kernel needs no registers
// spilled to thread frames (which would take memory from the arrays).
__global__ void calc_matmul(const int* A, const int* B, int* C, int m, int k, int p) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < m && col < p) {
        unsigned acc = 0;                             // unsigned: wraps as int32
        #pragma unroll 1                              // unrolled, it would spill registers too
        for (int j = 0; j < k; ++j) acc += (unsigned)A[row * k + j] * (unsigned)B[j * p + col];
        C[row * p + col] = (int)acc;
    }
}
