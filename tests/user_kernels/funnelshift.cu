// __funnelshift_l: the high word of (b:a) << (i & 31).
__global__ void funnel(const unsigned *a, const unsigned *b, unsigned *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __funnelshift_l(a[i], b[i], i);
}
