// Counting sort of small keys (0..K-1) in one block: shared histogram, serial scan, scatter.
#define K 8

__global__ void counting_sort(const int *keys, int *sorted, int *counts, int n)
{
    __shared__ int hist[K];
    __shared__ int start[K];
    int tid = threadIdx.x;
    if (tid < K) hist[tid] = 0;
    __syncthreads();
    for (int i = tid; i < n; i += blockDim.x)
        atomicAdd(&hist[keys[i]], 1);
    __syncthreads();
    if (tid == 0) {
        int sum = 0;
        for (int k = 0; k < K; k++) { start[k] = sum; sum += hist[k]; }
    }
    __syncthreads();
    if (tid < K) {
        counts[tid] = hist[tid];
        for (int j = 0; j < hist[tid]; j++)
            sorted[start[tid] + j] = tid;
    }
}
