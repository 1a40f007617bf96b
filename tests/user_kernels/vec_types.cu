// int2 / int4 vector types: point distances (Manhattan) and a 4-wide dot product.
__global__ void manhattan(const int2 *p, const int2 *q, int *d, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int2 a = p[i], b = q[i];
        d[i] = abs(a.x - b.x) + abs(a.y - b.y);
    }
}

__global__ void dot4(const int4 *a, const int4 *b, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int4 x = a[i], y = b[i];
        out[i] = x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
    }
}
