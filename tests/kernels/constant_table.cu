// A filter whose taps live in __constant__ memory: out[i] = sum_k taps[k] * in[i + k].
__constant__ int taps[5] = {1, -4, 6, -4, 1};

__global__ void fir(const int* in, int* out, int n_out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_out) {
        int acc = 0;
        for (int k = 0; k < 5; ++k) acc += taps[k] * in[i + k];
        out[i] = acc;
    }
}
