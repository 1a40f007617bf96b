#define CLAMP(x, lo, hi) ((x) < (lo) ? (lo) : ((x) > (hi) ? (hi) : (x)))

__global__ void relu_clamp(const int* __restrict__ in, int* __restrict__ relu, int* __restrict__ clamped,
                           int lo, int hi, int n)
{
    int idx = threadIdx.x + blockIdx.x * blockDim.x;
    if (idx < n) {
        int x = in[idx];
        relu[idx] = x > 0 ? x : 0;
        clamped[idx] = CLAMP(x, lo, hi);
    }
}
