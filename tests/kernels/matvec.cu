// y = M x, one thread per row.
extern "C" __global__ void matvec(const int* M, const int* x, int* y, int rows, int cols) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int acc = 0;
    for (int c = 0; c < cols; ++c) acc += M[r * cols + c] * x[c];
    y[r] = acc;
}
