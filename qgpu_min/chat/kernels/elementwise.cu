// Elementwise arithmetic of the calculator: out[i] = a[i] OP b[i], one thread per element (the host
// launches enough: an array has at most the machine's 1024 words, a grid holds 64 x 32 threads). A number
// combined with a list arrives as a one-element array whose step is 0, so every thread reads its
// element 0: the host never expands it. The arithmetic is unsigned because unsigned overflow wraps by
// definition (int32 wrap-around), where signed overflow would be undefined behaviour in C++.

__global__ void calc_add(const int* a, const int* b, int* out, int n, int step_a, int step_b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (int)((unsigned)a[step_a ? i : 0] + (unsigned)b[step_b ? i : 0]);
}

__global__ void calc_sub(const int* a, const int* b, int* out, int n, int step_a, int step_b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (int)((unsigned)a[step_a ? i : 0] - (unsigned)b[step_b ? i : 0]);
}

__global__ void calc_mul(const int* a, const int* b, int* out, int n, int step_a, int step_b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (int)((unsigned)a[step_a ? i : 0] * (unsigned)b[step_b ? i : 0]);
}

// Unary minus of a computed value (a minus sign written before a literal is part of the literal).
__global__ void calc_neg(const int* a, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (int)(0u - (unsigned)a[i]);
}
