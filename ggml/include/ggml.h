// pinfer's tensor runtime: a GGML-style library of our own.
//
// Concepts: a context is an arena that owns tensor headers (and, unless
// no_alloc, their data); operations build tensors lazily; a graph is the
// topologically ordered list of nodes reachable from its outputs; a planner
// places intermediates into one reusable buffer; a persistent thread pool
// executes the graph node by node.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ggml-ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GGML_MAX_DIMS 4
#define GGML_MAX_SRC 6
#define GGML_MAX_OP_PARAMS 16  // int32 slots
#define GGML_MAX_NAME 64
#define GGML_DEFAULT_ALIGN 64

// Tensor types. The numeric values are the GGUF on-disk type ids.
enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_I8 = 24,
    GGML_TYPE_I16 = 25,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_I64 = 27,
    GGML_TYPE_F64 = 28,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_COUNT = 40,
};

typedef uint16_t ggml_fp16_t;
typedef uint16_t ggml_bf16_t;

// Row converters of a type. A "row" of n elements (n a multiple of blck_size).
typedef void (*ggml_to_float_t)(const void *x, float *y, int64_t n);
typedef void (*ggml_from_float_t)(const float *x, void *y, int64_t n);

// The format of a type: what every backend agrees on. A backend's kernels for
// it live with the backend (the CPU's: ggml-cpu.h).
struct ggml_type_traits {
    const char *name;
    int64_t blck_size;          // elements per block (1 for plain types)
    size_t type_size;           // bytes per block
    bool is_quantized;
    bool supported;             // false for ids that are reserved/unknown
    ggml_to_float_t to_float;   // dequantize a row (NULL if not available)
    ggml_from_float_t from_float_ref;  // portable reference quantizer (NULL if none)
};

// NULL for an id outside [0, GGML_TYPE_COUNT) or an unsupported id.
const struct ggml_type_traits *ggml_get_type_traits(enum ggml_type type);
bool ggml_type_is_valid(int type);     // id known and supported
const char *ggml_type_name(enum ggml_type type);
int64_t ggml_blck_size(enum ggml_type type);
size_t ggml_type_size(enum ggml_type type);
size_t ggml_row_size(enum ggml_type type, int64_t ne);  // bytes of ne elements

// Name -> type ("q4_0", "Q4_K", "f16", ...), case-insensitive; -1 if unknown.
int ggml_type_from_name(const char *name);

float ggml_fp16_to_fp32(ggml_fp16_t h);
ggml_fp16_t ggml_fp32_to_fp16(float f);
float ggml_bf16_to_fp32(ggml_bf16_t h);
ggml_bf16_t ggml_fp32_to_bf16(float f);

// The operations, one per row of GGML_OP_LIST (ggml-ops.h).
enum ggml_op {
#define GGML_OP_ENUM_ROW(NAME, name, n_src_min, n_src_max, view, prec, work) GGML_OP_##NAME,
    GGML_OP_LIST(GGML_OP_ENUM_ROW)
#undef GGML_OP_ENUM_ROW
    GGML_OP_COUNT,
};

// What the op table says about an op.
struct ggml_op_traits {
    const char *name;     // "MUL_MAT"
    const char *key;      // "mul_mat": the lower-case name (Python, kernel names)
    int n_src_min;        // sources required ...
    int n_src_max;        // ... and at most
    bool is_view;         // only reinterprets memory: nothing to compute
    bool takes_prec;      // a weight product: honours ggml_set_prec
};
// NULL for an id outside [0, GGML_OP_COUNT).
const struct ggml_op_traits *ggml_get_op_traits(enum ggml_op op);
const char *ggml_op_name(enum ggml_op op);  // "?" outside the table
// Name ("mul_mat" or "MUL_MAT") -> op, case-insensitive; GGML_OP_COUNT if unknown.
enum ggml_op ggml_op_from_name(const char *name);
// Weight products, whose activation precision ggml_set_prec chooses.
bool ggml_op_takes_prec(enum ggml_op op);

enum ggml_tensor_flag {
    GGML_TENSOR_FLAG_INPUT = 1,   // written by the caller before compute
    GGML_TENSOR_FLAG_OUTPUT = 2,  // read by the caller after compute: never reused
    GGML_TENSOR_FLAG_TRANSFER = 4,       // a copy between host and device memory (ggml_transfer)
    GGML_TENSOR_FLAG_TRANSFER_HOST = 8,  // ... whose result lives in host memory
};

