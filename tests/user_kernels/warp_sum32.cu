// The textbook warp reduction with a hard-coded 32-lane warp (offset starts at 16); and the
// portable one written with warpSize. Each lane 0 adds its warp's sum into out.
__global__ void warp_sum32(const int *in, int *out)
{
    int v = in[blockIdx.x * blockDim.x + threadIdx.x];
    for (int offset = 16; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffff, v, offset);
    if (threadIdx.x % 32 == 0) atomicAdd(out, v);
}

__global__ void warp_sum(const int *in, int *out)
{
    int v = in[blockIdx.x * blockDim.x + threadIdx.x];
    for (int offset = warpSize / 2; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffff, v, offset);
    if (threadIdx.x % warpSize == 0) atomicAdd(out, v);
}
