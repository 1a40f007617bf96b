// Signed and unsigned comparisons of the same bits, packed into a bit mask per element.
__global__ void compare(const int* a, const int* b, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int x = a[i], y = b[i];
        unsigned ux = x, uy = y;
        int m = 0;
        m |= (x < y) << 0;
        m |= (ux < uy) << 1;
        m |= (x <= y) << 2;
        m |= (ux <= uy) << 3;
        m |= (x > y) << 4;
        m |= (ux > uy) << 5;
        m |= (x == y) << 6;
        m |= (x >= 0) << 7;
        m |= (ux >= 0x80000000u) << 8;
        out[i] = m;
    }
}
