// xorshift32 PRNG per thread: seed = seed0 ^ (tid * 2654435761), `rounds` steps, last value out.
__global__ void xorshift(unsigned *out, unsigned seed0, int rounds)
{
    unsigned tid = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned s = seed0 ^ (tid * 2654435761u);
    if (s == 0) s = 1;
    for (int r = 0; r < rounds; r++) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
    }
    out[tid] = s;
}
