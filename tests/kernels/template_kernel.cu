// A templated kernel, explicitly instantiated for int (its name is mangled with the template argument).
template <typename T>
__global__ void axpy(T a, const T* x, T* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
template __global__ void axpy<int>(int, const int*, int*, int);
