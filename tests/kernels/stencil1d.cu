// 1-D stencil of radius 2 with a halo staged in shared memory; zero outside [0, n).
#define RADIUS 2
#define MAX_BLOCK 32

__global__ void stencil1d(const int* in, int* out, int n) {
    __shared__ int tile[MAX_BLOCK + 2 * RADIUS];
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    int l = threadIdx.x + RADIUS;
    tile[l] = g < n ? in[g] : 0;
    if (threadIdx.x < RADIUS) {
        int left = g - RADIUS, right = g + blockDim.x;
        tile[l - RADIUS] = left >= 0 && left < n ? in[left] : 0;
        tile[l + blockDim.x] = right < n ? in[right] : 0;
    }
    __syncthreads();
    if (g < n) {
        int r = 0;
        for (int o = -RADIUS; o <= RADIUS; ++o) r += tile[l + o];
        out[g] = r;
    }
}
