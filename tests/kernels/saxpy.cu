// Integer saxpy: y = a*x + y.
extern "C" __global__ void saxpy(int n, int a, const int* x, int* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
