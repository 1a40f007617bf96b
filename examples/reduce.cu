// Sum of an array: a tree reduction in shared memory per block, then one atomicAdd per block.
//
//   qgpu-min run examples/reduce.cu --arg '[3,1,4,1,5,9,2,6,5,3]' --arg 'zeros(1)' --arg 10 --block 8 --grid 2
//
// prints total = [39]. Works for any block size up to 32.
__global__ void reduce_sum(const int* in, int* total, int n) {
    __shared__ int partial[32];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    partial[tid] = i < n ? in[i] : 0;
    __syncthreads();
    for (int stride = 1; stride < blockDim.x; stride *= 2) {
        if (tid % (2 * stride) == 0 && tid + stride < blockDim.x) partial[tid] += partial[tid + stride];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(total, partial[0]);
}
