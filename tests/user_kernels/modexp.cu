// Modular exponentiation with a 64-bit product (the textbook way).
__device__ unsigned mulmod(unsigned a, unsigned b, unsigned m)
{
    return (unsigned)(((unsigned long long)a * b) % m);
}

__global__ void modexp(const unsigned *base, const unsigned *exp, unsigned *out, unsigned mod, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned result = 1 % mod;
    unsigned b = base[i] % mod;
    unsigned e = exp[i];
    while (e > 0) {
        if (e & 1) result = mulmod(result, b, mod);
        b = mulmod(b, b, mod);
        e >>= 1;
    }
    out[i] = result;
}
