// Global max / min of an array with atomics, grid-stride loop.
__global__ void running_max(const int *data, int n, int *result)
{
    int local_max = INT_MIN;
    int local_min = INT_MAX;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        local_max = max(local_max, data[i]);
        local_min = min(local_min, data[i]);
    }
    atomicMax(&result[0], local_max);
    atomicMin(&result[1], local_min);
}
