/* stdio.h -- host-side stub for qgpu-min's device-only compilation: declarations only, so .cu files
 * whose main() prints results compile. The device side never calls these. */
#ifndef QGPU_STDIO_STUB_H
#define QGPU_STDIO_STUB_H
typedef __SIZE_TYPE__ size_t;
typedef struct _qgpu_FILE FILE;
#ifdef __cplusplus
extern "C" {
#endif
extern FILE *stdin, *stdout, *stderr;
/* printf is also callable from kernels, as in CUDA: clang emits a call to vprintf there. */
__attribute__((host)) __attribute__((device)) int printf(const char *fmt, ...);
int fprintf(FILE *f, const char *fmt, ...);
int sprintf(char *s, const char *fmt, ...);
int snprintf(char *s, size_t n, const char *fmt, ...);
int scanf(const char *fmt, ...);
int puts(const char *s);
int putchar(int c);
int fflush(FILE *f);
FILE *fopen(const char *path, const char *mode);
int fclose(FILE *f);
#ifdef __cplusplus
}
#endif
#endif
