// unsigned wrap-around, C's negative modulo and truncating division by a kernel argument.
__global__ void wrap_mod(const int *a, int d, int *q, int *r, int *pmod, unsigned *udiff, int *ucmp, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int x = a[i];
        q[i] = x / d;
        r[i] = x % d;
        pmod[i] = ((x % d) + d) % d;
        unsigned u = (unsigned)i - 3u;          // wraps for i < 3
        udiff[i] = u * 7u;
        ucmp[i] = (unsigned)x > (unsigned)d;    // negative ints are huge unsigned
    }
}
