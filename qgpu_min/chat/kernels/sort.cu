// Ascending sort in place, in ONE CTA: a bitonic network whose comparators all point the same way (each
// merge starts by comparing an element with its mirror in the block, then halves). Over n elements it is
// run as if padded to a power of two with +infinity: a comparator whose upper element lies at or past n
// would never swap, so it is skipped, and the padding never moves. log2(w) * (log2(w) + 1) / 2 phases of
// w / 2 comparators (w = n rounded up to a power of two), a barrier after each.

__device__ void compare_exchange(int* d, int i, int j) {     // i < j
    int x = d[i];
    int y = d[j];
    if (x > y) {
        d[i] = y;
        d[j] = x;
    }
}

__global__ void calc_sort(int* data, int n) {
    int width = 1;
    while (width < n) width <<= 1;
    int pairs = width / 2;
    for (int size = 2; size <= width; size <<= 1) {
        int half = size / 2;
        for (int c = threadIdx.x; c < pairs; c += blockDim.x) {      // comparator c: o-th pair of its block
            int o = c & (half - 1);
            int base = 2 * (c - o);
            int j = base + size - 1 - o;
            if (j < n) compare_exchange(data, base + o, j);
        }
        __syncthreads();
        for (int d = half / 2; d > 0; d >>= 1) {
            for (int c = threadIdx.x; c < pairs; c += blockDim.x) {
                int i = 2 * c - (c & (d - 1));                       // i has bit d clear
                if (i + d < n) compare_exchange(data, i, i + d);
            }
            __syncthreads();
        }
    }
}
