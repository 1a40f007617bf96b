// Integer square root two ways: binary search and Newton's method.
__device__ unsigned isqrt_bs(unsigned x)
{
    unsigned lo = 0, hi = 65536;         // answer in [lo, hi)
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if ((unsigned long long)mid * mid <= x) lo = mid; else hi = mid;
    }
    return lo;
}

__device__ unsigned isqrt_newton(unsigned x)
{
    if (x < 2) return x;
    unsigned r = x / 2;
    unsigned y = (r + x / r) / 2;
    while (y < r) {
        r = y;
        y = (r + x / r) / 2;
    }
    return r;
}

__global__ void isqrt(const unsigned *x, unsigned *bs, unsigned *nw, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        bs[i] = isqrt_bs(x[i]);
        nw[i] = isqrt_newton(x[i]);
    }
}
