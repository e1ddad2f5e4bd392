// The CPU executor: a persistent thread pool that runs a graph node by node,
// every worker taking its share of each node, with a barrier between nodes.
#include <sched.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "ggml-backend-impl.h"
#include "ggml-impl.h"
#include "ops.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
static inline void cpu_relax() { _mm_pause(); }
#else
static inline void cpu_relax() {}
#endif

typedef void (*forward_fn)(const ggml_compute_params *, ggml_tensor *);

// The kernels by op, generated from the op table: NULL for the views.
#define GGML_CPU_FORWARD_0(name) ggml_compute_forward_##name
#define GGML_CPU_FORWARD_1(name) nullptr
#define GGML_CPU_FORWARD_ROW(NAME, name, n_src_min, n_src_max, view, prec, work) GGML_CPU_FORWARD_##view(name),
static const forward_fn k_forward[] = {GGML_OP_LIST(GGML_CPU_FORWARD_ROW)};
#undef GGML_CPU_FORWARD_ROW
static_assert(sizeof(k_forward) / sizeof(k_forward[0]) == GGML_OP_COUNT, "one kernel slot per op");

static forward_fn forward_table(ggml_op op) { return (int)op >= 0 && op < GGML_OP_COUNT ? k_forward[op] : nullptr; }

struct ggml_threadpool {
    int n_threads = 1;
    std::vector<std::thread> workers;

    // job hand-off: workers wait for `generation` to change
    std::mutex mu;
    std::condition_variable cv;
    std::atomic<uint64_t> generation{0};
    std::atomic<bool> stop{false};  // read by workers that skipped the condition-variable wait
    ggml_tensor **nodes = nullptr;  // the run being computed
    int n_nodes = 0;

    // sense-reversing barrier; waiters past their spin sleep on `phase`
    std::atomic<int> arrived{0};
    std::atomic<int> phase{0};
    std::atomic<int> sleepers{0};

    // ggml_claim's counters: the i-th node run takes work[i % 2]; thread 0
    // zeroes the next one's during node i (nobody uses it between those barriers)
    std::atomic<int64_t> work[2]{};

    void *wdata = nullptr;
    size_t wsize = 0;
    ggml_sparse_dense_policy dense_policy = ggml_cpu_sparse_should_use_dense;
};

// Sleep while *word == val (spurious wake-ups are fine: callers re-check).
static void wait_on(std::atomic<int> *word, int val) {
#if defined(__linux__)
    syscall(SYS_futex, (int *)word, FUTEX_WAIT_PRIVATE, val, nullptr, nullptr, 0);
#else
    (void)word;
    (void)val;
    sched_yield();
#endif
}

static void wake_all(std::atomic<int> *word) {
#if defined(__linux__)
    syscall(SYS_futex, (int *)word, FUTEX_WAKE_PRIVATE, 0x7fffffff, nullptr, nullptr, 0);
#else
    (void)word;
#endif
}

// Spin iterations before a waiter sleeps: long enough to cover a typical node
// (tens of microseconds) on an idle machine, short enough that on a busy one
// a waiter soon stops burning the time slice its late partner needs. A
// sleeping waiter also keeps its scheduler credit, so it runs promptly once woken.
static constexpr int BARRIER_SPINS = 4096;

void ggml_barrier(ggml_threadpool *tp) {
    if (tp->n_threads == 1) return;
    const int ph = tp->phase.load(std::memory_order_acquire);
    if (tp->arrived.fetch_add(1, std::memory_order_acq_rel) == tp->n_threads - 1) {
        tp->arrived.store(0, std::memory_order_relaxed);
        tp->phase.fetch_add(1, std::memory_order_seq_cst);
        // seq_cst pairs with the sleepers increment below: either we see the
        // sleeper, or the sleeper's futex sees the new phase and returns
        if (tp->sleepers.load(std::memory_order_seq_cst) > 0) wake_all(&tp->phase);
        return;
    }
    for (int spins = 0; spins < BARRIER_SPINS; spins++) {
        if (tp->phase.load(std::memory_order_acquire) != ph) return;
        cpu_relax();
    }
    tp->sleepers.fetch_add(1, std::memory_order_seq_cst);
    while (tp->phase.load(std::memory_order_acquire) == ph) wait_on(&tp->phase, ph);
    tp->sleepers.fetch_sub(1, std::memory_order_relaxed);
}

int64_t ggml_claim(const ggml_compute_params *params, int64_t step) {
    if (params->seq < 0) ggml_abort("ggml_claim: no work counter in a sub-call");
    return params->tp->work[params->seq & 1].fetch_add(step, std::memory_order_relaxed);
}

