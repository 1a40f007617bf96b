// The optional CUDA path (--device cuda): the dense bf16-weight products of the model's layers on an NVIDIA
// GPU, as a small shared library that qgpu_min/model/cuda.py builds with nvcc on first use and loads with
// cffi. Weights are uploaded once and stay on the GPU; each product copies its activations in and its
// results out. Everything else (CSR circuit layers, the recurrences, norms, the LM head) stays on the CPU.
//
// The arithmetic is the C core's (csrc/dense.c): bf16 weights widened exactly to fp32, fp32 products and
// sums, with a fixed order of its own: lane l of a warp accumulates columns l, l + 32, ... with fmaf, then
// a fixed shuffle tree adds the 32 lanes. A token's result does not depend on how many tokens a call holds,
// so a matvec equals the same token's row of a matmul bit for bit, as on the CPU.
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

namespace {

constexpr int WARP = 32;
constexpr int ROWS_PER_BLOCK = 8;   // one warp per weight row
constexpr int TOKENS_PER_WARP = 8;  // each weight a warp loads serves this many tokens

char last_error[512] = "";
pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;  // guards the staging buffers below
float *staged_x = nullptr, *staged_y = nullptr;
size_t staged_x_bytes = 0, staged_y_bytes = 0;

int fail(const char *what, cudaError_t e) {
    snprintf(last_error, sizeof last_error, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return -1;
}

int grow(float **buf, size_t *have, size_t want) {
    if (*have >= want) return 0;
    if (*buf) cudaFree(*buf);
    *buf = nullptr;
    *have = 0;
    cudaError_t e = cudaMalloc((void **)buf, want);
    if (e != cudaSuccess) return fail("cudaMalloc (activations)", e);
    *have = want;
    return 0;
}

__device__ __forceinline__ float bf16_value(uint16_t bits) { return __uint_as_float((uint32_t)bits << 16); }

// Y[n, out] = X[n, in] . W[out, in]^T: warp (row, tokens t0 .. t0 + TOKENS_PER_WARP) of the grid.
__global__ void matmul_bf16_kernel(const uint16_t *__restrict__ w, size_t out, size_t in,
                                   const float *__restrict__ x, size_t n, float *__restrict__ y) {
    const int lane = threadIdx.x % WARP;
    const size_t row = (size_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
    const size_t t0 = (size_t)blockIdx.y * TOKENS_PER_WARP;
    if (row >= out) return;  // the whole warp: the shuffles below see full warps only
    const size_t tokens = n - t0 < (size_t)TOKENS_PER_WARP ? n - t0 : (size_t)TOKENS_PER_WARP;
    float acc[TOKENS_PER_WARP];
#pragma unroll
    for (int j = 0; j < TOKENS_PER_WARP; j++) acc[j] = 0.0f;
    const uint16_t *wr = w + row * in;
    for (size_t k = lane; k < in; k += WARP) {
        const float wk = bf16_value(wr[k]);
#pragma unroll
        for (int j = 0; j < TOKENS_PER_WARP; j++)
            if ((size_t)j < tokens) acc[j] = fmaf(wk, x[(t0 + j) * in + k], acc[j]);
    }
#pragma unroll
    for (int j = 0; j < TOKENS_PER_WARP; j++) {
        float v = acc[j];
        for (int offset = WARP / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
        if (lane == 0 && (size_t)j < tokens) y[(t0 + j) * out + row] = v;
    }
}

}  // namespace

extern "C" {

// The last error's text ("" if none).
const char *qgpu_cuda_error(void) { return last_error; }

// CUDA devices visible to this process, or -1 (see qgpu_cuda_error) when the runtime cannot tell, e.g. no
// driver is installed.
int qgpu_cuda_devices(void) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return fail("cudaGetDeviceCount", e);
    return count;
}

// Device 0's name into name[size]; 0 on success.
int qgpu_cuda_device_name(char *name, size_t size) {
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, 0);
    if (e != cudaSuccess) return fail("cudaGetDeviceProperties", e);
    snprintf(name, size, "%s", prop.name);
    return 0;
}

// A device copy of bytes at host, or NULL (see qgpu_cuda_error).
void *qgpu_cuda_upload(const void *host, size_t bytes) {
    void *dev = nullptr;
    cudaError_t e = cudaMalloc(&dev, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        fail("cudaMalloc (weights)", e);
        return nullptr;
    }
    e = cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        cudaFree(dev);
        fail("cudaMemcpy (weights)", e);
        return nullptr;
    }
    return dev;
}

int qgpu_cuda_free(void *dev) {
    cudaError_t e = cudaFree(dev);
    return e == cudaSuccess ? 0 : fail("cudaFree", e);
}

// y[n, out] (host) = x[n, in] (host) . W^T for W uploaded by qgpu_cuda_upload (bf16 bits [out, in]);
// 0 on success, -1 with qgpu_cuda_error set.
int qgpu_cuda_matmul_bf16(const void *w, size_t out, size_t in, const float *x, size_t n, float *y) {
    if (n == 0 || out == 0) return 0;
    pthread_mutex_lock(&lock);
    int rc = grow(&staged_x, &staged_x_bytes, n * in * sizeof(float));
    if (!rc) rc = grow(&staged_y, &staged_y_bytes, n * out * sizeof(float));
    cudaError_t e = cudaSuccess;
    if (!rc && in) e = cudaMemcpy(staged_x, x, n * in * sizeof(float), cudaMemcpyHostToDevice);
    if (!rc && e != cudaSuccess) rc = fail("cudaMemcpy (activations in)", e);
    // grid.y is at most 65535: longer prompts go in pieces of that many token groups
    const size_t piece = (size_t)65535 * TOKENS_PER_WARP;
    for (size_t t = 0; !rc && t < n; t += piece) {
        const size_t m = n - t < piece ? n - t : piece;
        dim3 grid((unsigned)((out + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK),
                  (unsigned)((m + TOKENS_PER_WARP - 1) / TOKENS_PER_WARP));
        matmul_bf16_kernel<<<grid, ROWS_PER_BLOCK * WARP>>>((const uint16_t *)w, out, in, staged_x + t * in, m,
                                                            staged_y + t * out);
        e = cudaGetLastError();
        if (e != cudaSuccess) rc = fail("matmul_bf16_kernel launch", e);
    }
    if (!rc) {
        e = cudaMemcpy(y, staged_y, n * out * sizeof(float), cudaMemcpyDeviceToHost);  // waits for the kernel
        if (e != cudaSuccess) rc = fail("cudaMemcpy (results out)", e);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

}  // extern "C"
