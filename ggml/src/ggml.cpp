// Contexts, tensors, lazily built operations and graphs.
#include "ggml.h"

#include <cassert>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>

#include "ggml-impl.h"

void ggml_abort(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ggml: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

// ---- context ----

enum obj_kind { OBJ_TENSOR, OBJ_GRAPH };

struct ggml_object {
    size_t offs;  // of the payload, from mem start
    size_t size;
    obj_kind kind;
    ggml_object *next;
};

struct ggml_context {
    char *mem;
    size_t mem_size;
    size_t used;
    bool owned;
    bool no_alloc;
    ggml_object *first, *last;
    ggml_backend *backend;  // of the nodes created next
};

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

ggml_context *ggml_init(ggml_init_params params) {
    ggml_context *ctx = (ggml_context *)calloc(1, sizeof(ggml_context));
    if (!ctx) return nullptr;
    ctx->mem_size = align_up(params.mem_size ? params.mem_size : 1024, GGML_DEFAULT_ALIGN);
    ctx->owned = params.mem_buffer == nullptr;
    ctx->mem = ctx->owned ? (char *)aligned_alloc(GGML_DEFAULT_ALIGN, ctx->mem_size) : (char *)params.mem_buffer;
    if (!ctx->mem) {
        free(ctx);
        return nullptr;
    }
    ctx->no_alloc = params.no_alloc;
    return ctx;
}

void ggml_free(ggml_context *ctx) {
    if (!ctx) return;
    if (ctx->owned) free(ctx->mem);
    free(ctx);
}

size_t ggml_used_mem(const ggml_context *ctx) { return ctx->used; }
size_t ggml_tensor_overhead(void) { return align_up(sizeof(ggml_object), 16) + align_up(sizeof(ggml_tensor), GGML_DEFAULT_ALIGN) + GGML_DEFAULT_ALIGN; }
bool ggml_get_no_alloc(ggml_context *ctx) { return ctx->no_alloc; }
void ggml_set_no_alloc(ggml_context *ctx, bool no_alloc) { ctx->no_alloc = no_alloc; }

static void *ctx_alloc_object(ggml_context *ctx, obj_kind kind, size_t size) {
    // layout: [object header][payload], payload aligned to GGML_DEFAULT_ALIGN
    size_t hdr = align_up(ctx->used, 16);
    size_t payload = align_up(hdr + sizeof(ggml_object), GGML_DEFAULT_ALIGN);
    size_t end = payload + size;
    if (end > ctx->mem_size) {
        ggml_abort("context arena full: need %zu bytes, have %zu (raise mem_size)", end, ctx->mem_size);
    }
    ggml_object *obj = (ggml_object *)(ctx->mem + hdr);
    obj->offs = payload;
    obj->size = size;
    obj->kind = kind;
    obj->next = nullptr;
    if (ctx->last) ctx->last->next = obj; else ctx->first = obj;
    ctx->last = obj;
    ctx->used = end;
    void *p = ctx->mem + payload;
    memset(p, 0, size);
    return p;
}

void ggml_set_backend(ggml_context *ctx, ggml_backend *backend) { ctx->backend = backend; }
ggml_backend *ggml_get_backend(const ggml_context *ctx) { return ctx->backend; }

ggml_tensor *ggml_get_first_tensor(const ggml_context *ctx) {
    for (ggml_object *o = ctx->first; o; o = o->next)
        if (o->kind == OBJ_TENSOR) return (ggml_tensor *)(ctx->mem + o->offs);
    return nullptr;
}

ggml_tensor *ggml_get_next_tensor(const ggml_context *ctx, ggml_tensor *t) {
    // the header sits at an alignment-dependent distance before t: find it by scanning
    ggml_object *o = ctx->first;
    for (; o; o = o->next)
        if (ctx->mem + o->offs == (char *)t) break;
    if (!o) return nullptr;
    for (o = o->next; o; o = o->next)
        if (o->kind == OBJ_TENSOR) return (ggml_tensor *)(ctx->mem + o->offs);
    return nullptr;
}

ggml_tensor *ggml_get_tensor(ggml_context *ctx, const char *name) {
    for (ggml_object *o = ctx->first; o; o = o->next) {
        if (o->kind != OBJ_TENSOR) continue;
        ggml_tensor *t = (ggml_tensor *)(ctx->mem + o->offs);
        if (strcmp(t->name, name) == 0) return t;
    }
    return nullptr;
}

// ---- tensors ----

static void set_contiguous_strides(ggml_tensor *t) {
    const ggml_type_traits *tr = ggml_get_type_traits(t->type);
    t->nb[0] = tr->type_size;
    t->nb[1] = t->nb[0] * (size_t)(t->ne[0] / tr->blck_size);
    for (int i = 2; i < GGML_MAX_DIMS; i++) t->nb[i] = t->nb[i - 1] * (size_t)t->ne[i - 1];
}

static ggml_tensor *new_tensor_impl(ggml_context *ctx, ggml_type type, int n_dims, const int64_t *ne,
                                    ggml_tensor *view_src, size_t view_offs) {
    const ggml_type_traits *tr = ggml_get_type_traits(type);
    if (!tr) ggml_abort("unknown tensor type %d", (int)type);
    if (n_dims < 1 || n_dims > GGML_MAX_DIMS) ggml_abort("bad n_dims %d", n_dims);
    if (ne[0] % tr->blck_size != 0) ggml_abort("ne0=%lld not a multiple of %s block size", (long long)ne[0], tr->name);
    if (view_src && view_src->view_src) {
        view_offs += view_src->view_offs;
        view_src = view_src->view_src;
    }
    size_t data_size = 0;
    if (!view_src && !ctx->no_alloc) {
        ggml_tensor tmp = {};
        tmp.type = type;
        for (int i = 0; i < GGML_MAX_DIMS; i++) tmp.ne[i] = i < n_dims ? ne[i] : 1;
        set_contiguous_strides(&tmp);
        data_size = align_up(ggml_nbytes(&tmp), GGML_DEFAULT_ALIGN);
    }
    size_t hdr = align_up(sizeof(ggml_tensor), GGML_DEFAULT_ALIGN);
    ggml_tensor *t = (ggml_tensor *)ctx_alloc_object(ctx, OBJ_TENSOR, hdr + data_size);
    t->type = type;
    for (int i = 0; i < GGML_MAX_DIMS; i++) t->ne[i] = i < n_dims ? ne[i] : 1;
    set_contiguous_strides(t);
    t->op = GGML_OP_NONE;
    t->view_src = view_src;
    t->view_offs = view_offs;
    t->backend = ctx->backend;
    if (view_src) t->buffer = view_src->buffer;
    if (view_src && view_src->data) t->data = (char *)view_src->data + view_offs;
    else if (data_size) t->data = (char *)t + hdr;
    return t;
}

ggml_tensor *ggml_new_tensor(ggml_context *ctx, ggml_type type, int n_dims, const int64_t *ne) {
    return new_tensor_impl(ctx, type, n_dims, ne, nullptr, 0);
}
ggml_tensor *ggml_new_tensor_1d(ggml_context *ctx, ggml_type type, int64_t ne0) {
    return ggml_new_tensor(ctx, type, 1, &ne0);
}
ggml_tensor *ggml_new_tensor_2d(ggml_context *ctx, ggml_type type, int64_t ne0, int64_t ne1) {
    const int64_t ne[2] = {ne0, ne1};
    return ggml_new_tensor(ctx, type, 2, ne);
}
ggml_tensor *ggml_new_tensor_3d(ggml_context *ctx, ggml_type type, int64_t ne0, int64_t ne1, int64_t ne2) {
    const int64_t ne[3] = {ne0, ne1, ne2};
    return ggml_new_tensor(ctx, type, 3, ne);
}
ggml_tensor *ggml_new_tensor_4d(ggml_context *ctx, ggml_type type, int64_t ne0, int64_t ne1, int64_t ne2,
                                int64_t ne3) {
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    return ggml_new_tensor(ctx, type, 4, ne);
}
ggml_tensor *ggml_dup_tensor(ggml_context *ctx, const ggml_tensor *src) {
    return ggml_new_tensor(ctx, src->type, GGML_MAX_DIMS, src->ne);
}

ggml_tensor *ggml_set_name(ggml_tensor *t, const char *name) {
    snprintf(t->name, sizeof(t->name), "%s", name);
    return t;
}
void ggml_set_input(ggml_tensor *t) { t->flags |= GGML_TENSOR_FLAG_INPUT; }
void ggml_set_output(ggml_tensor *t) { t->flags |= GGML_TENSOR_FLAG_OUTPUT; }

int64_t ggml_nelements(const ggml_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }
int64_t ggml_nrows(const ggml_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

size_t ggml_nbytes(const ggml_tensor *t) {
    for (int i = 0; i < GGML_MAX_DIMS; i++)
        if (t->ne[i] <= 0) return 0;
    const int64_t blck = ggml_blck_size(t->type);
    size_t n = (size_t)(t->ne[0] / blck) * t->nb[0];
    for (int i = 1; i < GGML_MAX_DIMS; i++) n += (size_t)(t->ne[i] - 1) * t->nb[i];
    return n;
}

int ggml_n_dims(const ggml_tensor *t) {
    for (int i = GGML_MAX_DIMS - 1; i >= 1; i--)
        if (t->ne[i] > 1) return i + 1;
    return 1;
}

bool ggml_is_contiguous_rows(const ggml_tensor *t) { return t->nb[0] == ggml_type_size(t->type); }

bool ggml_is_contiguous(const ggml_tensor *t) {
    size_t expect = ggml_type_size(t->type);
    if (t->nb[0] != expect) return false;
    expect *= (size_t)(t->ne[0] / ggml_blck_size(t->type));
    for (int i = 1; i < GGML_MAX_DIMS; i++) {
        if (t->ne[i] != 1 && t->nb[i] != expect) return false;
        expect *= (size_t)t->ne[i];
    }
    return true;
}

bool ggml_are_same_shape(const ggml_tensor *a, const ggml_tensor *b) {
    for (int i = 0; i < GGML_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i]) return false;
    return true;
}

bool ggml_can_repeat(const ggml_tensor *small, const ggml_tensor *big) {
    for (int i = 0; i < GGML_MAX_DIMS; i++)
        if (small->ne[i] <= 0 || big->ne[i] % small->ne[i] != 0) return false;
    return true;
}

// ---- operations ----

#define GGML_OP_TRAITS_ROW(NAME, name, n_src_min, n_src_max, view, prec, work) \
    {#NAME, #name, n_src_min, n_src_max, view != 0, prec != 0},
static const ggml_op_traits k_op_traits[] = {GGML_OP_LIST(GGML_OP_TRAITS_ROW)};
#undef GGML_OP_TRAITS_ROW
static_assert(sizeof(k_op_traits) / sizeof(k_op_traits[0]) == GGML_OP_COUNT, "one row per op");

const ggml_op_traits *ggml_get_op_traits(ggml_op op) {
    return (int)op >= 0 && op < GGML_OP_COUNT ? &k_op_traits[op] : nullptr;
}

const char *ggml_op_name(ggml_op op) { return (int)op >= 0 && op < GGML_OP_COUNT ? k_op_traits[op].name : "?"; }

ggml_op ggml_op_from_name(const char *name) {
    for (int i = 0; i < GGML_OP_COUNT; i++)
        if (strcasecmp(k_op_traits[i].key, name) == 0) return (ggml_op)i;
    return GGML_OP_COUNT;
}

bool ggml_op_takes_prec(ggml_op op) { return (int)op >= 0 && op < GGML_OP_COUNT && k_op_traits[op].takes_prec; }

static ggml_tensor *new_f32_like(ggml_context *ctx, const ggml_tensor *a) {
    return ggml_new_tensor(ctx, GGML_TYPE_F32, GGML_MAX_DIMS, a->ne);
}

static void set_f32_param(ggml_tensor *t, int i, float v) { memcpy(&t->op_params[i], &v, sizeof(v)); }

static ggml_tensor *unary(ggml_context *ctx, ggml_op op, ggml_tensor *a) {
    ggml_tensor *r = new_f32_like(ctx, a);
    r->op = op;
    r->src[0] = a;
    return r;
}

static ggml_tensor *binary_bcast(ggml_context *ctx, ggml_op op, ggml_tensor *a, ggml_tensor *b) {
    if (!ggml_can_repeat(b, a)) ggml_abort("%s: b cannot be broadcast to a", ggml_op_name(op));
    ggml_tensor *r = new_f32_like(ctx, a);
    r->op = op;
    r->src[0] = a;
    r->src[1] = b;
    return r;
}

static ggml_tensor *gated(ggml_context *ctx, ggml_op op, ggml_tensor *a, ggml_tensor *b) {
    if (!ggml_are_same_shape(a, b)) ggml_abort("%s: a and b differ in shape", ggml_op_name(op));
    ggml_tensor *r = new_f32_like(ctx, a);
    r->op = op;
    r->src[0] = a;
    r->src[1] = b;
    return r;
}

ggml_tensor *ggml_add(ggml_context *ctx, ggml_tensor *a, ggml_tensor *b) { return binary_bcast(ctx, GGML_OP_ADD, a, b); }
ggml_tensor *ggml_mul(ggml_context *ctx, ggml_tensor *a, ggml_tensor *b) { return binary_bcast(ctx, GGML_OP_MUL, a, b); }

ggml_tensor *ggml_scale(ggml_context *ctx, ggml_tensor *a, float s) {
    ggml_tensor *r = unary(ctx, GGML_OP_SCALE, a);
    set_f32_param(r, 0, s);
    return r;
}

ggml_tensor *ggml_rms_norm(ggml_context *ctx, ggml_tensor *a, float eps) {
    ggml_tensor *r = unary(ctx, GGML_OP_RMS_NORM, a);
    set_f32_param(r, 0, eps);
    return r;
}

ggml_tensor *ggml_norm(ggml_context *ctx, ggml_tensor *a, float eps) {
    ggml_tensor *r = unary(ctx, GGML_OP_NORM, a);
    set_f32_param(r, 0, eps);
    return r;
}

ggml_tensor *ggml_mul_mat(ggml_context *ctx, ggml_tensor *a, ggml_tensor *b) {
    if (a->ne[0] != b->ne[0]) ggml_abort("mul_mat: K mismatch %lld vs %lld", (long long)a->ne[0], (long long)b->ne[0]);
    if (b->ne[2] % a->ne[2] || b->ne[3] % a->ne[3]) ggml_abort("mul_mat: cannot broadcast a over b");
    if (!ggml_is_contiguous_rows(a)) ggml_abort("mul_mat: rows of a must be contiguous");
    if (b->type != GGML_TYPE_F32) ggml_abort("mul_mat: b must be F32");
    ggml_tensor *r = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, a->ne[1], b->ne[1], b->ne[2], b->ne[3]);
    r->op = GGML_OP_MUL_MAT;
    r->src[0] = a;
    r->src[1] = b;
    return r;
}

void ggml_set_prec(ggml_tensor *t, ggml_prec prec) {
    if (!ggml_op_takes_prec(t->op))
        ggml_abort("set_prec: %s is not a weight product", t->name);
    t->op_params[GGML_PREC_PARAM] = (int32_t)prec;
}

ggml_tensor *ggml_get_rows(ggml_context *ctx, ggml_tensor *a, ggml_tensor *idx) {
    if (idx->type != GGML_TYPE_I32) ggml_abort("get_rows: indices must be I32");
    if (idx->ne[3] != 1) ggml_abort("get_rows: indices must have at most 3 dims");
    if (idx->ne[1] % a->ne[2] || idx->ne[2] % a->ne[3]) ggml_abort("get_rows: cannot broadcast a's planes over idx");
    ggml_tensor *r = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, a->ne[0], idx->ne[0], idx->ne[1], idx->ne[2]);
    r->op = GGML_OP_GET_ROWS;
    r->src[0] = a;
    r->src[1] = idx;
    return r;
}

