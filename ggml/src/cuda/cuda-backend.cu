// The device: availability (never crashing without a driver), the budgeted
// arena of device memory and the pinned host memory (buffer types), the
// backend's creation with its streams, scratch memory and counters.
#include <cstdio>

#include "ops.cuh"
#include "queue.cuh"

namespace pcuda {
namespace {

char g_reason[256];
int g_count = -1;

int probe() {
    if (g_count >= 0) return g_count;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        const bool no_driver = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice;
        snprintf(g_reason, sizeof(g_reason), "%s (%s: %s)", no_driver ? "no CUDA driver or device" : "CUDA unusable",
                 cudaGetErrorName(e), cudaGetErrorString(e));
        (void)cudaGetLastError();
        n = 0;
    } else if (n == 0) {
        snprintf(g_reason, sizeof(g_reason), "no CUDA device (the driver reports none)");
    } else {
        g_reason[0] = '\0';
    }
    g_count = n;
    return n;
}

// Device memory: the arena of one buffer is one cudaMalloc (never managed
// memory), counted against the buffer type's budget by the backend layer.
void *dev_alloc(ggml_backend_buffer_type *bt, size_t size) {
    context *c = (context *)bt->ctx;
    void *p = nullptr;
    if (cudaSetDevice(c->device) != cudaSuccess || cudaMalloc(&p, size) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    return p;
}
void dev_free(ggml_backend_buffer_type *bt, void *base, size_t) {
    cudaSetDevice(((context *)bt->ctx)->device);
    cudaFree(base);
}
// Synchronous tensor_set / get / memset: after the compute stream's work, as
// the layer promises (the stream may still be writing the tensor).
void dev_set(ggml_backend_buffer_type *bt, void *dst, const void *src, size_t n) {
    context *c = (context *)bt->ctx;
    c->h2d += n;
    c->copies++;
    if (!PCUDA_OK(cudaStreamSynchronize(c->compute)) || !PCUDA_OK(cudaMemcpy(dst, src, n, cudaMemcpyDefault)))
        ggml_abort("%s", ggml_backend_last_error());
}
void dev_get(ggml_backend_buffer_type *bt, void *dst, const void *src, size_t n) {
    context *c = (context *)bt->ctx;
    c->d2h += n;
    c->copies++;
    if (!PCUDA_OK(cudaStreamSynchronize(c->compute)) || !PCUDA_OK(cudaMemcpy(dst, src, n, cudaMemcpyDefault)))
        ggml_abort("%s", ggml_backend_last_error());
}
void dev_memset(ggml_backend_buffer_type *bt, void *dst, uint8_t v, size_t n) {
    context *c = (context *)bt->ctx;
    if (!PCUDA_OK(cudaStreamSynchronize(c->compute)) || !PCUDA_OK(cudaMemset(dst, v, n)))
        ggml_abort("%s", ggml_backend_last_error());
}

// Pinned host memory: the host side of every transfer (DMA without staging).
void *pinned_alloc(ggml_backend_buffer_type *bt, size_t size) {
    void *p = nullptr;
    if (cudaHostAlloc(&p, size, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    memset(p, 0, size);  // host buffers start zeroed, as the CPU's
    return p;
}
void pinned_free(ggml_backend_buffer_type *, void *base, size_t) { cudaFreeHost(base); }

void backend_free(ggml_backend *be) {
    context *c = (context *)be->ctx;
    cudaSetDevice(c->device);
    cudaStreamSynchronize(c->compute);
    cudaStreamSynchronize(c->copy);
    ggml_backend_buffer_free(c->scratch_buf);
    cudaEventDestroy(c->joined);
    cudaEventDestroy(c->copied);
    cudaStreamDestroy(c->copy);
    cudaStreamDestroy(c->compute);
    delete c;
    delete be;
}

}  // namespace

void *scratch(context &c, size_t bytes) {
    if (bytes <= c.scratch_size) return c.scratch;
    if (!PCUDA_OK(cudaStreamSynchronize(c.compute))) return nullptr;  // queued kernels may still use the old one
    ggml_backend_buffer_free(c.scratch_buf);
    c.scratch_buf = ggml_backend_buft_alloc_buffer(&c.mem, bytes);  // inside the budget like everything else
    c.scratch = c.scratch_buf ? ggml_backend_buffer_base(c.scratch_buf) : nullptr;
    c.scratch_size = c.scratch_buf ? bytes : 0;
    return c.scratch;
}

}  // namespace pcuda

using namespace pcuda;

int ggml_backend_cuda_device_count(void) { return probe(); }

const char *ggml_backend_cuda_unavailable_reason(void) {
    probe();
    return g_reason;
}

bool ggml_backend_cuda_get_device_info(int device, ggml_backend_cuda_device_info *info) {
    if (device < 0 || device >= probe()) return false;
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return false;
    snprintf(info->name, sizeof(info->name), "%s", p.name);
    info->cc_major = p.major;
    info->cc_minor = p.minor;
    info->n_sm = p.multiProcessorCount;
    info->free_bytes = info->total_bytes = 0;
    if (cudaSetDevice(device) == cudaSuccess) cudaMemGetInfo(&info->free_bytes, &info->total_bytes);
    cudaDriverGetVersion(&info->driver_version);
    cudaRuntimeGetVersion(&info->runtime_version);
    (void)cudaGetLastError();
    return true;
}

ggml_backend_t ggml_backend_cuda_init(int device, size_t budget) {
    const int n = probe();
    if (n == 0) {
        ggml_backend_set_error("cuda: %s", g_reason);
        return nullptr;
    }
    if (device < 0 || device >= n) {
        ggml_backend_set_error("cuda: no device %d (%d found)", device, n);
        return nullptr;
    }
    context *c = new context();
    c->device = device;
    size_t free_b = 0, total_b = 0;
    cudaDeviceProp prop;
    if (!PCUDA_OK(cudaSetDevice(device)) || !PCUDA_OK(cudaMemGetInfo(&free_b, &total_b)) ||
        !PCUDA_OK(cudaGetDeviceProperties(&prop, device)) ||
        !PCUDA_OK(cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking)) ||
        !PCUDA_OK(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking)) ||
        !PCUDA_OK(cudaEventCreateWithFlags(&c->joined, cudaEventDisableTiming)) ||
        !PCUDA_OK(cudaEventCreateWithFlags(&c->copied, cudaEventDisableTiming))) {
        delete c;
        return nullptr;
    }
    c->n_sm = prop.multiProcessorCount;
    snprintf(c->name, sizeof(c->name), "CUDA%d", device);
    ggml_backend_buft_init_device(&c->mem, c->name, budget && budget < free_b ? budget : free_b, dev_alloc, dev_free, dev_set,
                                  dev_get, dev_memset, c);
    ggml_backend_buft_init_host(&c->pinned, "CUDA_pinned", pinned_alloc, pinned_free, c);

    ggml_backend *be = new ggml_backend();
    be->name = "cuda";
    be->is_cpu = false;
    be->iface = queue_iface(backend_free);
    be->buft = &c->mem;
    be->host_buft = &c->pinned;
    be->ctx = c;
    return be;
}

bool ggml_backend_is_cuda(ggml_backend_t be) { return be && be->iface.free == backend_free; }

void ggml_backend_cuda_get_counters(ggml_backend_t be, ggml_backend_sim_counters *out) {
    const context *c = (const context *)be->ctx;
    out->bytes_h2d = c->h2d;
    out->bytes_d2h = c->d2h;
    out->bytes_pageable = c->pageable;
    out->n_copies = c->copies;
    out->n_queue_waits = c->waits;
    out->n_synchronize = c->syncs;
    out->n_segments = c->segments;
}

void ggml_backend_cuda_reset_counters(ggml_backend_t be) {
    context *c = (context *)be->ctx;
    c->h2d = c->d2h = c->copies = c->pageable = c->waits = c->syncs = c->segments = 0;
}

void ggml_backend_cuda_set_fused_attention(ggml_backend_t be, bool on) { ((context *)be->ctx)->fuse_attention = on; }
