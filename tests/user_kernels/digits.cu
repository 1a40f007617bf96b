// Decimal digits with do/while: digit sum and the reversed number (e.g. 1230 -> 321), negatives kept negative.
__global__ void digits(const int *in, int *dsum, int *rev, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    int v = in[i];
    int neg = v < 0;
    if (neg) v = -v;
    int s = 0, r = 0;
    do {
        int d = v % 10;
        s += d;
        r = r * 10 + d;
        v /= 10;
    } while (v != 0);
    dsum[i] = s;
    rev[i] = neg ? -r : r;
}
