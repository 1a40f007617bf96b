// __byte_perm with a constant selector (pick bytes of the pair b:a).
__global__ void byte_perm(const unsigned *a, const unsigned *b, unsigned *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __byte_perm(a[i], b[i], 0x3715);
}
