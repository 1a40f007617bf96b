// Indirect addressing: gather through an index array, scatter through a permutation.
__global__ void gather_scatter(const int* src, const int* idx, const int* perm, int* gathered, int* scattered, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        gathered[i] = src[idx[i]];
        scattered[perm[i]] = src[i];
    }
}
