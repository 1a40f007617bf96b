// Integer division with Python's floor semantics: a // b rounds toward negative infinity and a % b takes
// the sign of b, so that (a // b) * b + a % b == a. C's / and % truncate toward zero; the quotient is
// stepped down (and the remainder moved by b) when they differ, i.e. when the remainder is non-zero and
// its sign is not b's. A zero divisor sets *zero_div (the host reports it) and leaves 0 in out[i].
// One thread per element, and a number with a list as a step-0 array: as in elementwise.cu.

__device__ int floor_div(int a, int b) {
    if (b == -1) return (int)(0u - (unsigned)a);    // INT_MIN / -1 overflows in C; as int32 it wraps to INT_MIN
    int q = a / b;
    int r = a - q * b;                               // |q * b| <= |a|: no overflow
    if (r != 0 && ((r < 0) != (b < 0))) q -= 1;
    return q;
}

__device__ int floor_mod(int a, int b) {
    if (b == -1) return 0;                           // INT_MIN % -1 would overflow in C
    int r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;      // opposite signs: no overflow
    return r;
}

// Both kernels: element i of a (or its one number) divided by element i of b (or its one number).
__device__ void divide_each(const int* a, const int* b, int* out, int* zero_div, int n, int step_a, int step_b,
                            bool mod) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int d = b[step_b ? i : 0];
        if (d == 0) {
            *zero_div = 1;
            out[i] = 0;
        } else {
            int x = a[step_a ? i : 0];
            out[i] = mod ? floor_mod(x, d) : floor_div(x, d);
        }
    }
}

__global__ void calc_floordiv(const int* a, const int* b, int* out, int* zero_div, int n, int step_a, int step_b) {
    divide_each(a, b, out, zero_div, n, step_a, step_b, false);
}

__global__ void calc_mod(const int* a, const int* b, int* out, int* zero_div, int n, int step_a, int step_b) {
    divide_each(a, b, out, zero_div, n, step_a, step_b, true);
}
