// Data movement: dup (contiguous copy of a possibly strided tensor), cpy
// (copy into another tensor's memory, converting type) and get_rows.
//
// dup/cpy visit the elements of src0 in logical order (dim 0 fastest) and
// write them to dst's elements in its own logical order, so the two may have
// different shapes with the same element count, and either side may have any
// strides. Work is split by rows of src0.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

namespace {

[[noreturn]] void fail(const char *op, const char *what) {
    fprintf(stderr, "pinfer: %s: %s\n", op, what);
    abort();
}

bool is_float_type(ggml_type t) { return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16; }

inline float load(ggml_type t, const char *p) {
    switch (t) {
        case GGML_TYPE_F32: return *(const float *)p;
        case GGML_TYPE_F16: return ggml_fp16_to_fp32(*(const ggml_fp16_t *)p);
        default: return ggml_bf16_to_fp32(*(const ggml_bf16_t *)p);
    }
}

inline void store(ggml_type t, char *p, float v) {
    switch (t) {
        case GGML_TYPE_F32: *(float *)p = v; break;
        case GGML_TYPE_F16: *(ggml_fp16_t *)p = ggml_fp32_to_fp16(v); break;
        default: *(ggml_bf16_t *)p = ggml_fp32_to_bf16(v); break;
    }
}

// A position in a tensor's logical index space that can be advanced by one
// element (dim 0 fastest) without divisions.
struct cursor {
    const ggml_tensor *t;
    int64_t i[4];
    size_t off;

    cursor(const ggml_tensor *t, int64_t linear) : t(t) {
        off = 0;
        for (int d = 0; d < 4; d++) {
            i[d] = linear % t->ne[d];
            linear /= t->ne[d];
            off += (size_t)i[d] * t->nb[d];
        }
    }
    void next() {
        for (int d = 0; d < 4; d++) {
            if (++i[d] < t->ne[d]) {
                off += t->nb[d];
                return;
            }
            off -= (size_t)(i[d] - 1) * t->nb[d];
            i[d] = 0;
        }
    }
};

// Copies src's rows [r0, r1) to the same logical elements of dst.
void copy_rows(const char *name, const ggml_tensor *src, ggml_tensor *dst, int64_t r0, int64_t r1) {
    const ggml_type ts = src->type, td = dst->type;
    const int64_t ne0 = src->ne[0];
    if (r0 >= r1) return;

    // Fast path: same shape and contiguous rows on both sides.
    if (ggml_are_same_shape(src, dst) && ggml_is_contiguous_rows(src) && ggml_is_contiguous_rows(dst)) {
        const ggml_type_traits *tts = ggml_get_type_traits(ts);
        const ggml_cpu_type_traits *ctd = ggml_get_cpu_type_traits(td);
        for (int64_t r = r0; r < r1; r++) {
            const char *x = (const char *)src->data + ggml_row_offset(src, src, r);
            char *y = (char *)dst->data + ggml_row_offset(src, dst, r);
            if (ts == td) {
                memcpy(y, x, ggml_row_size(ts, ne0));
            } else if (ts == GGML_TYPE_F32 && ctd->from_float) {
                ctd->from_float((const float *)x, y, ne0);  // F16/BF16/quantized
            } else if (td == GGML_TYPE_F32 && tts->to_float) {
                tts->to_float(x, (float *)y, ne0);
            } else if (is_float_type(ts) && is_float_type(td)) {
                for (int64_t i = 0; i < ne0; i++) store(td, y + i * dst->nb[0], load(ts, x + i * src->nb[0]));
            } else {
                fail(name, "unsupported type pair");
            }
        }
        return;
    }

    // General path: element by element through two cursors.
    if (ts == td && !ggml_get_type_traits(ts)->is_quantized) {
        const size_t es = ggml_type_size(ts);
        cursor cs(src, r0 * ne0), cd(dst, r0 * ne0);
        for (int64_t k = (r1 - r0) * ne0; k > 0; k--, cs.next(), cd.next()) {
            memcpy((char *)dst->data + cd.off, (const char *)src->data + cs.off, es);
        }
    } else if (is_float_type(ts) && is_float_type(td)) {
        cursor cs(src, r0 * ne0), cd(dst, r0 * ne0);
        for (int64_t k = (r1 - r0) * ne0; k > 0; k--, cs.next(), cd.next()) {
            store(td, (char *)dst->data + cd.off, load(ts, (const char *)src->data + cs.off));
        }
    } else {
        fail(name, "quantized tensors can only be copied row by row between same-shaped tensors");
    }
}

}  // namespace

