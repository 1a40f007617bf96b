// A switch on the low three bits selects the operation.
__global__ void switch_op(const int* a, const int* b, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = a[i], y = b[i], r;
    switch (x & 7) {
        case 0: r = x + y; break;
        case 1: r = x - y; break;
        case 2: r = x * y; break;
        case 3: r = x & y; break;
        case 4:
        case 5: r = x | y; break;
        case 6: r = y << 2; break;
        default: r = -x; break;
    }
    out[i] = r;
}
