// min, max and abs on signed and unsigned values.
__global__ void minmax_abs(const int* a, const int* b, int* mn, int* mx, unsigned* umn, int* ab, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        mn[i] = min(a[i], b[i]);
        mx[i] = max(a[i], b[i]);
        umn[i] = min((unsigned)a[i], (unsigned)b[i]);
        ab[i] = abs(a[i]);
    }
}