ggml_tensor *ggml_rope_ext(ggml_context *ctx, ggml_tensor *a, ggml_tensor *pos, ggml_tensor *freq_factors, int n_dims,
                           int mode, float freq_base, float freq_scale, float attn_factor) {
    if (pos->type != GGML_TYPE_I32 || pos->ne[0] != a->ne[2]) ggml_abort("rope: pos must be I32 [n_tokens]");
    if (n_dims > a->ne[0] || n_dims % 2) ggml_abort("rope: bad n_dims %d", n_dims);
    if (freq_factors && (freq_factors->type != GGML_TYPE_F32 || ggml_nelements(freq_factors) < n_dims / 2))
        ggml_abort("rope: freq_factors must be F32 with n_dims/2 elements");
    ggml_tensor *r = unary(ctx, GGML_OP_ROPE, a);
    r->src[1] = pos;
    r->src[2] = freq_factors;
    r->op_params[0] = n_dims;
    r->op_params[1] = mode;
    set_f32_param(r, 2, freq_base);
    set_f32_param(r, 3, freq_scale);
    set_f32_param(r, 4, attn_factor);
    return r;
}

ggml_tensor *ggml_rope(ggml_context *ctx, ggml_tensor *a, ggml_tensor *pos, int n_dims, int mode, float freq_base,
                       float freq_scale) {
    return ggml_rope_ext(ctx, a, pos, nullptr, n_dims, mode, freq_base, freq_scale, 1.0f);
}

