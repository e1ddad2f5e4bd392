// What a backend implements (ggml-backend.h is what callers see). A new
// device is one more set of these tables: the scheduler and the graph
// builder do not change.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "ggml-backend.h"

struct ggml_backend_buffer_type {
    const char *name;
    bool host;
    size_t alignment;
    size_t budget;  // SIZE_MAX: none
    std::atomic<size_t> allocated{0};
    void *(*alloc_mem)(ggml_backend_buffer_type *buft, size_t size);  // nullptr on failure
    void (*free_mem)(ggml_backend_buffer_type *buft, void *base, size_t size);
    // Synchronous copies between host memory and memory of this type (host
    // types: memcpy). nullptr: plain memcpy / memset.
    void (*set)(ggml_backend_buffer_type *buft, void *dst, const void *src, size_t size);
    void (*get)(ggml_backend_buffer_type *buft, void *dst, const void *src, size_t size);
    void (*memset)(ggml_backend_buffer_type *buft, void *dst, uint8_t value, size_t size);
    void *ctx;
};

// The two kinds of buffer type a device backend has: its own memory (non-host,
// 256-byte aligned, a byte budget, its synchronous copies) and host memory it
// copies from and to (pinned for CUDA; no budget, plain memcpy).
void ggml_backend_buft_init_device(ggml_backend_buffer_type *bt, const char *name, size_t budget,
                                   void *(*alloc_mem)(ggml_backend_buffer_type *, size_t),
                                   void (*free_mem)(ggml_backend_buffer_type *, void *, size_t),
                                   void (*set)(ggml_backend_buffer_type *, void *, const void *, size_t),
                                   void (*get)(ggml_backend_buffer_type *, void *, const void *, size_t),
                                   void (*memset)(ggml_backend_buffer_type *, void *, uint8_t, size_t), void *ctx);
void ggml_backend_buft_init_host(ggml_backend_buffer_type *bt, const char *name,
                                 void *(*alloc_mem)(ggml_backend_buffer_type *, size_t),
                                 void (*free_mem)(ggml_backend_buffer_type *, void *, size_t), void *ctx);

struct ggml_backend_buffer {
    ggml_backend_buffer_type *buft;
    void *base;
    size_t size;
    bool owned;  // false: memory the caller keeps (ggml_backend_cpu_buffer_from_ptr)
    ggml_backend_buffer_usage usage;
};

struct ggml_backend_i {
    bool (*supports_op)(ggml_backend *be, const ggml_tensor *op);
    bool (*sparse_dense)(ggml_backend *be, int64_t n_active, int64_t n, int64_t T);
    int (*compute)(ggml_backend *be, ggml_tensor **nodes, int n);
    void (*copy)(ggml_backend *be, const ggml_tensor *src, ggml_tensor *dst);
    int (*synchronize)(ggml_backend *be);  // 0, or the error of a failed queued compute
    // The event is reached when the backend's queue gets past this point.
    void (*event_record)(ggml_backend *be, ggml_backend_event *ev, uint64_t gen);
    // The backend's queue waits until ev reaches gen.
    void (*event_wait)(ggml_backend *be, ggml_backend_event *ev, uint64_t gen);
    void (*free)(ggml_backend *be);
    // Optional, for a queue that is not a host thread (a GPU stream): its
    // events are its own (ev->native), which the host counter cannot see.
    // event_host_wait: has ev (recorded by be) reached gen -- block until it
    // has when block is set; event_release frees ev->native. nullptr: the
    // host counter is the event (CPU, sim).
    bool (*event_host_wait)(ggml_backend *be, ggml_backend_event *ev, uint64_t gen, bool block);
    void (*event_release)(ggml_backend *be, ggml_backend_event *ev);
};

struct ggml_backend {
    const char *name;
    bool is_cpu;
    ggml_backend_i iface;
    ggml_backend_buffer_type *buft;       // its own memory
    ggml_backend_buffer_type *host_buft;  // host memory it copies from and to
    void *ctx;
};

// An event: a generation counter that a backend's queue advances (host
// queues), or the backend's own event behind it (native; see event_host_wait).
struct ggml_backend_event {
    ggml_backend *be;
    std::mutex mu;
    std::condition_variable cv;
    uint64_t recorded = 0;  // generation of the last record
    uint64_t reached = 0;   // generation the queue has got past
    void *native = nullptr;  // the recording backend's own event (a cudaEvent_t), made on first record
};

// Marks ev reached at gen and wakes waiters (called by a backend's queue).
void ggml_backend_event_signal(ggml_backend_event *ev, uint64_t gen);
// Blocks the calling thread until ev has reached gen (through the recording
// backend's event_host_wait when it has one).
void ggml_backend_event_block(ggml_backend_event *ev, uint64_t gen);
void ggml_backend_set_error(const char *fmt, ...);
// Whether node and its sources are all in host memory (host) or all in the
// backend's own (device; a transfer node has one side on the host by
// design). Otherwise false, with an error naming the node and the tensor on
// the wrong side: a missing transfer is an error, never a silent read.
// Whether a transfer node's host side (its result for device-to-host, its
// source otherwise) lies in host_buft: a device's own (pinned) host memory.
bool ggml_transfer_host_in(const struct ggml_tensor *t, const struct ggml_backend_buffer_type *host_buft);
bool ggml_backend_node_memory_ok(const char *backend, const struct ggml_tensor *node, bool host);
