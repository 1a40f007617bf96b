// Warp votes: which lanes of my warp hold a positive value, and whether any / all do.
__global__ void votes(const int* in, unsigned* ballot, int* any, int* all, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int positive = i < n && in[i] > 0;
    unsigned b = __ballot_sync(0xffffffff, positive);
    int a = __any_sync(0xffffffff, positive);
    int l = __all_sync(0xffffffff, positive);
    if (i < n) {
        ballot[i] = b;
        any[i] = a;
        all[i] = l;
    }
}
