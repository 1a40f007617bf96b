// 2-D matrix ops with macros and threadIdx.y-heavy indexing: C = A + B^T scaled, row/col guards.
#define IDX(r, c, ld) ((r) * (ld) + (c))
#define SQR(v) ((v) * (v))

__global__ void mat_ops(const int *A, const int *B, int *C, int *D, int rows, int cols)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= rows || col >= cols) return;
    C[IDX(row, col, cols)] = A[IDX(row, col, cols)] + 2 * B[IDX(col, row, rows)];
    D[IDX(row, col, cols)] = SQR(A[IDX(row, col, cols)] - row) - col;
}
