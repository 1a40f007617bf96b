// A template kernel instantiated for two factors, plus a templated block-size reduction.
template <int N>
__global__ void scale(int *a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = a[i] * N + N;
}
template __global__ void scale<3>(int *, int);
template __global__ void scale<-7>(int *, int);

template <int BLOCK>
__global__ void block_sum(const int *in, int *out)
{
    __shared__ int s[BLOCK];
    int t = threadIdx.x;
    s[t] = in[blockIdx.x * BLOCK + t];
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
template __global__ void block_sum<16>(const int *, int *);
