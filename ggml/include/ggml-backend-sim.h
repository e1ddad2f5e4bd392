// `sim`: a simulated device backend. It behaves as a GPU does towards the
// scheduler -- its own queue thread (compute, copies and events are
// asynchronous, so ordering bugs show), memory from a budgeted arena marked
// non-host (the CPU backend refuses it), a small CPU pool of its own for the
// kernels -- and counts what a real device would move, optionally charging a
// latency per copy and a time per byte. It is the test vehicle of the hybrid
// scheduler and a planning mode: "what would a 12 GB card move per token".
#pragma once

#include "ggml-backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ggml_backend_sim_params {
    size_t memory_bytes;       // the device's memory: its buffer type's budget
    int n_threads;             // kernel threads of the device (>= 1)
    double copy_latency_us;    // added to every host <-> device copy
    double copy_ns_per_byte;   // ... plus this per byte (1 / PCIe bandwidth)
};
struct ggml_backend_sim_params ggml_backend_sim_default_params(void);  // 8 GiB, 1 thread, no delays

ggml_backend_t ggml_backend_sim_init(struct ggml_backend_sim_params params);
bool ggml_backend_is_sim(ggml_backend_t be);

struct ggml_backend_sim_counters {
    uint64_t bytes_h2d, bytes_d2h;  // host <-> device copies (transfer nodes and tensor_set/get)
    uint64_t n_copies;              // number of such copies
    uint64_t bytes_pageable;        // ... of transfer nodes whose host side is not the device's pinned memory
    uint64_t n_queue_waits;         // times the device's queue waited for another backend's event
    uint64_t n_synchronize;         // times the host waited for the whole queue
    uint64_t n_segments;            // compute submissions
};
void ggml_backend_sim_get_counters(ggml_backend_t be, struct ggml_backend_sim_counters *c);
void ggml_backend_sim_reset_counters(ggml_backend_t be);

#ifdef __cplusplus
}
#endif
