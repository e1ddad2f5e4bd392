// The backend's queue: compute (kernels enqueued on the compute stream,
// transfer nodes as asynchronous copies on the copy stream, joined back by
// two events), events, synchronisation and what the backend supports. The
// vtable is ggml_backend_i (ggml-backend-impl.h).
#include <algorithm>
#include <cstdio>

#include "attention.cuh"
#include "ops.cuh"
#include "queue.cuh"

namespace pcuda {

bool failed(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return false;
    ggml_backend_set_error("cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return true;
}

bool launched(const char *kernel) {
    const cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return true;
    ggml_backend_set_error("cuda: kernel %s: %s", kernel, cudaGetErrorString(e));
    return false;
}

bool has_format(int t) {
    return with_format(t, [](auto) {});
}

namespace {

context *ctx_of(ggml_backend *be) { return (context *)be->ctx; }

bool is_float(ggml_type t) { return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16; }
bool f32(const ggml_tensor *t) { return t && t->type == GGML_TYPE_F32; }
bool rows_contiguous(const ggml_tensor *t) { return ggml_is_contiguous_rows(t); }

// Per op and type: what the kernels of this directory compute.
bool supports(ggml_backend *, const ggml_tensor *op) {
    if (ggml_is_transfer(op)) return true;
    const ggml_tensor *a = op->src[0], *b = op->src[1];
    switch (op->op) {
        case GGML_OP_NONE:
        case GGML_OP_VIEW:
        case GGML_OP_RESHAPE:
        case GGML_OP_PERMUTE:
        case GGML_OP_TRANSPOSE: return true;
        case GGML_OP_DUP:
        case GGML_OP_CPY:
            if (ggml_nelements(a) != ggml_nelements(op)) return false;
            if (is_float(a->type) && is_float(op->type)) return true;
            if (a->type == GGML_TYPE_I32 && op->type == GGML_TYPE_I32) return true;
            return a->type == op->type && ggml_are_same_shape(a, op) && rows_contiguous(a) && rows_contiguous(op);
        case GGML_OP_ADD:
        case GGML_OP_MUL: return f32(a) && f32(b) && f32(op) && ggml_can_repeat(b, a);
        case GGML_OP_SWIGLU:
        case GGML_OP_REGLU:
        case GGML_OP_GEGLU: return f32(a) && f32(b) && f32(op) && ggml_are_same_shape(a, b);
        case GGML_OP_SCALE:
        case GGML_OP_RELU:
        case GGML_OP_SILU:
        case GGML_OP_GELU:
        case GGML_OP_TANH:
        case GGML_OP_RMS_NORM:
        case GGML_OP_NORM:
        case GGML_OP_SPARSE_MASK: return f32(a) && f32(op);
        case GGML_OP_ROPE:
            return f32(a) && f32(op) && b->type == GGML_TYPE_I32 && op->op_params[0] > 0 && op->op_params[0] % 2 == 0 &&
                   (!op->src[2] || (f32(op->src[2]) && ggml_is_contiguous(op->src[2])));
        case GGML_OP_SOFT_MAX: return f32(a) && f32(op) && op->nb[0] == sizeof(float) && (!b || f32(b));
        case GGML_OP_ARGMAX: return f32(a) && op->type == GGML_TYPE_I32;
        case GGML_OP_GET_ROWS: return has_format(a->type) && rows_contiguous(a) && b->type == GGML_TYPE_I32 && op->nb[0] == sizeof(float);
        case GGML_OP_MUL_MAT: return has_format(a->type) && rows_contiguous(a) && f32(b) && f32(op);
        case GGML_OP_SPARSE_SELECT: return f32(a);
        case GGML_OP_MUL_MAT_SPARSE_ROWS:
        case GGML_OP_SPARSE_DOWN: return has_format(a->type) && rows_contiguous(a) && f32(b);
        case GGML_OP_SPARSE_FFN: return has_format(a->type) && rows_contiguous(a) && f32(b) && b->ne[1] <= MATVEC_MAX_T;
        case GGML_OP_TOP_K: return f32(a) && op->type == GGML_TYPE_I32;
        case GGML_OP_MUL_MAT_ID: return has_format(a->type) && rows_contiguous(a) && f32(b) && f32(op) && op->src[2]->type == GGML_TYPE_I32 &&
                                       (!op->src[3] || f32(op->src[3]));
        default: return false;
    }
}

// The GPU's crossover: its sparse kernels read only the active rows at full
// bandwidth, so dense wins only when nearly everything is active or for a
// prompt batch, where the mat-mat's tensor cores pay (not yet measured on a
// device: gpu-check.sh's sparse rows sweep is the measurement).
bool sparse_dense(ggml_backend *, int64_t n_active, int64_t n, int64_t T) {
    return T > 32 || n_active * 10 >= n * 9;
}

int run_node(context &c, ggml_tensor *t) {
    switch (t->op) {
        case GGML_OP_DUP:
        case GGML_OP_CPY: return op_copy(c, t);
        case GGML_OP_ADD:
        case GGML_OP_MUL:
        case GGML_OP_SCALE:
        case GGML_OP_RELU:
        case GGML_OP_SILU:
        case GGML_OP_GELU:
        case GGML_OP_TANH:
        case GGML_OP_SWIGLU:
        case GGML_OP_REGLU:
        case GGML_OP_GEGLU:
        case GGML_OP_SPARSE_MASK: return op_elementwise(c, t);
        case GGML_OP_RMS_NORM:
        case GGML_OP_NORM: return op_norm(c, t);
        case GGML_OP_SOFT_MAX: return op_soft_max(c, t);
        case GGML_OP_ARGMAX: return op_argmax(c, t);
        case GGML_OP_ROPE: return op_rope(c, t);
        case GGML_OP_GET_ROWS: return op_get_rows(c, t);
        case GGML_OP_MUL_MAT: return op_mul_mat(c, t);
        case GGML_OP_SPARSE_SELECT:
        case GGML_OP_MUL_MAT_SPARSE_ROWS:
        case GGML_OP_SPARSE_DOWN:
        case GGML_OP_SPARSE_FFN: return op_sparse(c, t);
        case GGML_OP_TOP_K: return op_top_k(c, t);
        case GGML_OP_MUL_MAT_ID: return op_mul_mat_id(c, t);
        default: ggml_backend_set_error("cuda: no kernel for %s", ggml_op_name(t->op)); return 3;
    }
}

// A device computes on its own memory only; a transfer node has one side on the host.
bool check_node(ggml_backend *be, const ggml_tensor *node) {
    if (!node->data) {
        ggml_backend_set_error("cuda: node '%s' has no memory (not planned)", node->name);
        return false;
    }
    if (ggml_is_transfer(node)) return true;
    if (!supports(be, node)) {
        ggml_backend_set_error("cuda: node '%s': %s with %s is not supported by the CUDA backend", node->name, ggml_op_name(node->op),
                               node->src[0] ? ggml_type_name(node->src[0]->type) : "-");
        return false;
    }
    return ggml_backend_node_memory_ok("cuda", node, false);
}

// One transfer node on the copy stream: one copy for a contiguous source, a
// 2-D copy for a strided matrix, a copy per row otherwise.
bool transfer(context &c, const ggml_tensor *t) {
    const ggml_tensor *src = t->src[0];
    const size_t bytes = ggml_nbytes(t);
    ((ggml_tensor_is_host(t)) ? c.d2h : c.h2d) += bytes;
    if (!ggml_transfer_host_in(t, &c.pinned)) c.pageable += bytes;
    c.copies++;
    if (ggml_is_contiguous(src)) return PCUDA_OK(cudaMemcpyAsync(t->data, src->data, bytes, cudaMemcpyDefault, c.copy));
    const size_t row = ggml_row_size(src->type, src->ne[0]);
    if (src->ne[2] == 1 && src->ne[3] == 1)
        return PCUDA_OK(cudaMemcpy2DAsync(t->data, row, src->data, src->nb[1], row, (size_t)src->ne[1], cudaMemcpyDefault, c.copy));
    struct ud_t {
        context *c;
        bool ok;
    } ud{&c, true};
    ggml_transfer_rows(
        t,
        [](void *d, const void *s, size_t n, void *p) {
            ud_t *u = (ud_t *)p;
            if (u->ok) u->ok = PCUDA_OK(cudaMemcpyAsync(d, s, n, cudaMemcpyDefault, u->c->copy));
        },
        &ud);
    return ud.ok;
}

int compute(ggml_backend *be, ggml_tensor **nodes, int n) {
    context &c = *ctx_of(be);
    if (!PCUDA_OK(cudaSetDevice(c.device))) return 1;
    for (int i = 0; i < n; i++)
        if (!ggml_op_is_view(nodes[i]->op) && !check_node(be, nodes[i])) return 4;
    // work memory first: growing it drains the stream, which must not happen mid-segment
    size_t work = 0;
    attention_nodes an;
    for (int i = 0; i < n; i++) {
        work = std::max(work, op_scratch_bytes(nodes[i]));
        if (c.fuse_attention && match_attention(nodes, i, n, &an)) work = std::max(work, attention_scratch_bytes(an));
    }
    if (work && !scratch(c, work)) return 2;
    c.segments++;
    for (int i = 0; i < n;) {
        ggml_tensor *t = nodes[i];
        if (ggml_op_is_view(t->op)) {
            i++;
            continue;
        }
        if (ggml_is_transfer(t)) {
            // a run of transfers: the copy stream waits for what compute has
            // enqueued, copies, and compute waits for the copies (the planner
            // may reuse a copied source's memory right after)
            if (!PCUDA_OK(cudaEventRecord(c.joined, c.compute)) || !PCUDA_OK(cudaStreamWaitEvent(c.copy, c.joined, 0))) return 1;
            for (; i < n && (ggml_is_transfer(nodes[i]) || ggml_op_is_view(nodes[i]->op)); i++)
                if (ggml_is_transfer(nodes[i]) && !transfer(c, nodes[i])) return 1;
            if (!PCUDA_OK(cudaEventRecord(c.copied, c.copy)) || !PCUDA_OK(cudaStreamWaitEvent(c.compute, c.copied, 0))) return 1;
            continue;
        }
        if (const int m = c.fuse_attention ? match_attention(nodes, i, n, &an) : 0) {  // kq, soft_max, kqv: one fused op
            const int rc = op_attention(c, an);
            if (rc) return rc;
            i += m;
            continue;
        }
        const int rc = run_node(c, t);
        if (rc) return rc;
        i++;
    }
    return 0;
}

void copy_async(ggml_backend *be, const ggml_tensor *src, ggml_tensor *dst) {
    context &c = *ctx_of(be);
    (ggml_tensor_is_host(dst) ? c.d2h : c.h2d) += ggml_nbytes(src);
    c.copies++;
    if (!PCUDA_OK(cudaMemcpyAsync(dst->data, src->data, ggml_nbytes(src), cudaMemcpyDefault, c.compute)))
        ggml_abort("%s", ggml_backend_last_error());
}

int synchronize(ggml_backend *be) {
    context &c = *ctx_of(be);
    c.syncs++;
    const cudaError_t e = cudaStreamSynchronize(c.compute);
    return failed(e, "synchronize") ? 5 : 0;
}

bool is_mine(ggml_backend *be, ggml_backend_event *ev) { return ev->be == be || (ev->be && ggml_backend_is_cuda(ev->be)); }

void event_record(ggml_backend *be, ggml_backend_event *ev, uint64_t) {
    context &c = *ctx_of(be);
    if (!ev->native) {
        cudaEvent_t e;
        if (!PCUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming))) ggml_abort("%s", ggml_backend_last_error());
        ev->native = (void *)e;
    }
    // one CUDA event per layer event: a later record moves it on, so a wait
    // for an older generation waits at least as long (never less)
    if (!PCUDA_OK(cudaEventRecord((cudaEvent_t)ev->native, c.compute))) ggml_abort("%s", ggml_backend_last_error());
}

struct host_wait {
    ggml_backend_event *ev;
    uint64_t gen;
};

void event_wait(ggml_backend *be, ggml_backend_event *ev, uint64_t gen) {
    context &c = *ctx_of(be);
    c.waits++;
    if (is_mine(be, ev)) {
        if (ev->native && !PCUDA_OK(cudaStreamWaitEvent(c.compute, (cudaEvent_t)ev->native, 0))) ggml_abort("%s", ggml_backend_last_error());
        return;
    }
    // another backend's host-side event (sim): the stream waits in a host
    // function until the counter reaches gen (it makes no CUDA call)
    host_wait *w = new host_wait{ev, gen};
    if (!PCUDA_OK(cudaLaunchHostFunc(
            c.compute,
            [](void *p) {
                host_wait *hw = (host_wait *)p;
                ggml_backend_event_block(hw->ev, hw->gen);
                delete hw;
            },
            w)))
        ggml_abort("%s", ggml_backend_last_error());
}

bool event_host_wait(ggml_backend *, ggml_backend_event *ev, uint64_t, bool block) {
    if (!ev->native) return true;  // never recorded
    cudaEvent_t e = (cudaEvent_t)ev->native;
    if (block) return !failed(cudaEventSynchronize(e), "event synchronize");
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaErrorNotReady) {
        (void)cudaGetLastError();  // not an error: clear it
        return false;
    }
    return !failed(r, "event query");
}

void event_release(ggml_backend *, ggml_backend_event *ev) {
    if (ev->native) cudaEventDestroy((cudaEvent_t)ev->native);
    ev->native = nullptr;
}

}  // namespace

ggml_backend_i queue_iface(void (*free_fn)(ggml_backend *)) {
    ggml_backend_i i;
    i.supports_op = supports;
    i.sparse_dense = sparse_dense;
    i.compute = compute;
    i.copy = copy_async;
    i.synchronize = synchronize;
    i.event_record = event_record;
    i.event_wait = event_wait;
    i.free = free_fn;
    i.event_host_wait = event_host_wait;
    i.event_release = event_release;
    return i;
}

}  // namespace pcuda
