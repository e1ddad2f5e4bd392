// Buffer types, buffers, tensor data access, transfers and events: the parts
// of the backend layer that every backend shares.
#include "ggml-backend.h"

#include <sys/mman.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ggml-backend-impl.h"
#include "ggml-impl.h"

static thread_local char g_error[512];

void ggml_backend_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof(g_error), fmt, ap);
    va_end(ap);
}

const char *ggml_backend_last_error(void) { return g_error; }

// ---------------------------------------------------------------- buffer types

const char *ggml_backend_buft_name(ggml_backend_buffer_type_t buft) { return buft->name; }
bool ggml_backend_buft_is_host(ggml_backend_buffer_type_t buft) { return buft->host; }
size_t ggml_backend_buft_alignment(ggml_backend_buffer_type_t buft) { return buft->alignment; }
size_t ggml_backend_buft_budget(ggml_backend_buffer_type_t buft) { return buft->budget; }
size_t ggml_backend_buft_allocated(ggml_backend_buffer_type_t buft) { return buft->allocated.load(); }

ggml_backend_buffer_t ggml_backend_buft_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
    const size_t a = buft->alignment;
    const size_t padded = (size + a - 1) / a * a;
    // reserve against the budget first, so concurrent allocations cannot both pass
    size_t cur = buft->allocated.load();
    do {
        if (buft->budget != SIZE_MAX && (padded > buft->budget || cur > buft->budget - padded)) {
            ggml_backend_set_error("%s: %.1f MiB requested with %.1f of %.1f MiB in use: over the memory budget",
                                   buft->name, padded / 1048576.0, cur / 1048576.0, buft->budget / 1048576.0);
            return nullptr;
        }
    } while (!buft->allocated.compare_exchange_weak(cur, cur + padded));
    void *base = padded ? buft->alloc_mem(buft, padded) : nullptr;
    if (padded && !base) {
        buft->allocated -= padded;
        ggml_backend_set_error("%s: out of memory allocating %.1f MiB", buft->name, padded / 1048576.0);
        return nullptr;
    }
    return new ggml_backend_buffer{buft, base, padded, true, GGML_BACKEND_BUFFER_USAGE_ANY};
}

// ---------------------------------------------------------------- buffers

void ggml_backend_buffer_free(ggml_backend_buffer_t buf) {
    if (!buf) return;
    if (buf->owned && buf->base) {
        buf->buft->free_mem(buf->buft, buf->base, buf->size);
        buf->buft->allocated -= buf->size;
    }
    delete buf;
}

void *ggml_backend_buffer_base(ggml_backend_buffer_t buf) { return buf->base; }
size_t ggml_backend_buffer_size(ggml_backend_buffer_t buf) { return buf->size; }
bool ggml_backend_buffer_is_host(ggml_backend_buffer_t buf) { return buf->buft->host; }
ggml_backend_buffer_type_t ggml_backend_buffer_get_type(ggml_backend_buffer_t buf) { return buf->buft; }
void ggml_backend_buffer_set_usage(ggml_backend_buffer_t buf, ggml_backend_buffer_usage usage) { buf->usage = usage; }
ggml_backend_buffer_usage ggml_backend_buffer_get_usage(ggml_backend_buffer_t buf) { return buf->usage; }

// CPU buffers start zeroed: large ones are fresh anonymous mappings (zero
// pages, committed only when touched), small ones are cleared.
static constexpr size_t MAP_THRESHOLD = 1u << 20;
static void *host_alloc(ggml_backend_buffer_type *buft, size_t size) {
    if (size >= MAP_THRESHOLD) {
        void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? nullptr : p;
    }
    void *p = aligned_alloc(buft->alignment, size);
    if (p) memset(p, 0, size);
    return p;
}
static void host_free(ggml_backend_buffer_type *, void *base, size_t size) {
    if (size >= MAP_THRESHOLD) munmap(base, size);
    else free(base);
}

