// Collatz stopping time of each (positive) input, capped at limit steps.
__global__ void collatz(const unsigned* start, int* steps, int n, int limit) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned x = start[i];
    int s = 0;
    while (x != 1 && s < limit) {
        x = (x & 1) ? 3 * x + 1 : x / 2;
        ++s;
    }
    steps[i] = s;
}
