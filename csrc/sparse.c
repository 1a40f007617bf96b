/* CSR products for mostly-zero bf16 weights. Each row's nonzeros are summed in column order, one product
 * and one fp32 add at a time, which is exactly what the NumPy reference (np.add.at) does. */
#include <string.h>

#include "qgpu_core.h"

typedef struct {
    size_t out, in;
    const int64_t *indptr;
    const int32_t *indices;
    const uint16_t *values;
    const float *x;
    size_t n;
    float *y;
} sparse_args;

static inline float bf16_value(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void sparse_rows(void *ctx, size_t r0, size_t r1) {
    const sparse_args *a = (const sparse_args *)ctx;
    for (size_t t = 0; t < a->n; t++) {
        const float *x = a->x + t * a->in;
        float *y = a->y + t * a->out;
        for (size_t r = r0; r < r1; r++) {
            float acc = 0.0f;
            for (int64_t e = a->indptr[r]; e < a->indptr[r + 1]; e++)
                acc += bf16_value(a->values[e]) * x[a->indices[e]];
            y[r] = acc;
        }
    }
}

void qgpu_sparse_matmul(size_t out, size_t in, const int64_t *indptr, const int32_t *indices,
                        const uint16_t *values, const float *x, size_t n, float *y) {
    sparse_args a = {out, in, indptr, indices, values, x, n, y};
    size_t nnz = (size_t)indptr[out];
    qgpu_parallel_for(out, 16, (nnz + out) * (n ? n : 1), sparse_rows, &a);
}

