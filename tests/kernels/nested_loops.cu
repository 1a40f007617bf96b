// Nested loops with a triangular trip count: out[i] = sum over j <= i of a[j] * (i - j + 1).
__global__ void weighted_prefix(const int* a, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int acc = 0;
        for (int j = 0; j <= i; ++j)
            for (int k = j; k <= i; ++k) acc += a[j];
        out[i] = acc;
    }
}
