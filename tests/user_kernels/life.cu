// One Game of Life step on a torus.
__global__ void life_step(const int *cur, int *next, int W, int H)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < W && y < H) {
        int n = 0;
        for (int dy = -1; dy <= 1; ++dy)
            for (int dx = -1; dx <= 1; ++dx) {
                if (dx == 0 && dy == 0) continue;
                int xx = (x + dx + W) % W;
                int yy = (y + dy + H) % H;
                n += cur[yy * W + xx];
            }
        int alive = cur[y * W + x];
        next[y * W + x] = (n == 3 || (alive && n == 2)) ? 1 : 0;
    }
}
