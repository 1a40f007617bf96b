// Grade histogram: score 0..100 -> bucket by integer division by a bucket width argument,
// shared counters, then one atomicAdd per bucket per block.
__global__ void grade_hist(const int *score, int *hist, int width, int nbuckets, int n)
{
    __shared__ int local[16];
    for (int k = threadIdx.x; k < nbuckets; k += blockDim.x) local[k] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int b = score[i] / width;
        b = b >= nbuckets ? nbuckets - 1 : b;
        atomicAdd(&local[b], 1);
    }
    __syncthreads();
    for (int k = threadIdx.x; k < nbuckets; k += blockDim.x)
        if (local[k]) atomicAdd(&hist[k], local[k]);
}
