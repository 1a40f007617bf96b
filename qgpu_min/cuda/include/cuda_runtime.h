/* cuda_runtime.h -- a stub of the CUDA runtime API for qgpu-min's device-only compilation.
 *
 * The front end compiles only the device side of a .cu file, but clang still parses and checks the
 * host code in it (main(), cudaMalloc, kernel<<<grid, block>>>(...)). These declarations let such a
 * file compile; nothing here is ever called or linked. The device environment itself comes from
 * qgpu_prelude.h, which the front end force-includes before this file.
 */
#ifndef QGPU_CUDA_RUNTIME_STUB_H
#define QGPU_CUDA_RUNTIME_STUB_H

typedef __SIZE_TYPE__ size_t;

enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem, sharedMemPerBlock;
  int regsPerBlock, warpSize, maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
  int clockRate, major, minor, multiProcessorCount;
};

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

extern "C" {
cudaError_t cudaMalloc(void **ptr, size_t size);
cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned int flags = 1);
cudaError_t cudaMallocHost(void **ptr, size_t size);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream = 0);
cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset = 0,
                               enum cudaMemcpyKind kind = cudaMemcpyHostToDevice);
cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count, size_t offset = 0,
                                 enum cudaMemcpyKind kind = cudaMemcpyDeviceToHost);
cudaError_t cudaMemset(void *ptr, int value, size_t count);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t error);
cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

/* What clang's <<<grid, block>>> launch syntax expands to on the host side. */
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared = 0, cudaStream_t stream = 0);
cudaError_t cudaConfigureCall(dim3 grid, dim3 block, size_t shared = 0, cudaStream_t stream = 0);
cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args, size_t shared,
                             cudaStream_t stream);
}

/* The typed overloads the real runtime offers, so cudaMalloc(&int_ptr, n) compiles. */
template <class T> static inline cudaError_t cudaMalloc(T **ptr, size_t size) {
  return cudaMalloc((void **)ptr, size);
}
template <class T> static inline cudaError_t cudaMallocManaged(T **ptr, size_t size, unsigned int flags = 1) {
  return cudaMallocManaged((void **)ptr, size, flags);
}
template <class T> static inline cudaError_t cudaMemcpyToSymbol(const T &symbol, const void *src, size_t count,
                                                                 size_t offset = 0,
                                                                 enum cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
  return cudaMemcpyToSymbol((const void *)&symbol, src, count, offset, kind);
}

#endif /* QGPU_CUDA_RUNTIME_STUB_H */
