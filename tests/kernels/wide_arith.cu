// 64-bit integer arithmetic: a full 32x32 -> 64-bit product plus an offset, split into words, and
// the average of two unsigned values computed without overflow in 64 bits.
__global__ void wide_arith(const int* a, const int* b, unsigned* lo, int* hi, unsigned* avg, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        long long p = (long long)a[i] * b[i] + 0x123456789LL;
        lo[i] = (unsigned)p;
        hi[i] = (int)(p >> 32);
        avg[i] = (unsigned)(((unsigned long long)(unsigned)a[i] + (unsigned)b[i]) / 2);
    }
}
