// Overflow detection the portable way: add in 64 bits and compare against the 32-bit range.
__global__ void add_overflows(const int* a, const int* b, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        long long s = (long long)a[i] + b[i];
        out[i] = s > 2147483647LL ? 1 : (s < -2147483648LL ? -1 : 0);
    }
}