ggml_tensor *ggml_soft_max_ext(ggml_context *ctx, ggml_tensor *a, ggml_tensor *mask, float scale) {
    if (mask && (mask->ne[0] != a->ne[0] || mask->ne[1] < a->ne[1] || mask->type != GGML_TYPE_F32))
        ggml_abort("soft_max: mask must be F32 [ne0, >= ne1]");
    ggml_tensor *r = unary(ctx, GGML_OP_SOFT_MAX, a);
    r->src[1] = mask;
    set_f32_param(r, 0, scale);
    return r;
}

ggml_tensor *ggml_relu(ggml_context *ctx, ggml_tensor *a) { return unary(ctx, GGML_OP_RELU, a); }
ggml_tensor *ggml_silu(ggml_context *ctx, ggml_tensor *a) { return unary(ctx, GGML_OP_SILU, a); }
ggml_tensor *ggml_gelu(ggml_context *ctx, ggml_tensor *a) { return unary(ctx, GGML_OP_GELU, a); }
ggml_tensor *ggml_tanh(ggml_context *ctx, ggml_tensor *a) { return unary(ctx, GGML_OP_TANH, a); }
ggml_tensor *ggml_swiglu(ggml_context *ctx, ggml_tensor *a, ggml_tensor *b) { return gated(ctx, GGML_OP_SWIGLU, a, b); }
ggml_tensor *ggml_reglu(ggml_context *ctx, ggml_tensor *a, ggml_tensor *b) { return gated(ctx, GGML_OP_REGLU, a, b); }
ggml_tensor *ggml_geglu(ggml_context *ctx, ggml_tensor *a, ggml_tensor *b) { return gated(ctx, GGML_OP_GEGLU, a, b); }

