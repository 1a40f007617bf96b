// 24-bit multiplies and halving adds, as CUDA's integer intrinsics define them.
__global__ void intrinsics_misc(const int* a, const int* b, int* m24, unsigned* um24, int* hadd, int* rhadd,
                                unsigned* uhadd, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        m24[i] = __mul24(a[i], b[i]);
        um24[i] = __umul24((unsigned)a[i], (unsigned)b[i]);
        hadd[i] = __hadd(a[i], b[i]);
        rhadd[i] = __rhadd(a[i], b[i]);
        uhadd[i] = __uhadd((unsigned)a[i], (unsigned)b[i]);
    }
}
