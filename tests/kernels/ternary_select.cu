// Selects and predicated arithmetic: relu, sign, and a clamp, without explicit branches.
__global__ void select_ops(const int* in, int* relu, int* sgn, int* clamped, int n, int lo, int hi) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int x = in[i];
        relu[i] = x > 0 ? x : 0;
        sgn[i] = (x > 0) - (x < 0);
        clamped[i] = x < lo ? lo : x > hi ? hi : x;
    }
}
