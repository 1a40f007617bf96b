// 2-D 3x3 convolution, zero padding, filter in constant memory.
__constant__ int filt[3][3] = {{1, 2, 1}, {0, -1, 0}, {-2, 3, 4}};

__global__ void conv3x3(const int *img, int *out, int W, int H)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H) return;
    int acc = 0;
    for (int dy = -1; dy <= 1; dy++)
        for (int dx = -1; dx <= 1; dx++) {
            int xx = x + dx, yy = y + dy;
            if (xx >= 0 && xx < W && yy >= 0 && yy < H)
                acc += filt[dy + 1][dx + 1] * img[yy * W + xx];
        }
    out[y * W + x] = acc;
}