struct ggml_backend;
struct ggml_backend_buffer;

struct ggml_tensor {
    enum ggml_type type;
    int64_t ne[GGML_MAX_DIMS];  // elements per dimension
    size_t nb[GGML_MAX_DIMS];   // stride in bytes per dimension
    enum ggml_op op;
    int32_t op_params[GGML_MAX_OP_PARAMS];
    int32_t flags;
    struct ggml_tensor *src[GGML_MAX_SRC];
    struct ggml_tensor *view_src;  // tensor whose memory this one aliases
    size_t view_offs;
    void *data;
    struct ggml_backend_buffer *buffer;  // where data lives (NULL: memory the caller owns, host)
    struct ggml_backend *backend;        // who computes this node (NULL: the CPU)
    char name[GGML_MAX_NAME];
    void *extra;  // owned by whoever set it (e.g. a backend)
};

// ---- context (arena) ----
struct ggml_init_params {
    size_t mem_size;    // bytes for tensor headers (+ data unless no_alloc)
    void *mem_buffer;   // NULL: allocated and owned by the context
    bool no_alloc;      // true: tensors get no data (planner or caller sets it)
};
struct ggml_context;

struct ggml_context *ggml_init(struct ggml_init_params params);
void ggml_free(struct ggml_context *ctx);
size_t ggml_used_mem(const struct ggml_context *ctx);
size_t ggml_tensor_overhead(void);  // bytes a tensor header takes in a context
bool ggml_get_no_alloc(struct ggml_context *ctx);
void ggml_set_no_alloc(struct ggml_context *ctx, bool no_alloc);
// Iterate over the tensors of a context in creation order.
struct ggml_tensor *ggml_get_first_tensor(const struct ggml_context *ctx);
struct ggml_tensor *ggml_get_next_tensor(const struct ggml_context *ctx, struct ggml_tensor *t);
struct ggml_tensor *ggml_get_tensor(struct ggml_context *ctx, const char *name);
// The backend that computes the nodes created from now on (NULL: the CPU);
// the graph builder switches it per layer (ggml-backend.h).
void ggml_set_backend(struct ggml_context *ctx, struct ggml_backend *backend);
struct ggml_backend *ggml_get_backend(const struct ggml_context *ctx);

// Errors in graph construction (shape mismatch, arena full) abort with a
// message: they are programming errors, not user input errors.
struct ggml_tensor *ggml_new_tensor(struct ggml_context *ctx, enum ggml_type type, int n_dims,
                                    const int64_t *ne);
struct ggml_tensor *ggml_new_tensor_1d(struct ggml_context *ctx, enum ggml_type type, int64_t ne0);
struct ggml_tensor *ggml_new_tensor_2d(struct ggml_context *ctx, enum ggml_type type, int64_t ne0,
                                       int64_t ne1);
struct ggml_tensor *ggml_new_tensor_3d(struct ggml_context *ctx, enum ggml_type type, int64_t ne0,
                                       int64_t ne1, int64_t ne2);
struct ggml_tensor *ggml_new_tensor_4d(struct ggml_context *ctx, enum ggml_type type, int64_t ne0,
                                       int64_t ne1, int64_t ne2, int64_t ne3);
struct ggml_tensor *ggml_dup_tensor(struct ggml_context *ctx, const struct ggml_tensor *src);
struct ggml_tensor *ggml_set_name(struct ggml_tensor *t, const char *name);
void ggml_set_input(struct ggml_tensor *t);
void ggml_set_output(struct ggml_tensor *t);

int64_t ggml_nelements(const struct ggml_tensor *t);
int64_t ggml_nrows(const struct ggml_tensor *t);  // ne1*ne2*ne3
size_t ggml_nbytes(const struct ggml_tensor *t);
int ggml_n_dims(const struct ggml_tensor *t);
bool ggml_is_contiguous(const struct ggml_tensor *t);
bool ggml_is_contiguous_rows(const struct ggml_tensor *t);  // nb[0] == element/block size
bool ggml_are_same_shape(const struct ggml_tensor *a, const struct ggml_tensor *b);
bool ggml_can_repeat(const struct ggml_tensor *small, const struct ggml_tensor *big);

