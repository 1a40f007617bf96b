// Early returns in divergent lanes: negative inputs write a marker and leave.
__global__ void early_return(const int* in, int* out, int* flags, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = in[i];
    if (x < 0) {
        out[i] = -1;
        return;
    }
    flags[i] = 1;
    if (x % 3 == 0) return;
    out[i] = x / 3;
}
