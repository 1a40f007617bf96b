// Reductions to one number: each thread folds a grid-stride slice, then folds its partial into out[0]
// with an atomic. out[0] arrives holding the identity (0, INT_MIN or INT_MAX), as a cudaMemset would.

#define GRID_STRIDE(i, n) \
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)

__global__ void calc_sum(const int* in, int* out, int n) {
    unsigned s = 0;                                   // unsigned: the sum wraps as int32
    GRID_STRIDE(i, n) s += (unsigned)in[i];
    atomicAdd(out, (int)s);
}

__global__ void calc_max(const int* in, int* out, int n) {
    int m = INT_MIN;
    GRID_STRIDE(i, n) m = max(m, in[i]);
    atomicMax(out, m);
}

__global__ void calc_min(const int* in, int* out, int n) {
    int m = INT_MAX;
    GRID_STRIDE(i, n) m = min(m, in[i]);
    atomicMin(out, m);
}

// Dot product of two lists of n: the same pattern with a product per element.
__global__ void calc_dot(const int* a, const int* b, int* out, int n) {
    unsigned s = 0;
    GRID_STRIDE(i, n) s += (unsigned)a[i] * (unsigned)b[i];
    atomicAdd(out, (int)s);
}