// ---- operations (lazy: they only record the node) ----
struct ggml_tensor *ggml_add(struct ggml_context *ctx, struct ggml_tensor *a, struct ggml_tensor *b);  // b broadcast
struct ggml_tensor *ggml_mul(struct ggml_context *ctx, struct ggml_tensor *a, struct ggml_tensor *b);  // b broadcast
struct ggml_tensor *ggml_scale(struct ggml_context *ctx, struct ggml_tensor *a, float s);
struct ggml_tensor *ggml_rms_norm(struct ggml_context *ctx, struct ggml_tensor *a, float eps);
struct ggml_tensor *ggml_norm(struct ggml_context *ctx, struct ggml_tensor *a, float eps);
// a [K, M, A2, A3] (any weight type, rows contiguous), b [K, N, B2, B3] F32 ->
// F32 [M, N, B2, B3]; a is broadcast over dims 2,3 (B2 % A2 == 0, B3 % A3 == 0).
struct ggml_tensor *ggml_mul_mat(struct ggml_context *ctx, struct ggml_tensor *a, struct ggml_tensor *b);
// Precision of the activations of a weight product (the ops with
// ggml_op_takes_prec: MUL_MAT, MUL_MAT_SPARSE_ROWS, SPARSE_DOWN's dense path,
// SPARSE_FFN). DEFAULT: converted once to
// the weight type's vec_dot_type (8 bits per value for quantized weights, as
// llama.cpp does). HIGH: the rounding residual is converted too and dotted
// with the same weight row while it is in registers or L1, so the product sees
// the activations to about 16 bits; costs integer work, not weight traffic.
enum ggml_prec { GGML_PREC_DEFAULT = 0, GGML_PREC_HIGH = 1 };
void ggml_set_prec(struct ggml_tensor *node, enum ggml_prec prec);
// a [K, R, A2, A3] any type, idx I32 [n, I1, I2] -> F32 [K, n, I1, I2]: row
// idx[j, i1, i2] of plane (i1 % A2, i2 % A3) of a.
struct ggml_tensor *ggml_get_rows(struct ggml_context *ctx, struct ggml_tensor *a, struct ggml_tensor *idx);
enum ggml_rope_mode { GGML_ROPE_NORMAL = 0, GGML_ROPE_NEOX = 2 };
// a [head_dim, n_head, n_tokens] F32, pos I32 [n_tokens]; rotates the first n_dims of each head.
struct ggml_tensor *ggml_rope(struct ggml_context *ctx, struct ggml_tensor *a, struct ggml_tensor *pos,
                              int n_dims, int mode, float freq_base, float freq_scale);
// rope with per-pair frequency factors (llama3, LongRoPE, YaRN as llama.cpp's
// rope_freqs / rope_factors_* describe them): theta_i is divided by
// freq_factors[i] (F32 [n_dims/2], may be NULL), and cos/sin are multiplied
// by attn_factor (the magnitude correction of YaRN and LongRoPE).
struct ggml_tensor *ggml_rope_ext(struct ggml_context *ctx, struct ggml_tensor *a, struct ggml_tensor *pos,
                                  struct ggml_tensor *freq_factors, int n_dims, int mode, float freq_base,
                                  float freq_scale, float attn_factor);
// softmax(a * scale + mask) along dim 0; mask F32 [ne0, ne1] broadcast over dims 2,3, may be NULL.
struct ggml_tensor *ggml_soft_max_ext(struct ggml_context *ctx, struct ggml_tensor *a,
                                      struct ggml_tensor *mask, float scale);
