// A warp-level "any" and "count" built from shuffles: how many lanes of my warp hold a negative value.
__global__ void warp_count_negative(const int* in, int* count, int* any, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int neg = (i < n && in[i] < 0) ? 1 : 0;
    for (int o = 1; o < warpSize; o <<= 1) neg += __shfl_xor_sync(0xffffffff, neg, o);
    if (i < n) {
        count[i] = neg;
        any[i] = neg != 0;
    }
}