ggml_tensor *ggml_top_k(ggml_context *ctx, ggml_tensor *a, int k) {
    if (a->type != GGML_TYPE_F32 || a->ne[2] != 1 || a->ne[3] != 1) ggml_abort("top_k: a must be a 2-D F32 tensor");
    if (k < 1 || k > a->ne[0]) ggml_abort("top_k: k = %d outside [1, %lld]", k, (long long)a->ne[0]);
    ggml_tensor *r = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, k, a->ne[1]);
    r->op = GGML_OP_TOP_K;
    r->src[0] = a;
    return r;
}

ggml_tensor *ggml_mul_mat_id(ggml_context *ctx, ggml_tensor *as, ggml_tensor *b, ggml_tensor *ids) {
    if (as->ne[3] != 1) ggml_abort("mul_mat_id: as must be [K, M, n_expert]");
    if (as->ne[0] != b->ne[0]) ggml_abort("mul_mat_id: K mismatch %lld vs %lld", (long long)as->ne[0], (long long)b->ne[0]);
    if (!ggml_is_contiguous_rows(as)) ggml_abort("mul_mat_id: rows of as must be contiguous");
    if (b->type != GGML_TYPE_F32 || b->ne[3] != 1) ggml_abort("mul_mat_id: b must be F32 [K, 1 or n_used, T]");
    if (ids->type != GGML_TYPE_I32 || ids->ne[2] != 1 || ids->ne[3] != 1 || ids->ne[1] != b->ne[2])
        ggml_abort("mul_mat_id: ids must be I32 [n_used, T] with T = b's ne[2]");
    if (b->ne[1] != 1 && b->ne[1] != ids->ne[0]) ggml_abort("mul_mat_id: b's ne[1] must be 1 or n_used");
    ggml_tensor *r = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, as->ne[1], ids->ne[0], ids->ne[1]);
    r->op = GGML_OP_MUL_MAT_ID;
    r->src[0] = as;
    r->src[1] = b;
    r->src[2] = ids;
    return r;
}

