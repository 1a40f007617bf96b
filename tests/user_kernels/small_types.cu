// short / signed char / bool arrays: saturating 16-bit add, sign of bytes, flags.
__global__ void sat_add16(const short *a, const short *b, short *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int s = a[i] + b[i];
        c[i] = (short)(s > 32767 ? 32767 : (s < -32768 ? -32768 : s));
    }
}

__global__ void byte_sign(const signed char *x, bool *neg, signed char *absx, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        neg[i] = x[i] < 0;
        absx[i] = x[i] < 0 ? -x[i] : x[i];
    }
}
