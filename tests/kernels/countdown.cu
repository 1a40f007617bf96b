// Suffix sums with an unsigned loop counting down: out[i] = in[i] + in[i+1] + ... + in[n-1].
__global__ void suffix_sum(const int* in, int* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int s = 0;
        for (unsigned k = n; k-- > i;) s += in[k];
        out[i] = s;
    }
}
