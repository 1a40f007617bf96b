#ifndef QGPU_CORE_H
#define QGPU_CORE_H
#include <stdint.h>
#include <stddef.h>

/* CDEF BEGIN */
int qgpu_core_version(void);
/* CDEF END */

#endif
