// The CPU backend: the thread-pool executor behind the backend interface.
// Compute is synchronous (it runs on the calling thread with the pool), so
// its queue is the caller: events it records are reached at once, and
// waiting on another backend's event blocks the caller.
#include <cstring>

#include "ggml-backend-impl.h"
#include "ggml-cpu.h"
#include "ggml-impl.h"

namespace {

struct cpu_ctx {
    ggml_threadpool *tp;
};

bool cpu_supports_op(ggml_backend *, const ggml_tensor *op) {
    // every op has a CPU kernel; non-host memory is refused at compute time
    return ggml_tensor_is_host(op);
}

bool cpu_sparse_dense(ggml_backend *, int64_t n_active, int64_t n, int64_t T) {
    return ggml_cpu_sparse_should_use_dense(n_active, n, T);
}

int cpu_compute(ggml_backend *be, ggml_tensor **nodes, int n) {
    const int rc = ggml_cpu_compute_nodes(((cpu_ctx *)be->ctx)->tp, nodes, n, true);
    if (rc && rc != 4)  // 4: the node on the wrong side of a transfer is named already
        ggml_backend_set_error("CPU: graph compute failed (code %d)", rc);
    return rc;
}

void cpu_copy(ggml_backend *, const ggml_tensor *src, ggml_tensor *dst) {
    if (!ggml_tensor_is_host(src) || !ggml_tensor_is_host(dst))
        ggml_abort("CPU: copy between '%s' and '%s' touches device memory", src->name, dst->name);
    memcpy(dst->data, src->data, ggml_nbytes(src));
}

int cpu_synchronize(ggml_backend *) { return 0; }
void cpu_event_record(ggml_backend *, ggml_backend_event *ev, uint64_t gen) { ggml_backend_event_signal(ev, gen); }
void cpu_event_wait(ggml_backend *, ggml_backend_event *ev, uint64_t gen) { ggml_backend_event_block(ev, gen); }

void cpu_free(ggml_backend *be) {
    cpu_ctx *c = (cpu_ctx *)be->ctx;
    ggml_threadpool_free(c->tp);
    delete c;
    delete be;
}

}  // namespace

ggml_backend_t ggml_backend_cpu_init(int n_threads) {
    ggml_threadpool *tp = ggml_threadpool_new(n_threads);
    if (!tp) {
        ggml_backend_set_error("CPU: cannot start %d threads", n_threads);
        return nullptr;
    }
    ggml_backend *be = new ggml_backend();
    be->name = "CPU";
    be->is_cpu = true;
    be->iface = {cpu_supports_op, cpu_sparse_dense, cpu_compute, cpu_copy, cpu_synchronize,
                 cpu_event_record, cpu_event_wait, cpu_free, nullptr, nullptr};
    be->buft = be->host_buft = ggml_backend_cpu_buffer_type();
    be->ctx = new cpu_ctx{tp};
    return be;
}

ggml_threadpool *ggml_backend_cpu_threadpool(ggml_backend_t be) {
    return be->is_cpu ? ((cpu_ctx *)be->ctx)->tp : nullptr;
}
