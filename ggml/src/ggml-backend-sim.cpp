// The simulated device (ggml-backend-sim.h): a queue thread that runs
// submitted work in order, memory the CPU backend may not touch, and counters.
#include "ggml-backend-sim.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>

#include "ggml-backend-impl.h"
#include "ggml-cpu.h"
#include "ggml-impl.h"

namespace {

struct sim_ctx {
    ggml_backend_sim_params p;
    ggml_threadpool *tp = nullptr;
    ggml_backend_buffer_type mem, pinned;  // device memory (non-host, budgeted); pinned host memory

    std::mutex mu;
    std::condition_variable cv_work, cv_idle;
    std::deque<std::function<void()>> queue;
    bool busy = false, stop = false;
    int error = 0;  // of a failed queued compute, until the next synchronize
    std::thread worker;

    std::atomic<uint64_t> h2d{0}, d2h{0}, copies{0}, pageable{0}, queue_waits{0}, syncs{0}, segments{0};

    void push(std::function<void()> f) {
        {
            std::lock_guard<std::mutex> lock(mu);
            queue.push_back(std::move(f));
        }
        cv_work.notify_one();
    }

    void run() {
        for (;;) {
            std::function<void()> f;
            {
                std::unique_lock<std::mutex> lock(mu);
                busy = false;
                if (queue.empty()) cv_idle.notify_all();
                cv_work.wait(lock, [&] { return stop || !queue.empty(); });
                if (queue.empty()) return;  // stop, and nothing left
                f = std::move(queue.front());
                queue.pop_front();
                busy = true;
            }
            f();
        }
    }

    int drain() {
        std::unique_lock<std::mutex> lock(mu);
        cv_idle.wait(lock, [&] { return queue.empty() && !busy; });
        const int e = error;
        error = 0;
        return e;
    }

    // A host <-> device copy as a DMA engine would do it: the bytes, plus the
    // configured latency and time per byte (slept, not spun: a copy costs no CPU).
    void copy(void *dst, const void *src, size_t n, bool to_host) {
        memcpy(dst, src, n);
        charge(n, to_host);
    }
    void charge(size_t n, bool to_host) {
        (to_host ? d2h : h2d) += n;
        copies++;
        const double us = p.copy_latency_us + p.copy_ns_per_byte * (double)n * 1e-3;
        if (us > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(us));
    }
    // A transfer node: one copy (a strided source: one 2-D copy, its rows gathered).
    void transfer(const ggml_tensor *t) {
        ggml_transfer_rows(t, [](void *d, const void *s, size_t n, void *) { memcpy(d, s, n); }, nullptr);
        charge(ggml_nbytes(t), ggml_tensor_is_host(t));
        if (!ggml_transfer_host_in(t, &pinned)) pageable += ggml_nbytes(t);
    }
};

sim_ctx *ctx_of(ggml_backend *be) { return (sim_ctx *)be->ctx; }

void *mem_alloc(ggml_backend_buffer_type *, size_t size) {
    void *p = aligned_alloc(256, size);
    // fresh device memory holds garbage: make reads of unwritten memory show
    if (p) memset(p, 0xff, size);
    return p;
}
void mem_free(ggml_backend_buffer_type *, void *base, size_t) { free(base); }

// Synchronous host <-> device copies (tensor_set / get / memset): after the queue drains, as a real device's.
void mem_set(ggml_backend_buffer_type *bt, void *dst, const void *src, size_t n) {
    sim_ctx *c = (sim_ctx *)bt->ctx;
    c->drain();
    c->copy(dst, src, n, false);
}
void mem_get(ggml_backend_buffer_type *bt, void *dst, const void *src, size_t n) {
    sim_ctx *c = (sim_ctx *)bt->ctx;
    c->drain();
    c->copy(dst, src, n, true);
}
void mem_memset(ggml_backend_buffer_type *bt, void *dst, uint8_t v, size_t n) {
    ((sim_ctx *)bt->ctx)->drain();
    memset(dst, v, n);
}

bool sim_supports_op(ggml_backend *, const ggml_tensor *op) { return ggml_is_transfer(op) || !ggml_tensor_is_host(op); }

// The simulated device's crossover: its kernels are the CPU's, so is the
// policy -- set on its own pool, where a GPU backend would use its own.
bool sim_policy(int64_t n_active, int64_t n, int64_t T) { return ggml_cpu_sparse_should_use_dense(n_active, n, T); }
bool sim_sparse_dense(ggml_backend *, int64_t n_active, int64_t n, int64_t T) { return sim_policy(n_active, n, T); }

int sim_compute(ggml_backend *be, ggml_tensor **nodes, int n) {
    sim_ctx *c = ctx_of(be);
    for (int i = 0; i < n; i++) {
        if (ggml_op_is_view(nodes[i]->op)) continue;
        if (!nodes[i]->data) {
            ggml_backend_set_error("sim: node '%s' has no memory (not planned)", nodes[i]->name);
            return 2;
        }
        if (!ggml_backend_node_memory_ok("sim", nodes[i], false)) return 4;
    }
    c->segments++;
    c->push([c, nodes, n] {
        int i = 0;
        while (i < n) {
            ggml_tensor *t = nodes[i];
            if (ggml_is_transfer(t)) {
                c->transfer(t);
                i++;
                continue;
            }
            int j = i;
            while (j < n && !ggml_is_transfer(nodes[j])) j++;
            const int rc = ggml_cpu_compute_nodes(c->tp, nodes + i, j - i, false);
            if (rc) {
                std::lock_guard<std::mutex> lock(c->mu);
                if (!c->error) c->error = rc;
            }
            i = j;
        }
    });
    return 0;
}

void sim_copy(ggml_backend *be, const ggml_tensor *src, ggml_tensor *dst) {
    sim_ctx *c = ctx_of(be);
    const bool to_host = ggml_tensor_is_host(dst);
    c->push([c, src, dst, to_host] { c->copy(dst->data, src->data, ggml_nbytes(src), to_host); });
}

int sim_synchronize(ggml_backend *be) {
    sim_ctx *c = ctx_of(be);
    c->syncs++;
    return c->drain();
}

void sim_event_record(ggml_backend *be, ggml_backend_event *ev, uint64_t gen) {
    ctx_of(be)->push([ev, gen] { ggml_backend_event_signal(ev, gen); });
}

void sim_event_wait(ggml_backend *be, ggml_backend_event *ev, uint64_t gen) {
    sim_ctx *c = ctx_of(be);
    c->queue_waits++;
    c->push([ev, gen] { ggml_backend_event_block(ev, gen); });
}

void sim_free(ggml_backend *be) {
    sim_ctx *c = ctx_of(be);
    {
        std::lock_guard<std::mutex> lock(c->mu);
        c->stop = true;
    }
    c->cv_work.notify_all();
    c->worker.join();
    ggml_threadpool_free(c->tp);
    delete c;
    delete be;
}

}  // namespace

