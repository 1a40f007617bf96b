// Median of a sliding window of 5 per thread: copy into a local array, insertion sort, take the middle.
__global__ void median5(const int *in, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int w[5];
    for (int k = 0; k < 5; k++) {
        int j = i + k - 2;
        j = j < 0 ? 0 : (j >= n ? n - 1 : j);
        w[k] = in[j];
    }
    for (int a = 1; a < 5; a++) {
        int key = w[a], b = a - 1;
        while (b >= 0 && w[b] > key) { w[b + 1] = w[b]; b--; }
        w[b + 1] = key;
    }
    out[i] = w[2];
}