struct ggml_tensor *ggml_relu(struct ggml_context *ctx, struct ggml_tensor *a);
struct ggml_tensor *ggml_silu(struct ggml_context *ctx, struct ggml_tensor *a);
struct ggml_tensor *ggml_gelu(struct ggml_context *ctx, struct ggml_tensor *a);  // tanh approximation
struct ggml_tensor *ggml_tanh(struct ggml_context *ctx, struct ggml_tensor *a);
struct ggml_tensor *ggml_swiglu(struct ggml_context *ctx, struct ggml_tensor *a, struct ggml_tensor *b);
struct ggml_tensor *ggml_reglu(struct ggml_context *ctx, struct ggml_tensor *a, struct ggml_tensor *b);
struct ggml_tensor *ggml_geglu(struct ggml_context *ctx, struct ggml_tensor *a, struct ggml_tensor *b);
struct ggml_tensor *ggml_argmax(struct ggml_context *ctx, struct ggml_tensor *a);  // I32 [ne1]
// a F32 [n, T] -> I32 [k, T]: per column the ids of its k largest values,
// largest first; ties go to the lower id, NaN is never chosen over a number.
struct ggml_tensor *ggml_top_k(struct ggml_context *ctx, struct ggml_tensor *a, int k);
// Mixture of experts: as [K, M, E] (E expert matrices, any weight type),
// b F32 [K, B1, T] (B1 = 1: one column per token for every slot; B1 = n_used:
// a column per slot), ids I32 [n_used, T] (expert of slot s of token t) ->
// F32 [M, n_used, T]: dst[:, s, t] = as[:, :, ids[s, t]] . b[:, s % B1, t].
// Only the routed experts' matrices are read; a batch's tokens may route to
// different experts. Honours ggml_set_prec like mul_mat.
struct ggml_tensor *ggml_mul_mat_id(struct ggml_context *ctx, struct ggml_tensor *as, struct ggml_tensor *b,
                                    struct ggml_tensor *ids);
// The same where mask F32 [M, n_used, T] is nonzero, 0 elsewhere: a weight row
// is read only when some column of its expert needs it (the up rows of sparse
// experts: mask = relu(gate) for ReLU experts, the thresholded activation for
// SwiGLU ones).
struct ggml_tensor *ggml_mul_mat_id_masked(struct ggml_context *ctx, struct ggml_tensor *as, struct ggml_tensor *b,
                                           struct ggml_tensor *ids, struct ggml_tensor *mask);
// Copy a into b (same element count; F32 <-> F16/BF16/F32); returns a view of b.
struct ggml_tensor *ggml_cpy(struct ggml_context *ctx, struct ggml_tensor *a, struct ggml_tensor *b);
struct ggml_tensor *ggml_cont(struct ggml_context *ctx, struct ggml_tensor *a);
struct ggml_tensor *ggml_reshape_2d(struct ggml_context *ctx, struct ggml_tensor *a, int64_t ne0, int64_t ne1);
struct ggml_tensor *ggml_reshape_3d(struct ggml_context *ctx, struct ggml_tensor *a, int64_t ne0, int64_t ne1,
                                    int64_t ne2);
struct ggml_tensor *ggml_reshape_4d(struct ggml_context *ctx, struct ggml_tensor *a, int64_t ne0, int64_t ne1,
                                    int64_t ne2, int64_t ne3);
struct ggml_tensor *ggml_view_1d(struct ggml_context *ctx, struct ggml_tensor *a, int64_t ne0, size_t offset);
struct ggml_tensor *ggml_view_2d(struct ggml_context *ctx, struct ggml_tensor *a, int64_t ne0, int64_t ne1,
                                 size_t nb1, size_t offset);
struct ggml_tensor *ggml_view_3d(struct ggml_context *ctx, struct ggml_tensor *a, int64_t ne0, int64_t ne1,
                                 int64_t ne2, size_t nb1, size_t nb2, size_t offset);
struct ggml_tensor *ggml_view_4d(struct ggml_context *ctx, struct ggml_tensor *a, int64_t ne0, int64_t ne1,
                                 int64_t ne2, int64_t ne3, size_t nb1, size_t nb2, size_t nb3, size_t offset);
// Dimension i of a goes to position axis_i of the result.
struct ggml_tensor *ggml_permute(struct ggml_context *ctx, struct ggml_tensor *a, int axis0, int axis1,
                                 int axis2, int axis3);
struct ggml_tensor *ggml_transpose(struct ggml_context *ctx, struct ggml_tensor *a);

