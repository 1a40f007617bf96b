// Wrapping counters with atomicInc / atomicDec, and atomicSub / atomicAnd on plain words.
__global__ void counters(const unsigned* in, unsigned* inc, unsigned* dec, int* sub, unsigned* band,
                         unsigned limit, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicInc(inc, limit);
        atomicDec(dec, limit);
        atomicSub(sub, (int)(in[i] & 0xff));
        atomicAnd(band, in[i] | 0x0f0f0000u);
    }
}
