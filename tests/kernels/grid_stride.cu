// Grid-stride loop: any launch shape covers all n elements.
__global__ void affine(const int* in, int* out, int n, int mul, int add) {
    int stride = blockDim.x * gridDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = in[i] * mul + add;
}
