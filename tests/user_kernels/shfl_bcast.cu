// Broadcast lane 0's value to its warp, then each lane reads its right neighbour (rotating).
__global__ void shfl_bcast(const int *in, int *leader, int *right)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x % warpSize;
    int v = in[i];
    leader[i] = __shfl_sync(0xffffffff, v, 0);
    right[i] = __shfl_sync(0xffffffff, v, (lane + 1) % warpSize);
}
