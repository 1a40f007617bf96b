// C = A * B for row-major matrices (m x k) and (k x p): one thread per output, 2-D blocks and grid.
//
//   qgpu-min run examples/matmul.cu --arg '[1,2,3,4,5,6]' --arg '[7,8,9,10,11,12]' --arg 'zeros(4)' \
//       --arg 2 --arg 3 --arg 2 --block 2,2
//
// prints C = [58, 64, 139, 154].
__global__ void matmul(const int* A, const int* B, int* C, int m, int k, int p) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < m && col < p) {
        int acc = 0;
        for (int j = 0; j < k; ++j) acc += A[row * k + j] * B[j * p + col];
        C[row * p + col] = acc;
    }
}
