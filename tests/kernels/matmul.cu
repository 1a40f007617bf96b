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

// Host side, as in a complete program: compiled device-only, it is parsed but not run.
#include <cstdio>
#include <cuda_runtime.h>

int main() {
    const int m = 4, k = 3, p = 5;
    int hA[m * k], hB[k * p], hC[m * p];
    for (int i = 0; i < m * k; ++i) hA[i] = i;
    for (int i = 0; i < k * p; ++i) hB[i] = i - 2;
    int *dA, *dB, *dC;
    cudaMalloc((void**)&dA, sizeof(hA));
    cudaMalloc((void**)&dB, sizeof(hB));
    cudaMalloc((void**)&dC, sizeof(hC));
    cudaMemcpy(dA, hA, sizeof(hA), cudaMemcpyHostToDevice);
    cudaMemcpy(dB, hB, sizeof(hB), cudaMemcpyHostToDevice);
    dim3 block(4, 4);
    dim3 grid((p + block.x - 1) / block.x, (m + block.y - 1) / block.y);
    matmul<<<grid, block>>>(dA, dB, dC, m, k, p);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        printf("launch failed: %s\n", cudaGetErrorString(err));
        return 1;
    }
    cudaDeviceSynchronize();
    cudaMemcpy(hC, dC, sizeof(hC), cudaMemcpyDeviceToHost);
    printf("C[0][0] = %d\n", hC[0]);
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    return 0;
}
