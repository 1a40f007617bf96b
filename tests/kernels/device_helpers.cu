// __device__ helper functions called from a kernel.
__device__ int clamp(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }
__device__ int square(int x) { return x * x; }
__device__ int blend(int a, int b, int t) { return (a * (16 - t) + b * t) >> 4; }

extern "C" __global__ void helpers(const int* a, const int* b, int* out, int n, int lo, int hi) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int t = clamp(b[i], 0, 16);
        out[i] = clamp(blend(a[i], b[i], t), lo, hi) + square(i);
    }
}
