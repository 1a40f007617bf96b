// CUDA's bit intrinsics: population count, leading zeros, bit reverse, find-first-set.
__global__ void bit_intrinsics(const unsigned* in, int* popc, int* clz, unsigned* brev, int* ffs, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned x = in[i];
        popc[i] = __popc(x);
        clz[i] = __clz(x);
        brev[i] = __brev(x);
        ffs[i] = __ffs(x);
    }
}