static void run_graph(ggml_threadpool *tp, int ith) {
    ggml_compute_params params = {ith, tp->n_threads, tp->wdata, tp->wsize, tp, tp->dense_policy, 0};
    const int n = tp->n_nodes;
    for (int i = 0, seq = 0; i < n; i++) {
        ggml_tensor *node = tp->nodes[i];
        if (ggml_op_is_view(node->op)) continue;
        params.seq = seq++;  // counts the nodes run (a view has no barrier after it)
        if (ith == 0) tp->work[seq & 1].store(0, std::memory_order_relaxed);  // the next one's: published by this node's barrier
        forward_table(node->op)(&params, node);
        ggml_barrier(tp);
    }
}

static void worker_main(ggml_threadpool *tp, int ith) {
    uint64_t seen = 0;
    for (;;) {
        // Spin a little for back-to-back graphs (decode), then sleep.
        int spins = 0;
        while (tp->generation.load(std::memory_order_acquire) == seen && spins < 20000) {
            cpu_relax();
            spins++;
        }
        if (tp->generation.load(std::memory_order_acquire) == seen) {
            std::unique_lock<std::mutex> lock(tp->mu);
            tp->cv.wait(lock, [&] { return tp->stop || tp->generation.load() != seen; });
        }
        if (tp->stop) return;
        seen = tp->generation.load(std::memory_order_acquire);
        run_graph(tp, ith);
        ggml_barrier(tp);  // job done: the caller may return
    }
}

ggml_threadpool *ggml_threadpool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    ggml_threadpool *tp = new ggml_threadpool();
    tp->n_threads = n_threads;
    try {
        for (int i = 1; i < n_threads; i++) tp->workers.emplace_back(worker_main, tp, i);
    } catch (const std::exception &) {  // a thread did not start (EAGAIN): stop and join those that did
        ggml_threadpool_free(tp);
        return nullptr;
    }
    return tp;
}

void ggml_threadpool_free(ggml_threadpool *tp) {
    if (!tp) return;
    {
        std::lock_guard<std::mutex> lock(tp->mu);
        tp->stop = true;
        tp->generation.fetch_add(1);
    }
    tp->cv.notify_all();
    for (auto &w : tp->workers) w.join();
    free(tp->wdata);
    delete tp;
}

int ggml_threadpool_n_threads(const ggml_threadpool *tp) { return tp->n_threads; }

void ggml_threadpool_set_sparse_dense_policy(ggml_threadpool *tp, ggml_sparse_dense_policy policy) {
    tp->dense_policy = policy ? policy : ggml_cpu_sparse_should_use_dense;
}

int ggml_cpu_compute_nodes(ggml_threadpool *tp, ggml_tensor **nodes, int n, bool check_host) {
    size_t need = 0;
    for (int i = 0; i < n; i++) {
        ggml_tensor *node = nodes[i];
        if (ggml_op_is_view(node->op)) continue;
        if (!forward_table(node->op)) return 1;  // op without a CPU kernel
        if (!node->data) return 2;                // not planned
        if (check_host && !ggml_backend_node_memory_ok("CPU", node, true)) return 4;  // a transfer is missing
        size_t w = ggml_op_work_size(node, tp->n_threads);
        if (w > need) need = w;
    }
    if (need > tp->wsize) {
        void *p = aligned_alloc(GGML_DEFAULT_ALIGN, (need + GGML_DEFAULT_ALIGN - 1) / GGML_DEFAULT_ALIGN * GGML_DEFAULT_ALIGN);
        if (!p) return 3;
        free(tp->wdata);
        tp->wdata = p;
        tp->wsize = need;
    }
    tp->nodes = nodes;
    tp->n_nodes = n;
    tp->work[0].store(0, std::memory_order_relaxed);  // node 0's (the release below publishes it)
    if (tp->n_threads > 1) {
        {
            std::lock_guard<std::mutex> lock(tp->mu);
            tp->generation.fetch_add(1, std::memory_order_release);
        }
        tp->cv.notify_all();
    }
    run_graph(tp, 0);
    ggml_barrier(tp);
    return 0;
}

int ggml_graph_compute(ggml_cgraph *g, ggml_threadpool *tp) {
    return ggml_cpu_compute_nodes(tp, ggml_graph_nodes(g), ggml_graph_n_nodes(g), true);
}

int ggml_graph_compute_with_threads(ggml_cgraph *g, int n_threads) {
    ggml_threadpool *tp = ggml_threadpool_new(n_threads);
    if (!tp) return 4;  // threads could not be started
    int rc = ggml_graph_compute(g, tp);
    ggml_threadpool_free(tp);
    return rc;
}
