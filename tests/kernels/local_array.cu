// A per-thread local array indexed by data: counts the distinct hex digits of each input.
__global__ void distinct_nibbles(const unsigned* in, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int seen[16];
    for (int k = 0; k < 16; ++k) seen[k] = 0;
    unsigned x = in[i];
    for (int k = 0; k < 8; ++k) {
        seen[x & 15] = 1;
        x >>= 4;
    }
    int c = 0;
    for (int k = 0; k < 16; ++k) c += seen[k];
    out[i] = c;
}
