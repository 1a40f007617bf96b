/* Reading a compiled memory's rows from a DeltaNet state, as circuit/run.py's read_rows_ref does (its NumPy
 * reference): row r's value channels are S[heads[r], at[r], :]; its scale is their largest value; a field's
 * value is the element e whose summed channels (its sources' blocks, summed in source order, in double) are
 * the largest (the first such), and the row is an exact code only when every field's top is within tol of
 * the scale (relative) and every other element within tol * scale of 0. A row holding a NaN or an infinity
 * is not vouched for here (NumPy's rules decide it: the caller runs the reference). It reads only the rows
 * asked for and allocates nothing, so a check between decode steps leaves the engine's weights in the
 * caches. */
#include <math.h>

#include "qgpu_core.h"

int64_t qgpu_read_rows(const float *S, size_t dk, size_t dv, const int64_t *heads, const int64_t *at, size_t n_rows,
                       size_t n_groups, const int64_t *g_fields, const int64_t *g_sources, const int64_t *g_size,
                       const int64_t *idx, const int64_t *chans, size_t n_fields, double tol, int64_t *out) {
    for (size_t r = 0; r < n_rows; r++) {
        const float *v = S + ((size_t)heads[r] * dk + (size_t)at[r]) * dv;
        double scale = -INFINITY;
        for (size_t c = 0; c < dv; c++) {
            if (!isfinite(v[c])) return (int64_t)r;
            if ((double)v[c] > scale) scale = (double)v[c];
        }
        if (!(scale > 0)) return (int64_t)r;
        const int64_t *fi = idx, *ch = chans;
        for (size_t g = 0; g < n_groups; g++) {
            size_t nf = (size_t)g_fields[g], ns = (size_t)g_sources[g], size = (size_t)g_size[g];
            for (size_t f = 0; f < nf; f++, ch += ns * size) {
                double top = -INFINITY, rest = 0.0;
                size_t e = 0;
                for (size_t k = 0; k < size; k++) {
                    double sum = (double)v[ch[k]];
                    for (size_t s = 1; s < ns; s++) sum += (double)v[ch[s * size + k]];
                    if (sum > top) {
                        if (k > 0 && fabs(top) > rest) rest = fabs(top);
                        top = sum;
                        e = k;
                    } else if (fabs(sum) > rest) {
                        rest = fabs(sum);
                    }
                }
                if (fabs(top / scale - 1.0) > tol || rest > tol * scale) return (int64_t)r;
                out[r * n_fields + (size_t)fi[f]] = (int64_t)e;
            }
            fi += nf;
        }
    }
    return -1;
}