ggml_backend_sim_params ggml_backend_sim_default_params(void) {
    ggml_backend_sim_params p;
    p.memory_bytes = (size_t)8 << 30;
    p.n_threads = 1;
    p.copy_latency_us = 0;
    p.copy_ns_per_byte = 0;
    return p;
}

ggml_backend_t ggml_backend_sim_init(ggml_backend_sim_params params) {
    if (params.n_threads < 1) params.n_threads = 1;
    sim_ctx *c = new sim_ctx();
    c->p = params;
    c->tp = ggml_threadpool_new(params.n_threads);
    if (!c->tp) {
        delete c;
        ggml_backend_set_error("sim: cannot start %d kernel threads", params.n_threads);
        return nullptr;
    }
    ggml_threadpool_set_sparse_dense_policy(c->tp, sim_policy);
    ggml_backend_buft_init_device(&c->mem, "sim", params.memory_bytes, mem_alloc, mem_free, mem_set, mem_get, mem_memset, c);
    ggml_backend_buft_init_host(
        &c->pinned, "sim_pinned",
        [](ggml_backend_buffer_type *bt, size_t size) -> void * {
            void *p = aligned_alloc(bt->alignment, (size + bt->alignment - 1) / bt->alignment * bt->alignment);
            if (p) memset(p, 0, size);  // host buffers start zeroed, as the CPU's
            return p;
        },
        mem_free, c);
    c->worker = std::thread([c] { c->run(); });

    ggml_backend *be = new ggml_backend();
    be->name = "sim";
    be->is_cpu = false;
    be->iface = {sim_supports_op, sim_sparse_dense, sim_compute, sim_copy, sim_synchronize,
                 sim_event_record, sim_event_wait, sim_free, nullptr, nullptr};
    be->buft = &c->mem;
    be->host_buft = &c->pinned;
    be->ctx = c;
    return be;
}

bool ggml_backend_is_sim(ggml_backend_t be) { return be && be->iface.compute == sim_compute; }

void ggml_backend_sim_get_counters(ggml_backend_t be, ggml_backend_sim_counters *out) {
    sim_ctx *c = ctx_of(be);
    out->bytes_h2d = c->h2d;
    out->bytes_d2h = c->d2h;
    out->bytes_pageable = c->pageable;
    out->n_copies = c->copies;
    out->n_queue_waits = c->queue_waits;
    out->n_synchronize = c->syncs;
    out->n_segments = c->segments;
}

void ggml_backend_sim_reset_counters(ggml_backend_t be) {
    sim_ctx *c = ctx_of(be);
    c->h2d = c->d2h = c->copies = c->pageable = c->queue_waits = c->syncs = c->segments = 0;
}
