// Number-theory and bit operations of the calculator, one thread per element as in elementwise.cu.

__device__ unsigned magnitude(int x) {
    return x < 0 ? 0u - (unsigned)x : (unsigned)x;   // |INT_MIN| = 2^31 fits an unsigned
}

// Binary (Stein's) GCD: shifts and subtractions only. Euclid's % would be a shift-subtract loop per step
// on this machine (no divider), so this is much shorter.
__device__ unsigned binary_gcd(unsigned a, unsigned b) {
    if (a == 0) return b;
    if (b == 0) return a;
    int shift = __ffs((int)(a | b)) - 1;              // the common factor of two
    a >>= __ffs((int)a) - 1;
    while (b != 0) {
        b >>= __ffs((int)b) - 1;                      // both odd now
        if (a > b) {
            unsigned t = a;
            a = b;
            b = t;
        }
        b -= a;                                       // even, smaller
    }
    return a << shift;
}

// gcd(a, b) >= 0 as Python's math.gcd; gcd(0, 0) = 0. A number with a list: step 0, as in elementwise.cu.
__global__ void calc_gcd(const int* a, const int* b, int* out, int n, int step_a, int step_b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (int)binary_gcd(magnitude(a[step_a ? i : 0]), magnitude(b[step_b ? i : 0]));
}

// Set bits of the 32-bit two's-complement word (popcount(-1) = 32, as CUDA's __popc).
__global__ void calc_popcount(const int* a, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __popc((unsigned)a[i]);
}