ggml_tensor *ggml_mul_mat_id_masked(ggml_context *ctx, ggml_tensor *as, ggml_tensor *b, ggml_tensor *ids, ggml_tensor *mask) {
    ggml_tensor *r = ggml_mul_mat_id(ctx, as, b, ids);
    if (mask->type != GGML_TYPE_F32 || !ggml_are_same_shape(mask, r)) ggml_abort("mul_mat_id: mask must be F32 [M, n_used, T]");
    r->src[3] = mask;
    return r;
}

ggml_tensor *ggml_argmax(ggml_context *ctx, ggml_tensor *a) {
    if (a->type != GGML_TYPE_F32 || a->ne[2] != 1 || a->ne[3] != 1) ggml_abort("argmax: a must be a 2-D F32 tensor");
    ggml_tensor *r = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, a->ne[1]);
    r->op = GGML_OP_ARGMAX;
    r->src[0] = a;
    return r;
}

static ggml_tensor *view_of(ggml_context *ctx, ggml_tensor *a, ggml_op op, size_t offset) {
    ggml_tensor *r = new_tensor_impl(ctx, a->type, GGML_MAX_DIMS, a->ne, a, offset);
    for (int i = 0; i < GGML_MAX_DIMS; i++) r->nb[i] = a->nb[i];
    r->op = op;
    r->src[0] = a;
    return r;
}

