// switch with fallthrough (Duff-style accumulation of "levels").
__global__ void switch_fall(const int *code, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int acc = 0;
    switch (code[i]) {
    case 4: acc += 1000;
    case 3: acc += 100;
    case 2: acc += 10;
    case 1: acc += 1; break;
    case 7:
    case 8: acc = -code[i]; break;
    default: acc = 42;
    }
    out[i] = acc;
}
