// Signed division and remainder by a variable (C truncates toward zero).
__global__ void divmod(const int* a, const int* b, int* q, int* r, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        q[i] = a[i] / b[i];
        r[i] = a[i] % b[i];
    }
}
