// __shfl_sync by index: broadcast of lane 0 and rotation by one lane inside each warp.
__global__ void shuffle_idx(const int* in, int* bcast, int* rot, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x % warpSize;
    int v = i < n ? in[i] : 0;
    int first = __shfl_sync(0xffffffff, v, 0);
    int next = __shfl_sync(0xffffffff, v, (lane + 1) % warpSize);
    if (i < n) {
        bcast[i] = first;
        rot[i] = next;
    }
}
