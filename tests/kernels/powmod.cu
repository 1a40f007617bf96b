// Modular exponentiation by squaring (modulus below 2^16 so products fit in 32 bits).
__device__ unsigned powmod(unsigned base, unsigned exp, unsigned m) {
    unsigned r = 1 % m;
    base %= m;
    while (exp) {
        if (exp & 1) r = r * base % m;
        base = base * base % m;
        exp >>= 1;
    }
    return r;
}

__global__ void powmod_kernel(const unsigned* base, const unsigned* exp, unsigned* out, unsigned m, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = powmod(base[i], exp[i], m);
}
