// Unsigned division and remainder by a variable.
extern "C" __global__ void udivmod(const unsigned* a, const unsigned* b, unsigned* q, unsigned* r, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        q[i] = a[i] / b[i];
        r[i] = a[i] % b[i];
    }
}
