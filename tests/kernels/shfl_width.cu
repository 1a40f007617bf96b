// Shuffles over sub-warp segments of width 2: swap within pairs, broadcast the pair's first lane,
// and shift down inside the pair (the last lane of a pair keeps its own value).
__global__ void shfl_pairs(const int* in, int* swapped, int* first, int* down, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? in[i] : 0;
    int s = __shfl_xor_sync(0xffffffff, v, 1, 2);
    int f = __shfl_sync(0xffffffff, v, 0, 2);
    int d = __shfl_down_sync(0xffffffff, v, 1, 2);
    if (i < n) {
        swapped[i] = s;
        first[i] = f;
        down[i] = d;
    }
}
