// "Unroll the last warp" (Mark Harris, Optimizing Parallel Reduction, kernel #5): the last steps run
// without __syncthreads(), relying on a 32-lane warp executing in lockstep, through a volatile pointer.
__device__ void warpReduce(volatile int *sdata, unsigned tid)
{
    sdata[tid] += sdata[tid + 16];
    sdata[tid] += sdata[tid + 8];
    sdata[tid] += sdata[tid + 4];
    sdata[tid] += sdata[tid + 2];
    sdata[tid] += sdata[tid + 1];
}

__global__ void reduce_unrolled(const int *in, int *out)
{
    __shared__ int sdata[64];
    unsigned tid = threadIdx.x;
    sdata[tid] = in[blockIdx.x * blockDim.x + tid];
    sdata[tid + 32] = 0;
    __syncthreads();
    if (tid < 32) warpReduce(sdata, tid);
    if (tid == 0) out[blockIdx.x] = sdata[0];
}
