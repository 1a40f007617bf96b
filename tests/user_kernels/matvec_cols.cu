// y = A * x with a 2-D block: threadIdx.y picks the row, threadIdx.x strides over columns,
// partial sums combined with atomicAdd into y (zeroed by the host).
__global__ void matvec2d(const int *A, const int *x, int *y, int rows, int cols)
{
    int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r >= rows) return;
    int partial = 0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        partial += A[r * cols + c] * x[c];
    atomicAdd(&y[r], partial);
}
