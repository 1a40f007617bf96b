// Several element-wise kernels in one file: pick one with --kernel.
__global__ void vec_sub(const int* a, const int* b, int* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] - b[i];
}

__global__ void vec_mul(const int* a, const int* b, int* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] * b[i];
}

__global__ void vec_logic(const unsigned* a, const unsigned* b, unsigned* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = (a[i] & b[i]) ^ (~a[i] | (b[i] >> 3));
}