// ---- neuron-aware (sparse FFN) operations ----
//
// Active index list (the I32 tensor the sparse ops consume), ne = [n + 1, C]:
// every column is one list: element 0 holds the count m, elements 1..m the
// active neuron ids in strictly ascending order, the rest are -1. For T tokens,
// C = 1 when T == 1 (the list of the token) and C = T + 1 otherwise: columns
// 0..T-1 are the per-token lists and column T is their union. The sparse ops
// read the LAST column only, i.e. a batch computes the union of its active sets.
//
// Neuron ranges: every sparse op takes [begin, end) and only the active ids in
// it contribute; ids outside are skipped, never read. The weights need only
// hold `end` neurons while the list spans all n (a device keeps a compact copy
// of the hot prefix [0, k) and receives the list over all n): a weight's own
// row count n_w (>= end) sets the op's neuron count and output shape, and the
// list may be longer than n_w + 1.

// Active ids of scores p [n, T] F32: p_i > threshold. Layout above.
struct ggml_tensor *ggml_sparse_select(struct ggml_context *ctx, struct ggml_tensor *p, float threshold);
// The same on magnitudes: active when |p_i| > threshold (SwiGLU/GeGLU
// activations, whose sign carries no sparsity).
struct ggml_tensor *ggml_sparse_select_abs(struct ggml_context *ctx, struct ggml_tensor *p, float threshold);
// a [n, T] F32 -> F32 [n, T]: a where |a| > threshold, else 0. Element by
// element, so each token of a batch keeps only its own active set even where
// the sparse ops compute the union.
struct ggml_tensor *ggml_sparse_mask(struct ggml_context *ctx, struct ggml_tensor *a, float threshold);
// The predictor p = fc2 · relu(fc1 · x) per token, fc1 [d, r], fc2 [r, n] (any
// weight types mul_mat supports), x [d, T] F32; returns ggml_sparse_select(p,
// threshold) (threshold in logit space). Built from mul_mat + relu + select
// nodes, so it runs on the multi-threaded matmul kernels.
struct ggml_tensor *ggml_sparse_predict(struct ggml_context *ctx, struct ggml_tensor *fc1, struct ggml_tensor *fc2,
                                        struct ggml_tensor *x, float threshold);
// Row-sparse matmul: W [d, n] (any type mul_mat supports), x [d, T] F32 with
// contiguous rows, idx an active index list -> F32 [n, T] with y[i, t] = W_i · x_t
// for the active ids i in [begin, end). Inactive outputs inside [begin, end)
// are zero; outputs outside [begin, end) are NOT written (another device owns
// them; the planner gives them no defined value).
struct ggml_tensor *ggml_mul_mat_sparse_rows(struct ggml_context *ctx, struct ggml_tensor *w, struct ggml_tensor *x,
                                             struct ggml_tensor *idx, int64_t begin, int64_t end);
// The same over a neuron bundle: w [d, g*n] holds g rows per neuron, adjacent
// (e.g. g = 2: gate_0, up_0, gate_1, up_1, ...), so an active neuron is one
// contiguous run of g rows -- scattered reads that long stream much better
// than g separate rows (BENCHMARKS.md). -> F32 [n, T, g]: plane j holds the
// dots with row g*i + j. g = 1 is ggml_mul_mat_sparse_rows.
struct ggml_tensor *ggml_mul_mat_sparse_rows_bundle(struct ggml_context *ctx, struct ggml_tensor *w, struct ggml_tensor *x,
                                                    struct ggml_tensor *idx, int64_t begin, int64_t end, int g);
// Fused gated FFN over the active neurons of a 3-row neuron bundle, for
// decoding: w [d, 3n] holds per neuron i the rows gate_i, up_i, down_t_i
// (one contiguous read per neuron; any type with vec_dot and to_float), x
// [d, T] F32 with T <= GGML_SPARSE_FFN_MAX_T, idx an active index list ->
// F32 [d, T] with
//   y_t = Σ_{i active in [begin, end)} act(gate_i·x_t) · up'(up_i·x_t) · down_t_i
// (every output written; 0 when no neuron of the range is active)
// act: GGML_OP_SWIGLU (silu), GGML_OP_REGLU (relu) or GGML_OP_GEGLU (gelu);
// up' = relu when relu_up (Bamboo-style), else identity. The active list is cut
// into parts at fixed positions (never depending on the thread count), each
// summed in ascending neuron order into its own accumulator by one worker, and
// the parts are added in order: results are identical for every thread count.
// w_gate, w_up [d, n] and w_down [n, d] (the plain matrices) may be NULL; when
// all are given and the dense policy (ggml_sparse_dense_policy) says the active share is too
// large, gate and up are read from the plain matrices (a near-dense list
// streams them in order, where the bundle would drag the down_t rows along)
// and the down projection is the dense mat-vec of ggml_sparse_down over the
// columns [begin, end) of w_down (same sum; needs begin and end on w_down
// block boundaries, else stays sparse).
#define GGML_SPARSE_FFN_MAX_T 8
struct ggml_tensor *ggml_sparse_ffn_bundle(struct ggml_context *ctx, struct ggml_tensor *w, struct ggml_tensor *w_gate,
                                           struct ggml_tensor *w_up, struct ggml_tensor *w_down, struct ggml_tensor *x,
                                           struct ggml_tensor *idx, int64_t begin, int64_t end, enum ggml_op act,
                                           bool relu_up);
