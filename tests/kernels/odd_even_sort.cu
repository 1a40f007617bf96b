// Odd-even transposition sort of each block's slice in shared memory: blockDim phases, each
// ending at a barrier, with one compare-exchange per thread pair.
__global__ void odd_even_sort(int* data, int n) {
    __shared__ int s[32];
    int t = threadIdx.x;
    int base = blockIdx.x * blockDim.x;
    int count = min((int)blockDim.x, n - base);
    if (t < count) s[t] = data[base + t];
    __syncthreads();
    for (int phase = 0; phase < count; ++phase) {
        int left = 2 * t + (phase & 1);
        if (left + 1 < count && s[left] > s[left + 1]) {
            int tmp = s[left];
            s[left] = s[left + 1];
            s[left + 1] = tmp;
        }
        __syncthreads();
    }
    if (t < count) data[base + t] = s[t];
}
