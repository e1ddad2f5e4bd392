// top_k along dim 0: F32 [n, T] -> I32 [k, T], per column the ids of its k
// largest values, largest first (the router of a mixture of experts). k
// passes over the column: k is a handful, n the number of experts. Ties go
// to the lower id; NaN compares false, so it is never chosen over a number.
#include <stdio.h>
#include <stdlib.h>

#include "ops.h"

extern "C" void ggml_compute_forward_top_k(const ggml_compute_params *p, ggml_tensor *dst) {
    const ggml_tensor *a = dst->src[0];
    const int64_t n = a->ne[0], k = dst->ne[0];
    if (a->type != GGML_TYPE_F32 || dst->type != GGML_TYPE_I32 || dst->ne[1] != a->ne[1] || k > n) {
        fprintf(stderr, "pinfer: top_k: needs F32 src [n, T] and I32 dst [k <= n, T]\n");
        abort();
    }
    int64_t r0, r1;
    ggml_split_range(a->ne[1], p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const char *x = (const char *)a->data + r * a->nb[1];
        int32_t *out = (int32_t *)((char *)dst->data + r * dst->nb[1]);
        for (int64_t j = 0; j < k; j++) {
            int32_t best = -1;
            float bv = 0.0f;
            for (int64_t i = 0; i < n; i++) {
                bool taken = false;
                for (int64_t q = 0; q < j && !taken; q++) taken = *(int32_t *)((char *)out + q * dst->nb[0]) == i;
                if (taken) continue;
                const float v = *(const float *)(x + i * a->nb[0]);
                if (best < 0 || v > bv || (bv != bv && v == v)) {
                    best = (int32_t)i;
                    bv = v;
                }
            }
            *(int32_t *)((char *)out + j * dst->nb[0]) = best;
        }
    }
}
