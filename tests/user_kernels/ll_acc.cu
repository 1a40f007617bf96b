// Sum of squares and of products in a long long accumulator, per block with atomics on the split words
// avoided: one thread per block sums its block's slice serially; output lo/hi words and the 64-bit array.
__global__ void ll_acc(const int *a, const int *b, unsigned *lo, int *hi, long long *full, int chunk)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    long long acc = 0;
    for (int k = 0; k < chunk; k++) {
        long long x = a[t * chunk + k];
        acc += x * x + (long long)a[t * chunk + k] * b[t * chunk + k];
    }
    lo[t] = (unsigned)acc;
    hi[t] = (int)(acc >> 32);
    full[t] = acc;
}
