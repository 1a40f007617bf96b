// Everyday idioms: size_t indices, reference out-parameters, pointer walking, __device__ globals.
__device__ int table[8] = {3, 1, 4, 1, 5, 9, 2, 6};
__device__ int calls;

__global__ void fma_sizet(const int *a, const int *b, int *c, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] * b[i] + c[i];
}

__device__ void swap(int &x, int &y) { int t = x; x = y; y = t; }

__device__ void sort3(int &a, int &b, int &c)
{
    if (a > b) swap(a, b);
    if (b > c) swap(b, c);
    if (a > b) swap(a, b);
}

__global__ void sort_triples(int *v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int *p = v + 3 * i;
        int a = p[0], b = p[1], c = p[2];
        sort3(a, b, c);
        *p++ = a; *p++ = b; *p = c;
    }
}

// Row prefix sums by walking a pointer, a table lookup added; each row takes a ticket from a __device__ global.
__global__ void row_scan(int *m, int cols, int rows, int *ticket)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int *p = m + r * cols, *end = p + cols;
    int run = table[r & 7];
    while (p != end) { run += *p; *p++ = run; }
    ticket[r] = atomicAdd(&calls, 1);
}
