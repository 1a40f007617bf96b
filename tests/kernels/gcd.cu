// Greatest common divisor by Euclid's algorithm (unsigned remainders).
__device__ unsigned gcd(unsigned a, unsigned b) {
    while (b != 0) {
        unsigned t = a % b;
        a = b;
        b = t;
    }
    return a;
}

__global__ void gcd_kernel(const unsigned* a, const unsigned* b, unsigned* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = gcd(a[i], b[i]);
}
