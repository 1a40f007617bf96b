// Sieve of Eratosthenes in shared memory, one block; flags[k] = 1 if k is prime.
#define MAXN 128

__global__ void sieve(int *flags, int n)
{
    __shared__ int composite[MAXN];
    for (int k = threadIdx.x; k < n; k += blockDim.x)
        composite[k] = (k < 2);
    __syncthreads();
    for (int p = 2 + threadIdx.x; p * p < n; p += blockDim.x) {
        for (int m = p * p; m < n; m += p)
            composite[m] = 1;
    }
    __syncthreads();
    for (int k = threadIdx.x; k < n; k += blockDim.x)
        flags[k] = !composite[k];
}
