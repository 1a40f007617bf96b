// Stream compaction with an atomic counter: the order of the kept elements depends on scheduling.
__global__ void compact_positive(const int* in, int* out, int* count, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && in[i] > 0) {
        int slot = atomicAdd(count, 1);
        out[slot] = in[i];
    }
}
