// Shifts by variable amounts: arithmetic vs logical right shift, rotate.
__global__ void shifts(const int* a, const int* s, int* sar, unsigned* shr, int* shl, unsigned* rotl, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int x = a[i];
        int k = s[i] & 31;
        sar[i] = x >> k;
        shr[i] = (unsigned)x >> k;
        shl[i] = x << k;
        unsigned u = (unsigned)x;
        rotl[i] = k == 0 ? u : (u << k) | (u >> (32 - k));
    }
}
