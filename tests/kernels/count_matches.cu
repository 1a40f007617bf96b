// Count elements equal to a key with atomicInc-free counting: one atomicAdd per match.
__global__ void count_matches(const int* in, int key, unsigned* count, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        if (in[i] == key) atomicAdd(count, 1u);
}
