// Ascending sort in place, in ONE CTA (a barrier orders the phases): a bitonic network whose comparators
// all point the same way. Merging blocks of `size`, the first phase compares each element with its mirror
// in the block (partner i ^ (size - 1)), the later ones at halving distances d (partner i ^ d). The network
// has `width` inputs, n rounded up to a power of two (the host passes it with the launch shape), as if the
// list were padded with +infinity: a comparator whose upper element lies at or past n would never swap,
// so it is skipped and the padding never moves. log2(width) * (log2(width) + 1) / 2 phases of width / 2
// comparators each. The phases are one flat loop, not two nested ones, and no loop is unrolled: each
// live value past the 15 registers spills to a thread frame, which takes memory from the list.

__device__ void compare_exchange(int* d, int i, int j) {     // i < j
    int x = d[i];
    int y = d[j];
    if (x > y) {
        d[i] = y;
        d[j] = x;
    }
}

__global__ void calc_sort(int* data, int n, int width) {
    int size = 2;                                             // the blocks being merged
    int d = 1;                                                // the phase's distance
    #pragma unroll 1
    while (size <= width) {
        int partner_mask = 2 * d == size ? size - 1 : d;     // the mirror first, then distance d
        #pragma unroll 1
        for (int c = threadIdx.x; 2 * c < width; c += blockDim.x) {
            int i = 2 * c - (c & (d - 1));                    // the c-th index with bit d clear
            int j = i ^ partner_mask;
            if (j < n) compare_exchange(data, i, j);
        }
        __syncthreads();
        if (d == 1) {                                         // the next merge, twice as wide
            size <<= 1;
            d = size >> 1;
        } else {
            d >>= 1;
        }
    }
}
