/* stdlib.h -- host-side stub for qgpu-min's device-only compilation (declarations only). */
#ifndef QGPU_STDLIB_STUB_H
#define QGPU_STDLIB_STUB_H
typedef __SIZE_TYPE__ size_t;
#define EXIT_SUCCESS 0
#define EXIT_FAILURE 1
#define RAND_MAX 2147483647
#ifdef __cplusplus
extern "C" {
#endif
void *malloc(size_t n);
void *calloc(size_t n, size_t size);
void *realloc(void *p, size_t n);
void free(void *p);
void exit(int status);
void abort(void);
int atoi(const char *s);
long atol(const char *s);
long strtol(const char *s, char **end, int base);
int rand(void);
void srand(unsigned int seed);
#ifdef __cplusplus
}
#endif
#endif
