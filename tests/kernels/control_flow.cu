// Tangled control flow: a digit loop with a switch that continues, breaks out by clearing the
// loop variable, and returns early from inside the loop.
__global__ void digit_walk(const unsigned* in, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned x = in[i];
    if (x == 0) {
        out[i] = -1;
        return;
    }
    int acc = 0;
    while (x) {
        unsigned d = x % 10;
        x /= 10;
        switch (d) {
            case 0: continue;
            case 7: x = 0; break;
            case 3: acc *= 2; break;
            default: acc += d;
        }
        if (acc > 40) {
            out[i] = 1000 + acc;
            return;
        }
    }
    out[i] = acc;
}
