// High halves of 32x32-bit products.
__global__ void mulhi(const int* a, const int* b, int* hi, unsigned* uhi, int* lo, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        hi[i] = __mulhi(a[i], b[i]);
        uhi[i] = __umulhi((unsigned)a[i], (unsigned)b[i]);
        lo[i] = a[i] * b[i];
    }
}
