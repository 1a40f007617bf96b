// A whole tutorial program: host code with cudaMalloc/cudaMemcpy/printf; only the kernel runs here.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void square_minus(int *v, int k, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = v[i] * v[i] - k;
}

int main()
{
    const int N = 8;
    int h[N];
    for (int i = 0; i < N; ++i) h[i] = i;
    int *d;
    cudaMalloc(&d, N * sizeof(int));
    cudaMemcpy(d, h, N * sizeof(int), cudaMemcpyHostToDevice);
    square_minus<<<1, N>>>(d, 3, N);
    cudaMemcpy(h, d, N * sizeof(int), cudaMemcpyDeviceToHost);
    for (int i = 0; i < N; ++i) printf("%d\n", h[i]);
    cudaFree(d);
    return 0;
}