ggml_tensor *ggml_cpy(ggml_context *ctx, ggml_tensor *a, ggml_tensor *b) {
    if (ggml_nelements(a) != ggml_nelements(b)) ggml_abort("cpy: element counts differ");
    ggml_tensor *r = view_of(ctx, b, GGML_OP_CPY, 0);
    r->src[0] = a;
    r->src[1] = b;
    return r;
}

ggml_tensor *ggml_cont(ggml_context *ctx, ggml_tensor *a) {
    ggml_tensor *r = ggml_new_tensor(ctx, a->type, GGML_MAX_DIMS, a->ne);
    r->op = GGML_OP_DUP;
    r->src[0] = a;
    return r;
}

static ggml_tensor *reshape(ggml_context *ctx, ggml_tensor *a, int n, const int64_t *ne) {
    if (!ggml_is_contiguous(a)) ggml_abort("reshape: a must be contiguous");
    int64_t total = 1;
    for (int i = 0; i < n; i++) total *= ne[i];
    if (total != ggml_nelements(a)) ggml_abort("reshape: element count changes");
    ggml_tensor *r = new_tensor_impl(ctx, a->type, n, ne, a, 0);
    r->op = GGML_OP_RESHAPE;
    r->src[0] = a;
    return r;
}

ggml_tensor *ggml_reshape_2d(ggml_context *ctx, ggml_tensor *a, int64_t ne0, int64_t ne1) {
    const int64_t ne[2] = {ne0, ne1};
    return reshape(ctx, a, 2, ne);
}
ggml_tensor *ggml_reshape_3d(ggml_context *ctx, ggml_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2) {
    const int64_t ne[3] = {ne0, ne1, ne2};
    return reshape(ctx, a, 3, ne);
}
ggml_tensor *ggml_reshape_4d(ggml_context *ctx, ggml_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    return reshape(ctx, a, 4, ne);
}

ggml_tensor *ggml_view_4d(ggml_context *ctx, ggml_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                          size_t nb1, size_t nb2, size_t nb3, size_t offset) {
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    ggml_tensor *r = new_tensor_impl(ctx, a->type, 4, ne, a, offset);
    r->nb[1] = nb1;
    r->nb[2] = nb2;
    r->nb[3] = nb3;
    r->op = GGML_OP_VIEW;
    r->src[0] = a;
    return r;
}
ggml_tensor *ggml_view_1d(ggml_context *ctx, ggml_tensor *a, int64_t ne0, size_t offset) {
    const size_t row = ggml_row_size(a->type, ne0);
    return ggml_view_4d(ctx, a, ne0, 1, 1, 1, row, row, row, offset);
}
ggml_tensor *ggml_view_2d(ggml_context *ctx, ggml_tensor *a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset) {
    return ggml_view_4d(ctx, a, ne0, ne1, 1, 1, nb1, nb1 * ne1, nb1 * ne1, offset);
}
ggml_tensor *ggml_view_3d(ggml_context *ctx, ggml_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1,
                          size_t nb2, size_t offset) {
    return ggml_view_4d(ctx, a, ne0, ne1, ne2, 1, nb1, nb2, nb2 * ne2, offset);
}

