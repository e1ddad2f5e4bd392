// argmax along dim 0: F32 [ne0, ne1, ...] -> I32 [ne1, ...], one index per row.
// Ties go to the first maximum. NaN compares false, so it is never chosen
// unless it is element 0 (then nothing beats it: garbage in, index 0 out).
#include <stdio.h>
#include <stdlib.h>

#include "ops.h"

extern "C" void ggml_compute_forward_argmax(const ggml_compute_params *p, ggml_tensor *dst) {
    const ggml_tensor *a = dst->src[0];
    if (a->type != GGML_TYPE_F32 || dst->type != GGML_TYPE_I32 || ggml_nelements(dst) != ggml_nrows(a)) {
        fprintf(stderr, "pinfer: argmax: needs F32 src and I32 dst with one element per row\n");
        abort();
    }
    const int64_t ne0 = a->ne[0];
    int64_t r0, r1;
    ggml_split_range(ggml_nrows(a), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const char *x = (const char *)a->data + ggml_row_offset(a, a, r);
        const size_t s = a->nb[0];
        float best = *(const float *)x;
        int32_t bi = 0;
        for (int64_t i = 1; i < ne0; i++) {
            const float v = *(const float *)(x + i * s);
            if (v > best) {
                best = v;
                bi = (int32_t)i;
            }
        }
        // dst is contiguous with ne = rows of a: element r.
        *(int32_t *)((char *)dst->data + r * sizeof(int32_t)) = bi;
    }
}
