// Per-lane trip counts: each lane sums the digits of its value in a given base (>= 2).
__global__ void digit_sum(const unsigned* in, const unsigned* base, unsigned* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned x = in[i], b = base[i], s = 0;
        do {
            s += x % b;
            x /= b;
        } while (x);
        out[i] = s;
    }
}
