/* string.h -- host-side stub for qgpu-min's device-only compilation (declarations only). */
#ifndef QGPU_STRING_STUB_H
#define QGPU_STRING_STUB_H
typedef __SIZE_TYPE__ size_t;
#ifdef __cplusplus
extern "C" {
#endif
void *memcpy(void *dst, const void *src, size_t n);
void *memset(void *p, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
int strcmp(const char *a, const char *b);
#ifdef __cplusplus
}
#endif
#endif
