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

enum { SPAN_ROWS = 32 };

/* Rows [r0, r1): a stretch with no nonzero at all (indptr equal at both ends; a circuit layer's matrices
 * are mostly such stretches) is written +0 at once, as the empty sums would be; others are halved down to
 * short runs summed row by row. */
static void rows_span(const sparse_args *a, const float *x, float *y, size_t r0, size_t r1) {
    if (a->indptr[r0] == a->indptr[r1]) {
        memset(y + r0, 0, (r1 - r0) * sizeof *y);
        return;
    }
    if (r1 - r0 > SPAN_ROWS) {
        size_t mid = r0 + (r1 - r0) / 2;
        rows_span(a, x, y, r0, mid);
        rows_span(a, x, y, mid, r1);
        return;
    }
    for (size_t r = r0; r < r1; r++) {
        float acc = 0.0f;
        for (int64_t e = a->indptr[r]; e < a->indptr[r + 1]; e++)
            acc += qgpu_bf16_value(a->values[e]) * x[a->indices[e]];
        y[r] = acc;
    }
}

static void sparse_rows(void *ctx, size_t r0, size_t r1) {
    const sparse_args *a = (const sparse_args *)ctx;
    for (size_t t = 0; t < a->n; t++) rows_span(a, a->x + t * a->in, a->y + t * a->out, r0, r1);
}

void qgpu_sparse_matmul(size_t out, size_t in, const int64_t *indptr, const int32_t *indices,
                        const uint16_t *values, const float *x, size_t n, float *y) {
    sparse_args a = {out, in, indptr, indices, values, x, n, y};
    size_t nnz = (size_t)indptr[out];
    qgpu_parallel_for(out, 16, (nnz + out) * (n ? n : 1), sparse_rows, &a);
}


/* The dense bf16 bits of a CSR matrix with f32 values that are bf16 values (each one's top 16 bits): out
 * [rows, cols] must hold zeros; row r's values go to out[r, indices[...]]. */
void qgpu_csr_bf16_bits(size_t rows, size_t cols, const int64_t *indptr, const int32_t *indices, const float *values,
                        uint16_t *out) {
    for (size_t r = 0; r < rows; r++)
        for (int64_t e = indptr[r]; e < indptr[r + 1]; e++)
            out[r * cols + (size_t)indices[e]] = (uint16_t)(qgpu_float_bits(values[e]) >> 16);
}
