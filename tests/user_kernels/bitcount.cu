// Bits set per element, Kernighan loop, plus parity and highest set bit with a do/while.
__global__ void bitcount(const unsigned *in, int *count, int *parity, int *top, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned v = in[i];
        int c = 0;
        while (v) { v &= v - 1; c++; }
        count[i] = c;
        parity[i] = c & 1;
        v = in[i];
        int t = -1;
        if (v) {
            do { t++; v >>= 1; } while (v);
        }
        top[i] = t;
    }
}
