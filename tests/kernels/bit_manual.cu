// Bit reversal and parity written out by hand, as in code that predates the intrinsics.
__device__ unsigned reverse_bits(unsigned x) {
    unsigned r = 0;
    for (int b = 0; b < 32; ++b) {
        r = (r << 1) | (x & 1);
        x >>= 1;
    }
    return r;
}

__device__ unsigned parity(unsigned x) {
    x ^= x >> 16;
    x ^= x >> 8;
    x ^= x >> 4;
    x ^= x >> 2;
    x ^= x >> 1;
    return x & 1;
}

extern "C" __global__ void bit_manual(const unsigned* in, unsigned* rev, unsigned* par, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        rev[i] = reverse_bits(in[i]);
        par[i] = parity(in[i]);
    }
}
