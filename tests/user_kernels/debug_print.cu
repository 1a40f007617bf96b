// printf debugging, as in every tutorial.
#include <cstdio>

__global__ void debug_print(int *out)
{
    printf("thread %d\n", threadIdx.x);
    out[threadIdx.x] = threadIdx.x;
}