// One extra huge page so the start can be aligned to 2 MiB (the kernel only
// maps a huge page over an aligned range); the mapping's start is kept in
// front of the aligned block to unmap it.
static constexpr size_t HUGE_PAGE = 2u << 20;
static void *huge_alloc(ggml_backend_buffer_type *, size_t size) {
    const size_t map_size = (size + 2 * HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *map = mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return nullptr;
    char *p = (char *)(((uintptr_t)map + HUGE_PAGE) / HUGE_PAGE * HUGE_PAGE);  // leaves room for the header
    ((void **)p)[-1] = map;
    ((size_t *)p)[-2] = map_size;
#ifdef MADV_HUGEPAGE
    madvise(p, size, MADV_HUGEPAGE);  // advice only: failure leaves 4 KiB pages
#endif
    return p;
}
static void huge_free(ggml_backend_buffer_type *, void *base, size_t) {
    char *p = (char *)base;  // the header lies before base: never sealed (read-only) with the data
    munmap(((void **)p)[-1], ((size_t *)p)[-2]);
}

ggml_backend_buffer_type_t ggml_backend_cpu_buffer_type(void) {
    static ggml_backend_buffer_type t{"CPU", true, GGML_DEFAULT_ALIGN, SIZE_MAX, {0}, host_alloc, host_free,
                                      nullptr, nullptr, nullptr, nullptr};
    return &t;
}

ggml_backend_buffer_type_t ggml_backend_cpu_hugepage_buffer_type(void) {
    static ggml_backend_buffer_type t{"CPU_2M", true, GGML_DEFAULT_ALIGN, SIZE_MAX, {0}, huge_alloc, huge_free,
                                      nullptr, nullptr, nullptr, nullptr};
    return &t;
}

void ggml_backend_buft_init_device(ggml_backend_buffer_type *bt, const char *name, size_t budget,
                                   void *(*alloc_mem)(ggml_backend_buffer_type *, size_t),
                                   void (*free_mem)(ggml_backend_buffer_type *, void *, size_t),
                                   void (*set)(ggml_backend_buffer_type *, void *, const void *, size_t),
                                   void (*get)(ggml_backend_buffer_type *, void *, const void *, size_t),
                                   void (*memset)(ggml_backend_buffer_type *, void *, uint8_t, size_t), void *ctx) {
    bt->name = name;
    bt->host = false;
    bt->alignment = 256;
    bt->budget = budget;
    bt->alloc_mem = alloc_mem;
    bt->free_mem = free_mem;
    bt->set = set;
    bt->get = get;
    bt->memset = memset;
    bt->ctx = ctx;
}

void ggml_backend_buft_init_host(ggml_backend_buffer_type *bt, const char *name,
                                 void *(*alloc_mem)(ggml_backend_buffer_type *, size_t),
                                 void (*free_mem)(ggml_backend_buffer_type *, void *, size_t), void *ctx) {
    // host memory: no budget, the CPU reads and writes it directly (no set/get/memset)
    ggml_backend_buft_init_device(bt, name, SIZE_MAX, alloc_mem, free_mem, nullptr, nullptr, nullptr, ctx);
    bt->host = true;
    bt->alignment = GGML_DEFAULT_ALIGN;
}

ggml_backend_buffer_t ggml_backend_cpu_buffer_from_ptr(void *ptr, size_t size) {
    return new ggml_backend_buffer{ggml_backend_cpu_buffer_type(), ptr, size, false, GGML_BACKEND_BUFFER_USAGE_WEIGHTS};
}

bool ggml_backend_tensor_alloc(ggml_backend_buffer_t buf, ggml_tensor *t, size_t offs) {
    if (t->view_src || offs > buf->size || ggml_nbytes(t) > buf->size - offs) return false;
    t->buffer = buf;
    t->data = (char *)buf->base + offs;
    return true;
}

ggml_backend_buffer_t ggml_backend_tensor_buffer(const ggml_tensor *t) {
    return t->view_src ? t->view_src->buffer : t->buffer;
}

bool ggml_tensor_is_host(const ggml_tensor *t) {
    const ggml_backend_buffer *b = ggml_backend_tensor_buffer(t);
    return !b || b->buft->host;
}

bool ggml_transfer_host_in(const ggml_tensor *t, const ggml_backend_buffer_type *host_buft) {
    const ggml_backend_buffer *b = ggml_backend_tensor_buffer(ggml_tensor_is_host(t) ? t : t->src[0]);
    return b && b->buft == host_buft;
}

bool ggml_backend_node_memory_ok(const char *backend, const ggml_tensor *node, bool host) {
    if (!host && ggml_is_transfer(node)) return true;
    const char *other = host ? "device" : "host";
    if (ggml_tensor_is_host(node) != host) {
        ggml_backend_set_error("%s: node '%s' (%s) has its result in %s memory", backend, node->name, ggml_op_name(node->op),
                               other);
        return false;
    }
    for (int s = 0; s < GGML_MAX_SRC; s++)
        if (node->src[s] && ggml_tensor_is_host(node->src[s]) != host) {
            ggml_backend_set_error("%s: node '%s' (%s) reads '%s' in %s memory: a transfer is missing", backend, node->name,
                                   ggml_op_name(node->op), node->src[s]->name, other);
            return false;
        }
    return true;
}

// ---------------------------------------------------------------- tensor data

static ggml_backend_buffer_type *buft_of(const ggml_tensor *t) {
    const ggml_backend_buffer *b = ggml_backend_tensor_buffer(t);
    return b ? b->buft : nullptr;
}

static void check_range(const ggml_tensor *t, size_t offset, size_t size, const char *what) {
    if (!t->data) ggml_abort("%s: tensor '%s' has no memory", what, t->name);
    if (offset > ggml_nbytes(t) || size > ggml_nbytes(t) - offset)
        ggml_abort("%s: bytes [%zu, %zu) outside tensor '%s' (%zu bytes)", what, offset, offset + size, t->name,
                   ggml_nbytes(t));
}

void ggml_backend_tensor_set(ggml_tensor *t, const void *data, size_t offset, size_t size) {
    check_range(t, offset, size, "tensor_set");
    ggml_backend_buffer_type *bt = buft_of(t);
    if (bt && bt->set) bt->set(bt, (char *)t->data + offset, data, size);
    else memcpy((char *)t->data + offset, data, size);
}

void ggml_backend_tensor_get(const ggml_tensor *t, void *data, size_t offset, size_t size) {
    check_range(t, offset, size, "tensor_get");
    ggml_backend_buffer_type *bt = buft_of(t);
    if (bt && bt->get) bt->get(bt, data, (const char *)t->data + offset, size);
    else memcpy(data, (const char *)t->data + offset, size);
}

void ggml_backend_tensor_memset(ggml_tensor *t, uint8_t value, size_t offset, size_t size) {
    check_range(t, offset, size, "tensor_memset");
    ggml_backend_buffer_type *bt = buft_of(t);
    if (bt && bt->memset) bt->memset(bt, (char *)t->data + offset, value, size);
    else memset((char *)t->data + offset, value, size);
}

// ---------------------------------------------------------------- backends

const char *ggml_backend_name(ggml_backend_t be) { return be->name; }
bool ggml_backend_is_cpu(ggml_backend_t be) { return be->is_cpu; }
ggml_backend_buffer_type_t ggml_backend_get_default_buffer_type(ggml_backend_t be) { return be->buft; }
ggml_backend_buffer_type_t ggml_backend_get_host_buffer_type(ggml_backend_t be) { return be->host_buft; }
bool ggml_backend_supports_op(ggml_backend_t be, const ggml_tensor *op) { return be->iface.supports_op(be, op); }

bool ggml_backend_sparse_should_use_dense(ggml_backend_t be, int64_t n_active, int64_t n, int64_t T) {
    return be->iface.sparse_dense(be, n_active, n, T);
}

int ggml_backend_graph_compute_async(ggml_backend_t be, ggml_tensor **nodes, int n) {
    return be->iface.compute(be, nodes, n);
}

int ggml_backend_graph_compute(ggml_backend_t be, ggml_cgraph *g) {
    const int rc = be->iface.compute(be, ggml_graph_nodes(g), ggml_graph_n_nodes(g));
    be->iface.synchronize(be);
    return rc;
}

void ggml_backend_synchronize(ggml_backend_t be) { be->iface.synchronize(be); }

void ggml_backend_tensor_copy_async(ggml_backend_t be, const ggml_tensor *src, ggml_tensor *dst) {
    if (ggml_nbytes(src) != ggml_nbytes(dst) || !ggml_is_contiguous(src) || !ggml_is_contiguous(dst))
        ggml_abort("tensor_copy: '%s' and '%s' differ in size or are not contiguous", src->name, dst->name);
    be->iface.copy(be, src, dst);
}

void ggml_backend_free(ggml_backend_t be) {
    if (be) be->iface.free(be);
}

// ---------------------------------------------------------------- events

ggml_backend_event_t ggml_backend_event_new(ggml_backend_t be) {
    ggml_backend_event *ev = new ggml_backend_event();
    ev->be = be;
    return ev;
}

void ggml_backend_event_free(ggml_backend_event_t ev) {
    if (ev && ev->native && ev->be->iface.event_release) ev->be->iface.event_release(ev->be, ev);
    delete ev;
}

void ggml_backend_event_signal(ggml_backend_event *ev, uint64_t gen) {
    {
        std::lock_guard<std::mutex> lock(ev->mu);
        if (gen > ev->reached) ev->reached = gen;
    }
    ev->cv.notify_all();
}

void ggml_backend_event_block(ggml_backend_event *ev, uint64_t gen) {
    if (ev->be->iface.event_host_wait) {
        ev->be->iface.event_host_wait(ev->be, ev, gen, true);
        return;
    }
    std::unique_lock<std::mutex> lock(ev->mu);
    ev->cv.wait(lock, [&] { return ev->reached >= gen; });
}

void ggml_backend_event_record(ggml_backend_event_t ev) {
    uint64_t gen;
    {
        std::lock_guard<std::mutex> lock(ev->mu);
        gen = ++ev->recorded;
    }
    ev->be->iface.event_record(ev->be, ev, gen);
}

void ggml_backend_event_wait(ggml_backend_t waiter, ggml_backend_event_t ev) {
    uint64_t gen;
    {
        std::lock_guard<std::mutex> lock(ev->mu);
        gen = ev->recorded;
    }
    waiter->iface.event_wait(waiter, ev, gen);
}

bool ggml_backend_event_query(ggml_backend_event_t ev) {
    std::unique_lock<std::mutex> lock(ev->mu);
    if (ev->be->iface.event_host_wait) {
        const uint64_t gen = ev->recorded;
        lock.unlock();
        return ev->be->iface.event_host_wait(ev->be, ev, gen, false);
    }
    return ev->reached >= ev->recorded;
}

void ggml_backend_event_synchronize(ggml_backend_event_t ev) {
    uint64_t gen;
    {
        std::lock_guard<std::mutex> lock(ev->mu);
        gen = ev->recorded;
    }
    ggml_backend_event_block(ev, gen);
}

// ---------------------------------------------------------------- transfers

ggml_tensor *ggml_transfer(ggml_context *ctx, ggml_tensor *a, bool to_host) {
    if (!ggml_is_contiguous_rows(a)) ggml_abort("transfer: the rows of '%s' are not contiguous", a->name);
    ggml_tensor *t = ggml_cont(ctx, a);
    if (t == a) ggml_abort("transfer: ggml_cont returned its input");
    t->flags |= GGML_TENSOR_FLAG_TRANSFER | (to_host ? GGML_TENSOR_FLAG_TRANSFER_HOST : 0);
    return t;
}

bool ggml_is_transfer(const ggml_tensor *t) { return (t->flags & GGML_TENSOR_FLAG_TRANSFER) != 0; }

size_t ggml_transfer_rows(const ggml_tensor *t, void (*copy)(void *dst, const void *src, size_t n, void *ud), void *ud) {
    const ggml_tensor *src = t->src[0];
    if (ggml_is_contiguous(src)) {
        copy(t->data, src->data, ggml_nbytes(t), ud);
        return 1;
    }
    // rows of a strided source (columns of a matrix): one copy per row, as a 2-D DMA does
    const size_t row = ggml_row_size(src->type, src->ne[0]);
    char *dst = (char *)t->data;
    size_t n = 0;
    for (int64_t i3 = 0; i3 < src->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < src->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < src->ne[1]; i1++, n++, dst += row)
                copy(dst, (const char *)src->data + i1 * src->nb[1] + i2 * src->nb[2] + i3 * src->nb[3], row, ud);
    return n;
}
