// Array of structures, both as a struct and as flat index math (3 ints per record).
struct Particle { int x, y, vx, vy; };

__global__ void aos_struct(Particle *p, int steps, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    Particle q = p[i];
    for (int s = 0; s < steps; s++) { q.x += q.vx; q.y += q.vy; }
    p[i] = q;
}

__global__ void aos_flat(const int *rec, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = rec[3 * i] * rec[3 * i + 1] - rec[3 * i + 2];
}
