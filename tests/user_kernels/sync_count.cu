// Block-wide votes with __syncthreads_count / _and / _or.
__global__ void sync_votes(const int *x, int *out)
{
    int v = x[blockIdx.x * blockDim.x + threadIdx.x];
    int cnt = __syncthreads_count(v > 0);
    int all = __syncthreads_and(v != 0);
    int any = __syncthreads_or(v < 0);
    if (threadIdx.x == 0) {
        out[3 * blockIdx.x] = cnt;
        out[3 * blockIdx.x + 1] = all;
        out[3 * blockIdx.x + 2] = any;
    }
}