extern "C" {

void ggml_compute_forward_dup(const ggml_compute_params *p, ggml_tensor *dst) {
    const ggml_tensor *src = dst->src[0];
    if (ggml_nelements(src) != ggml_nelements(dst)) fail("dup", "element counts differ");
    int64_t r0, r1;
    ggml_split_range(ggml_nrows(src), p->ith, p->nth, &r0, &r1);
    copy_rows("dup", src, dst, r0, r1);
}

// dst is a view of src[1]; the data goes to dst->data.
void ggml_compute_forward_cpy(const ggml_compute_params *p, ggml_tensor *dst) {
    const ggml_tensor *src = dst->src[0];
    if (ggml_nelements(src) != ggml_nelements(dst)) fail("cpy", "element counts differ");
    int64_t r0, r1;
    ggml_split_range(ggml_nrows(src), p->ith, p->nth, &r0, &r1);
    copy_rows("cpy", src, dst, r0, r1);
}

// a [K, R, A2, A3] of any type, idx I32 [n, B1, B2] -> F32 [K, n, B1, B2];
// row idx[j, i1, i2] of plane (i1, i2) of a.
void ggml_compute_forward_get_rows(const ggml_compute_params *p, ggml_tensor *dst) {
    const ggml_tensor *a = dst->src[0];
    const ggml_tensor *idx = dst->src[1];
    if (idx->type != GGML_TYPE_I32) fail("get_rows", "indices must be I32");
    if (dst->type != GGML_TYPE_F32) fail("get_rows", "dst must be F32");
    if (!ggml_is_contiguous_rows(a)) fail("get_rows", "rows of src0 must be contiguous");
    if (dst->ne[0] != a->ne[0] || dst->ne[1] != idx->ne[0] || dst->ne[2] != idx->ne[1] || dst->ne[3] != idx->ne[2])
        fail("get_rows", "dst must be [ne0 of src0, shape of idx]");
    const ggml_type_traits *tt = ggml_get_type_traits(a->type);
    if (a->type != GGML_TYPE_F32 && (!tt || !tt->to_float)) fail("get_rows", "src0 type has no to_float");
    if (dst->nb[0] != sizeof(float)) fail("get_rows", "dst rows must be contiguous");

    const int64_t n = idx->ne[0], ne0 = a->ne[0];
    int64_t r0, r1;
    ggml_split_range(ggml_nrows(dst), p->ith, p->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t j = r % n;
        const int64_t i1 = (r / n) % idx->ne[1];
        const int64_t i2 = r / (n * idx->ne[1]);
        const int32_t row = *(const int32_t *)((const char *)idx->data + j * idx->nb[0] + i1 * idx->nb[1] +
                                               i2 * idx->nb[2]);
        if (row < 0 || row >= a->ne[1]) {
            fprintf(stderr, "pinfer: get_rows: index %d out of range [0, %lld)\n", row, (long long)a->ne[1]);
            abort();
        }
        const char *x = (const char *)a->data + row * a->nb[1] + (i1 % a->ne[2]) * a->nb[2] + (i2 % a->ne[3]) * a->nb[3];
        float *y = (float *)((char *)dst->data + j * dst->nb[1] + i1 * dst->nb[2] + i2 * dst->nb[3]);
        if (a->type == GGML_TYPE_F32) {
            memcpy(y, x, (size_t)ne0 * sizeof(float));
        } else {
            tt->to_float(x, y, ne0);
        }
    }
}

}  // extern "C"
