// Kernels a user could write that are outside the machine's limits or features.
__global__ void uses_float(const int *in, int *out, int n)
{
    int i = threadIdx.x;
    if (i < n) out[i] = (int)(in[i] * 0.5f);
}

__global__ void big_shared(int *out)
{
    __shared__ int buf[2048];
    buf[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = buf[31 - threadIdx.x];
}

// volatile: a side-effect-free infinite loop is UB in C++ and clang deletes it (flag[1] = 1 runs at once).
__global__ void spin_forever(int *flag)
{
    while (((volatile int *)flag)[0] == 0) { }
    flag[1] = 1;
}
