// 64-bit counters: unsigned long long atomicAdd (sum of squares may exceed 32 bits).
__global__ void sumsq64(const int *x, unsigned long long *sum, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(sum, (unsigned long long)((long long)x[i] * x[i]));
}
