// Trial division primality test: a data-dependent loop with early exit.
__global__ void is_prime(const int* in, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = in[i];
    int prime = x >= 2;
    for (int d = 2; d * d <= x; ++d) {
        if (x % d == 0) {
            prime = 0;
            break;
        }
    }
    out[i] = prime;
}
