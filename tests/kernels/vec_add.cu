// Element-wise vector addition, with the host code a CUDA user would write around it.
#include <cuda_runtime.h>

__global__ void vec_add(const int* a, const int* b, int* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

int main() {
    const int n = 16;
    int ha[n], hb[n], hc[n];
    for (int i = 0; i < n; ++i) { ha[i] = i; hb[i] = 2 * i; }
    int *da, *db, *dc;
    cudaMalloc(&da, n * sizeof(int));
    cudaMalloc(&db, n * sizeof(int));
    cudaMalloc(&dc, n * sizeof(int));
    cudaMemcpy(da, ha, n * sizeof(int), cudaMemcpyHostToDevice);
    cudaMemcpy(db, hb, n * sizeof(int), cudaMemcpyHostToDevice);
    vec_add<<<(n + 7) / 8, 8>>>(da, db, dc, n);
    cudaMemcpy(hc, dc, n * sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(da);
    cudaFree(db);
    cudaFree(dc);
    return hc[n - 1] == 3 * (n - 1) ? 0 : 1;
}
