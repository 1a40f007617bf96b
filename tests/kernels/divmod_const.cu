// Division and remainder by constants: compilers turn these into multiply-high and shifts.
__global__ void div_const(const int* a, int* q7, int* r7, int* qm3, int* q16, int* r16, unsigned* u10, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int x = a[i];
        q7[i] = x / 7;
        r7[i] = x % 7;
        qm3[i] = x / -3;
        q16[i] = x / 16;
        r16[i] = x % 16;
        unsigned ux = (unsigned)x;
        u10[i] = ux / 10 + ux % 10;
    }
}
