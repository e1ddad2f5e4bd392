// Backends: where tensors live (buffer types and buffers) and who computes
// them (backends), so that one graph can run partly on the CPU and partly on a
// device at the same time (shared/HYBRID.md).
//
// A buffer type says whether the CPU may touch its memory (host), its
// alignment and its byte budget; a buffer is one allocation from it; every
// tensor names its buffer (NULL: memory the caller owns, taken as host). A
// backend computes graph segments asynchronously on its own queue, copies
// between buffers as graph nodes (ggml_transfer), and orders its work
// against other backends with events. The CPU backend refuses a node that
// touches non-host memory: a missing transfer is an error, never a silent read.
#pragma once

#include "ggml.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ggml_backend_buffer_type *ggml_backend_buffer_type_t;
typedef struct ggml_backend_buffer *ggml_backend_buffer_t;
typedef struct ggml_backend *ggml_backend_t;
typedef struct ggml_backend_event *ggml_backend_event_t;

// Last error of a failed call of this file (per thread): budget exceeded,
// out of memory, a non-host tensor on the CPU, an unsupported op.
const char *ggml_backend_last_error(void);

// ---- buffer types ----
const char *ggml_backend_buft_name(ggml_backend_buffer_type_t buft);
bool ggml_backend_buft_is_host(ggml_backend_buffer_type_t buft);
size_t ggml_backend_buft_alignment(ggml_backend_buffer_type_t buft);
size_t ggml_backend_buft_budget(ggml_backend_buffer_type_t buft);     // SIZE_MAX: no budget
size_t ggml_backend_buft_allocated(ggml_backend_buffer_type_t buft);  // bytes of its live buffers
// NULL (and an error naming the budget) when size would exceed the budget or
// the memory cannot be had. size 0 gives a valid empty buffer.
ggml_backend_buffer_t ggml_backend_buft_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size);

// ---- buffers ----
enum ggml_backend_buffer_usage {
    GGML_BACKEND_BUFFER_USAGE_ANY = 0,
    GGML_BACKEND_BUFFER_USAGE_WEIGHTS = 1,
    GGML_BACKEND_BUFFER_USAGE_COMPUTE = 2,
};
void ggml_backend_buffer_free(ggml_backend_buffer_t buf);  // NULL is fine
void *ggml_backend_buffer_base(ggml_backend_buffer_t buf);
size_t ggml_backend_buffer_size(ggml_backend_buffer_t buf);
bool ggml_backend_buffer_is_host(ggml_backend_buffer_t buf);
ggml_backend_buffer_type_t ggml_backend_buffer_get_type(ggml_backend_buffer_t buf);
void ggml_backend_buffer_set_usage(ggml_backend_buffer_t buf, enum ggml_backend_buffer_usage usage);
enum ggml_backend_buffer_usage ggml_backend_buffer_get_usage(ggml_backend_buffer_t buf);
// Memory the caller owns and keeps alive (an mmapped file): a host buffer
// that frees nothing.
ggml_backend_buffer_t ggml_backend_cpu_buffer_from_ptr(void *ptr, size_t size);
// Places t (no data yet, not a view) at offset offs of buf; false when it does not fit.
bool ggml_backend_tensor_alloc(ggml_backend_buffer_t buf, struct ggml_tensor *t, size_t offs);
// The buffer a tensor's memory lives in (a view: its base's); NULL = caller-owned host memory.
ggml_backend_buffer_t ggml_backend_tensor_buffer(const struct ggml_tensor *t);
bool ggml_tensor_is_host(const struct ggml_tensor *t);

// Bytes [offset, offset + size) of t's (contiguous) data, whatever memory it is in.
void ggml_backend_tensor_set(struct ggml_tensor *t, const void *data, size_t offset, size_t size);
void ggml_backend_tensor_get(const struct ggml_tensor *t, void *data, size_t offset, size_t size);
void ggml_backend_tensor_memset(struct ggml_tensor *t, uint8_t value, size_t offset, size_t size);