ggml_tensor *ggml_permute(ggml_context *ctx, ggml_tensor *a, int axis0, int axis1, int axis2, int axis3) {
    const int axes[4] = {axis0, axis1, axis2, axis3};
    int seen = 0;
    for (int i = 0; i < 4; i++) {
        if (axes[i] < 0 || axes[i] > 3 || (seen & (1 << axes[i]))) ggml_abort("permute: bad axes");
        seen |= 1 << axes[i];
    }
    ggml_tensor *r = view_of(ctx, a, GGML_OP_PERMUTE, 0);
    for (int i = 0; i < 4; i++) {
        r->ne[axes[i]] = a->ne[i];
        r->nb[axes[i]] = a->nb[i];
    }
    memcpy(r->op_params, axes, sizeof(axes));
    return r;
}

ggml_tensor *ggml_transpose(ggml_context *ctx, ggml_tensor *a) {
    ggml_tensor *r = ggml_permute(ctx, a, 1, 0, 2, 3);
    r->op = GGML_OP_TRANSPOSE;
    return r;
}

// ---- graphs ----

struct ggml_cgraph {
    int size;       // capacity of nodes and leafs
    int n_nodes;
    int n_leafs;
    ggml_tensor **nodes;
    ggml_tensor **leafs;
    size_t hash_size;
    ggml_tensor **visited;  // open-addressing set
};

static size_t graph_hash_size(size_t size) { return size * 2 + 1; }

size_t ggml_graph_overhead(void) {
    return ggml_tensor_overhead() + sizeof(ggml_cgraph) + 2 * 8192 * sizeof(void *) + graph_hash_size(8192) * sizeof(void *) + 256;
}

ggml_cgraph *ggml_new_graph_custom(ggml_context *ctx, size_t size) {
    const size_t hs = graph_hash_size(size);
    const size_t bytes = sizeof(ggml_cgraph) + (2 * size + hs) * sizeof(ggml_tensor *);
    ggml_cgraph *g = (ggml_cgraph *)ctx_alloc_object(ctx, OBJ_GRAPH, bytes);
    g->size = (int)size;
    g->nodes = (ggml_tensor **)(g + 1);
    g->leafs = g->nodes + size;
    g->visited = g->leafs + size;
    g->hash_size = hs;
    return g;
}

ggml_cgraph *ggml_new_graph(ggml_context *ctx) { return ggml_new_graph_custom(ctx, 8192); }

// true if t was not in the set (and inserts it)
static bool visit(ggml_cgraph *g, ggml_tensor *t) {
    size_t h = ((uintptr_t)t >> 4) % g->hash_size;
    for (size_t i = 0; i < g->hash_size; i++) {
        size_t j = (h + i) % g->hash_size;
        if (g->visited[j] == t) return false;
        if (!g->visited[j]) {
            g->visited[j] = t;
            return true;
        }
    }
    ggml_abort("graph hash set full");
    return false;
}

static void graph_visit(ggml_cgraph *g, ggml_tensor *t) {
    if (!visit(g, t)) return;
    for (int i = 0; i < GGML_MAX_SRC; i++)
        if (t->src[i]) graph_visit(g, t->src[i]);
    if (t->op == GGML_OP_NONE) {
        if (g->n_leafs >= g->size) ggml_abort("graph full (%d leafs)", g->size);
        g->leafs[g->n_leafs++] = t;
    } else {
        if (g->n_nodes >= g->size) ggml_abort("graph full (%d nodes)", g->size);
        g->nodes[g->n_nodes++] = t;
    }
}

void ggml_build_forward_expand(ggml_cgraph *g, ggml_tensor *t) { graph_visit(g, t); }
int ggml_graph_n_nodes(const ggml_cgraph *g) { return g->n_nodes; }
ggml_tensor *ggml_graph_node(const ggml_cgraph *g, int i) { return i < 0 ? g->nodes[g->n_nodes + i] : g->nodes[i]; }
int ggml_graph_n_leafs(const ggml_cgraph *g) { return g->n_leafs; }
ggml_tensor **ggml_graph_nodes(const ggml_cgraph *g) { return g->nodes; }
ggml_tensor *ggml_graph_leaf(const ggml_cgraph *g, int i) { return g->leafs[i]; }
