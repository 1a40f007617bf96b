// Lock-free max and multiply with an atomicCAS loop (the "roll your own atomic" idiom).
__device__ int atomicMaxCAS(int *addr, int val)
{
    int old = *addr, assumed;
    do {
        assumed = old;
        if (assumed >= val) break;
        old = atomicCAS(addr, assumed, val);
    } while (assumed != old);
    return old;
}

__device__ int atomicMulCAS(int *addr, int val)
{
    int old = *addr, assumed;
    do {
        assumed = old;
        old = atomicCAS(addr, assumed, assumed * val);
    } while (assumed != old);
    return old;
}

__global__ void cas_max(const int *in, int *mx, int *prod, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicMaxCAS(mx, in[i]);
        atomicMulCAS(prod, in[i]);
    }
}
