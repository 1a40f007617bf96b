// 64-bit division and remainder by constants (compilers emit 64-bit multiply-high).
__global__ void wide_divide(const int* a, const int* b, int* q, int* r, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        long long x = (long long)a[i] * b[i];
        q[i] = (int)(x / 1000003);
        r[i] = (int)(x % 1000003);
    }
}