// ---- backends ----
const char *ggml_backend_name(ggml_backend_t be);
bool ggml_backend_is_cpu(ggml_backend_t be);
ggml_backend_buffer_type_t ggml_backend_get_default_buffer_type(ggml_backend_t be);
// Host memory the backend can copy from and to without staging (pinned).
ggml_backend_buffer_type_t ggml_backend_get_host_buffer_type(ggml_backend_t be);
bool ggml_backend_supports_op(ggml_backend_t be, const struct ggml_tensor *op);
// This backend's crossover: true when dense products beat the sparse ops for
// a batch of T tokens with n_active of n neurons active.
bool ggml_backend_sparse_should_use_dense(ggml_backend_t be, int64_t n_active, int64_t n, int64_t T);
// Computes nodes[0..n) in order on the backend's queue (views are skipped).
// The CPU backend runs them before it returns; a queue backend returns at
// once. Returns 0, or non-zero with an error (an unsupported op, a tensor the
// backend may not touch).
int ggml_backend_graph_compute_async(ggml_backend_t be, struct ggml_tensor **nodes, int n);
int ggml_backend_graph_compute(ggml_backend_t be, struct ggml_cgraph *g);  // whole graph, then synchronize
void ggml_backend_synchronize(ggml_backend_t be);
// Asynchronous copy of src's bytes into dst (same size, contiguous) on be's queue.
void ggml_backend_tensor_copy_async(ggml_backend_t be, const struct ggml_tensor *src, struct ggml_tensor *dst);
void ggml_backend_free(ggml_backend_t be);

// ---- events: order one backend's queue after a point of another's ----
ggml_backend_event_t ggml_backend_event_new(ggml_backend_t be);
void ggml_backend_event_free(ggml_backend_event_t ev);
void ggml_backend_event_record(ggml_backend_event_t ev);             // on its backend's queue
void ggml_backend_event_wait(ggml_backend_t waiter, ggml_backend_event_t ev);  // waiter's queue (CPU: blocks)
bool ggml_backend_event_query(ggml_backend_event_t ev);              // reached?
void ggml_backend_event_synchronize(ggml_backend_event_t ev);        // block the caller until reached

// ---- the CPU backend ----
ggml_backend_t ggml_backend_cpu_init(int n_threads);
struct ggml_threadpool *ggml_backend_cpu_threadpool(ggml_backend_t be);
ggml_backend_buffer_type_t ggml_backend_cpu_buffer_type(void);  // its buffers start zeroed
// Host memory advised for 2 MiB pages (anonymous mapping, MADV_HUGEPAGE):
// the weights the sparse operators read row by row (src/llama-weight-pages.h).
ggml_backend_buffer_type_t ggml_backend_cpu_hugepage_buffer_type(void);

// ---- transfers as graph nodes ----
// A copy of a (rows contiguous; a strided tensor such as a column range of a
// matrix arrives compact) into memory of the other side, computed by the
// backend the context builds for (ggml_set_backend): to_host puts the result
// in that backend's host (pinned) buffer type -- a device-to-host copy --,
// otherwise in its own memory. Copies are what the counters of a device count.
struct ggml_tensor *ggml_transfer(struct ggml_context *ctx, struct ggml_tensor *a, bool to_host);
bool ggml_is_transfer(const struct ggml_tensor *t);
// Executes transfer node t with copy(dst, src, bytes, ud): once for a
// contiguous source, once per row otherwise. Returns the number of copies.
size_t ggml_transfer_rows(const struct ggml_tensor *t, void (*copy)(void *dst, const void *src, size_t n, void *ud), void *ud);

// ---- the scheduler: one graph over several backends ----
// Nodes carry the backend that computes them (set while building, see
// ggml_set_backend in ggml.h; NULL = the CPU backend). The scheduler plans
// each buffer type's intermediates by liveness, cuts the graph into segments
// (a segment ends where the backend changes or where another backend reads a
// result), issues every device segment as soon as its inputs are issued and
// runs CPU segments on the calling thread, with one event per cross-backend
// edge: the CPU part of a layer runs while the device computes its own.
struct ggml_backend_sched;
// backends[n-1] must be the CPU backend. The scheduler does not own them.
struct ggml_backend_sched *ggml_backend_sched_new(ggml_backend_t *backends, int n);
void ggml_backend_sched_free(struct ggml_backend_sched *s);
// Plans memory for g (false with an error on a budget or memory failure).
bool ggml_backend_sched_alloc_graph(struct ggml_backend_sched *s, struct ggml_cgraph *g);
// Computes a planned g; returns when every backend is done. 0 on success.
int ggml_backend_sched_graph_compute(struct ggml_backend_sched *s, struct ggml_cgraph *g);
struct ggml_backend_sched_stats {
    int n_segments;     // of the last graph
    int n_event_waits;  // cross-backend waits of the last graph
    size_t compute_bytes[4];  // planned bytes per backend (order of backends)
};
void ggml_backend_sched_get_stats(const struct ggml_backend_sched *s, struct ggml_backend_sched_stats *st);

#ifdef __cplusplus
}
#endif
