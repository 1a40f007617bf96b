// Recursive device functions as in an intro course: gcd (tail-recursive) and a binomial by Pascal's rule.
__device__ int gcd_rec(int a, int b) { return b == 0 ? a : gcd_rec(b, a % b); }

__device__ int binom(int n, int k)
{
    if (k == 0 || k == n) return 1;
    return binom(n - 1, k - 1) + binom(n - 1, k);
}

__global__ void rec_gcd(const int *a, const int *b, int *g, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = gcd_rec(a[i], b[i]);
}

__global__ void rec_binom(const int *nn, const int *kk, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = binom(nn[i], kk[i]);
}
