// Warp votes: per thread, the ballot of (x > 0), its popcount, any/all of x even.
__global__ void vote(const int *x, unsigned *ballot, int *npos, int *any_even, int *all_even)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i];
    unsigned b = __ballot_sync(0xffffffff, v > 0);
    ballot[i] = b;
    npos[i] = __popc(b);
    any_even[i] = __any_sync(0xffffffff, (v & 1) == 0);
    all_even[i] = __all_sync(0xffffffff, (v & 1) == 0);
}
