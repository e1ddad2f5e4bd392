// `cuda`: the NVIDIA GPU backend (built with -DPINFER_CUDA=ON; PINFER_CUDA is
// then defined for everything that links ggml). One device per backend: a
// budgeted arena of device memory (plain cudaMalloc; the budget caps weights,
// KV cache, compute and scratch alike), pinned host memory for its transfers,
// one compute stream and one copy stream, CUDA events behind the layer's
// events. cudart is linked statically: a binary built with CUDA starts on a
// machine without a driver, and the queries below say why there is no device.
#pragma once

#include "ggml-backend-sim.h"  // ggml_backend_sim_counters: the same counters
#include "ggml-backend.h"

#ifdef __cplusplus
extern "C" {
#endif

// Usable devices: 0 without a driver or device (never fails otherwise).
int ggml_backend_cuda_device_count(void);
// Why ggml_backend_cuda_device_count() is 0 (e.g. "no CUDA driver
// (cudaErrorInsufficientDriver: ...)"), "" when there is a device.
const char *ggml_backend_cuda_unavailable_reason(void);

struct ggml_backend_cuda_device_info {
    char name[128];
    int cc_major, cc_minor;  // compute capability
    int n_sm;
    size_t total_bytes, free_bytes;
    int driver_version, runtime_version;  // e.g. 12040 = 12.4
};
bool ggml_backend_cuda_get_device_info(int device, struct ggml_backend_cuda_device_info *info);

// The backend on `device` with at most budget bytes of device memory (0: the
// device's free memory). NULL with ggml_backend_last_error() naming the cause.
ggml_backend_t ggml_backend_cuda_init(int device, size_t budget);
bool ggml_backend_is_cuda(ggml_backend_t be);
// Bytes and copies it moved, waits on other queues, host syncs, segments.
void ggml_backend_cuda_get_counters(ggml_backend_t be, struct ggml_backend_sim_counters *c);
void ggml_backend_cuda_reset_counters(ggml_backend_t be);
// Whether decode attention runs fused (the default; off: its three nodes one
// by one -- for tests and benchmarks).
void ggml_backend_cuda_set_fused_attention(ggml_backend_t be, bool on);

#ifdef __cplusplus
}
#endif
