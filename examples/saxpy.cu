// Integer saxpy: y = a * x + y.
//
//   qgpu-min run examples/saxpy.cu --arg 4 --arg 3 --arg '[1,2,3,4]' --arg '[10,20,30,40]'
//
// prints x = [1, 2, 3, 4] and y = [13, 26, 39, 52].
extern "C" __global__ void saxpy(int n, int a, const int* x, int* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
