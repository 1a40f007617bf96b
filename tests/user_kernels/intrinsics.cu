// Integer intrinsics from the CUDA math API that users reach for, one kernel each.
__global__ void byte_perm(const unsigned *a, const unsigned *b, unsigned *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __byte_perm(a[i], b[i], 0x3715);
}

__global__ void funnel(const unsigned *a, const unsigned *b, unsigned *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __funnelshift_l(a[i], b[i], i);
}

__global__ void usad(const unsigned *a, const unsigned *b, unsigned *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __usad(a[i], b[i], 7u);
}

__global__ void mul24(const int *a, const int *b, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __mul24(a[i] & 0x7FFFFF, b[i] & 0x3FF);
}
