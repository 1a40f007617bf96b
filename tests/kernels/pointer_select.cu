// Pointer arithmetic: choose a source array at run time, then walk it with *p++.
__global__ void pair_sum(const int* a, const int* b, int* out, int n, int use_a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int* src = use_a ? a : b;
    const int* p = src + i;
    if (i < n) {
        int v = *p++;
        if (i + 1 < n) v += *p;
        out[i] = v;
    }
}
