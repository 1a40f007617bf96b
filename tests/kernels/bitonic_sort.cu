// Bitonic sort of each block's slice in shared memory (block size a power of two).
#include <climits>

__global__ void bitonic_sort(int* data, int n) {
    __shared__ int s[32];
    unsigned t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? data[i] : INT_MAX;
    __syncthreads();
    for (unsigned k = 2; k <= blockDim.x; k <<= 1) {
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            unsigned partner = t ^ j;
            if (partner > t) {
                bool ascending = (t & k) == 0;
                int a = s[t], b = s[partner];
                if ((a > b) == ascending) {
                    s[t] = b;
                    s[partner] = a;
                }
            }
            __syncthreads();
        }
    }
    if (i < n) data[i] = s[t];
}
