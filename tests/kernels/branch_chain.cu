// Divergent if/else chain: each range of input takes a different computation.
__global__ void classify(const int* in, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int x = in[i];
        int r;
        if (x < -1000) r = -x / 1000;
        else if (x < 0) r = x * 3;
        else if (x == 0) r = 7;
        else if (x < 1000) r = x + 1000;
        else r = x ^ 0x5555;
        out[i] = r;
    }
}
