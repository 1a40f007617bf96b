// An elementary cellular automaton (rule given as 8 bits) on a ring of blockDim cells, run for
// `steps` generations with double buffering in shared memory.
__global__ void automaton(const int* cells, int* out, unsigned rule, int steps) {
    __shared__ int buf[2][32];
    int t = threadIdx.x, w = blockDim.x;
    int cur = 0;
    buf[0][t] = cells[blockIdx.x * w + t] & 1;
    __syncthreads();
    for (int s = 0; s < steps; ++s) {
        int l = buf[cur][(t + w - 1) % w], c = buf[cur][t], r = buf[cur][(t + 1) % w];
        buf[cur ^ 1][t] = (rule >> (l * 4 + c * 2 + r)) & 1;
        cur ^= 1;
        __syncthreads();
    }
    out[blockIdx.x * w + t] = buf[cur][t];
}
