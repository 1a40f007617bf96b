// Sub-word arrays: unsigned char pixels and short samples.
__global__ void brighten(const unsigned char* in, unsigned char* out, int n, int delta) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int v = in[i] + delta;
        out[i] = v < 0 ? 0 : (v > 255 ? 255 : v);
    }
}

__global__ void widen(const short* in, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 3;
}

__global__ void narrow(const int* in, short* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (short)(in[i] >> 4);
}

__global__ void signed_bytes(const signed char* in, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * 2 + (in[i] < 0);
}