// Column-sparse down projection: wt [d, n] (ffn_down_t: one contiguous row of d
// per neuron, any type with to_float), h [n, T] F32 -> F32 [d, T] with
// y[:, t] = Σ_{i active in [begin, end)} h[i, t] · wt_i. Every output is written
// (0 when no neuron is active). Each output element is summed in ascending
// neuron order, so results are identical for every thread count.
// w_down [n, d] (the ordinary ffn_down, any type mul_mat supports) may be NULL;
// when given, and the dense policy (ggml_sparse_dense_policy) says the active share of the
// range is too large for the sparse kernel to win, the op computes the same sum
// as a dense matvec over the columns [begin, end) of w_down (inactive h taken
// as 0; needs begin and end on w_down block boundaries, else stays sparse).
struct ggml_tensor *ggml_sparse_down(struct ggml_context *ctx, struct ggml_tensor *wt, struct ggml_tensor *w_down,
                                     struct ggml_tensor *h, struct ggml_tensor *idx, int64_t begin, int64_t end);
// Dense-vs-sparse crossover policy of a backend, for a batch of T tokens whose
// union has n_active of n neurons (of the op's range) active: true when its
// dense kernels are expected to be faster than its sparse ones. SPARSE_DOWN
// (mode 0) and SPARSE_FFN ask the policy of the backend that computes them,
// since a GPU's crossover differs from a CPU's; the CPU's is
// ggml_cpu_sparse_should_use_dense (ggml-cpu.h).
typedef bool (*ggml_sparse_dense_policy)(int64_t n_active, int64_t n, int64_t T);

// ---- graphs ----
struct ggml_cgraph;
struct ggml_cgraph *ggml_new_graph(struct ggml_context *ctx);  // default capacity 8192 nodes
struct ggml_cgraph *ggml_new_graph_custom(struct ggml_context *ctx, size_t size);
void ggml_build_forward_expand(struct ggml_cgraph *g, struct ggml_tensor *t);
int ggml_graph_n_nodes(const struct ggml_cgraph *g);
struct ggml_tensor *ggml_graph_node(const struct ggml_cgraph *g, int i);  // i < 0: from the end
size_t ggml_graph_overhead(void);

// ---- planner: place graph intermediates by liveness in one reusable buffer ----
struct ggml_gallocr;
struct ggml_gallocr *ggml_gallocr_new(void);
void ggml_gallocr_free(struct ggml_gallocr *a);
// Gives data to every node/leaf of g that has none. Reuses its buffer and only
// grows it when g needs more. Returns false on out of memory.
bool ggml_gallocr_alloc_graph(struct ggml_gallocr *a, struct ggml_cgraph *g);
size_t ggml_gallocr_buffer_size(const struct ggml_gallocr *a);

// ---- execution ----
struct ggml_threadpool;
// n_threads workers (the calling thread is worker 0); threads persist until freed.
struct ggml_threadpool *ggml_threadpool_new(int n_threads);  // NULL if a thread cannot be started (none is left running)
void ggml_threadpool_free(struct ggml_threadpool *tp);
int ggml_threadpool_n_threads(const struct ggml_threadpool *tp);
// Computes all nodes of g in order; returns 0 on success. The work buffer is
// owned by the thread pool and grows only when a graph needs more.
int ggml_graph_compute(struct ggml_cgraph *g, struct ggml_threadpool *tp);
// Convenience for tests and tools: one-off pool with n_threads.
int ggml_graph_compute_with_threads(struct ggml_cgraph *g, int n_threads);

#ifdef __cplusplus
}
#endif
