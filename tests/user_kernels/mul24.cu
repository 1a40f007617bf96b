// __mul24: 24-bit signed multiply, low 32 bits.
__global__ void mul24(const int *a, const int *b, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __mul24(a[i] & 0x7FFFFF, b[i] & 0x3FF);
}
