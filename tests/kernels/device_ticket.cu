// A __device__ global counter hands out tickets: every thread gets a distinct one.
__device__ int next_ticket = 100;

__global__ void take_ticket(int* ticket, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) ticket[i] = atomicAdd(&next_ticket, 1);
}
