/* stddef.h -- for qgpu-min's device-only compilation, from the compiler's predefined macros. */
#ifndef QGPU_STDDEF_H
#define QGPU_STDDEF_H
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
#ifndef NULL
#define NULL nullptr
#endif
#define offsetof(t, m) __builtin_offsetof(t, m)
#endif
