// Fibonacci per thread: 32-bit (wraps past F(47)) and 64-bit, split into two words.
__global__ void fib(const int *n, unsigned *f32, unsigned *lo, unsigned *hi, int count)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    unsigned a = 0, b = 1;
    unsigned long long A = 0, B = 1;
    for (int k = 0; k < n[i]; k++) {
        unsigned t = a + b; a = b; b = t;
        unsigned long long T = A + B; A = B; B = T;
    }
    f32[i] = a;
    lo[i] = (unsigned)A;
    hi[i] = (unsigned)(A >> 32);
}
