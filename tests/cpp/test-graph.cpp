// Core runtime: contexts, views and strides, graph order, planner reuse,
// thread pool barrier. (Op kernels have their own reference tests.)
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <cstring>
#include <thread>
#include <vector>

#include "ggml-impl.h"
#include "ggml.h"
#include "ops.h"

static int failures = 0;

// Counts C++ heap allocations, to check that re-planning allocates nothing.
static std::atomic<long> g_news{0};
void *operator new(size_t n) {
    g_news++;
    if (void *p = malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void *p) noexcept { free(p); }
void operator delete(void *p, size_t) noexcept { free(p); }
#define CHECK(cond)                                                   \
    do {                                                              \
        if (!(cond)) {                                                \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            failures++;                                               \
        }                                                             \
    } while (0)

static void test_tensors() {
    ggml_init_params ip = {1 << 20, nullptr, false};
    ggml_context *ctx = ggml_init(ip);
    ggml_tensor *a = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 5, 3, 2);
    CHECK(a->data != nullptr);
    CHECK(a->nb[0] == 4 && a->nb[1] == 20 && a->nb[2] == 60 && a->nb[3] == 120);
    CHECK(ggml_nbytes(a) == 120 && ggml_nelements(a) == 30 && ggml_nrows(a) == 6);
    CHECK(ggml_is_contiguous(a));
    ggml_tensor *q = ggml_new_tensor_2d(ctx, GGML_TYPE_Q4_0, 64, 3);
    CHECK(q->nb[1] == 36 && ggml_nbytes(q) == 108);
    // permute: dimension i goes to position axis_i
    ggml_tensor *p = ggml_permute(ctx, a, 2, 0, 1, 3);
    CHECK(p->ne[2] == 5 && p->ne[0] == 3 && p->ne[1] == 2);
    CHECK(p->nb[2] == 4 && p->nb[0] == 20 && p->nb[1] == 60);
    CHECK(!ggml_is_contiguous(p) && p->data == a->data && p->view_src == a);
    ggml_tensor *t = ggml_transpose(ctx, ggml_reshape_2d(ctx, a, 15, 2));
    CHECK(t->ne[0] == 2 && t->ne[1] == 15 && t->nb[0] == 60 && t->nb[1] == 4 && t->view_src == a);
    ggml_tensor *v = ggml_view_2d(ctx, a, 2, 3, a->nb[1], 8);
    CHECK((char *)v->data == (char *)a->data + 8 && v->nb[1] == 20);
    ggml_tensor *vv = ggml_view_1d(ctx, v, 1, 4);  // view of a view resolves to the base
    CHECK(vv->view_src == a && vv->view_offs == 12);
    ggml_set_name(a, "a");
    CHECK(ggml_get_tensor(ctx, "a") == a);
    CHECK(ggml_get_first_tensor(ctx) == a && ggml_get_next_tensor(ctx, a) == q);
    ggml_free(ctx);
}

static void test_graph_and_planner() {
    ggml_init_params ip = {1 << 20, nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    const int n = 1000;
    ggml_tensor *x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    ggml_set_input(x);
    ggml_tensor *cur = x;
    std::vector<ggml_tensor *> chain;
    for (int i = 0; i < 10; i++) {
        cur = i % 2 ? ggml_silu(ctx, cur) : ggml_scale(ctx, cur, 2.0f);
        chain.push_back(cur);
    }
    ggml_tensor *y = ggml_add(ctx, cur, x);
    ggml_set_output(y);
    ggml_cgraph *g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, y);
    CHECK(ggml_graph_n_nodes(g) == 11);
    CHECK(ggml_graph_node(g, -1) == y);
    for (int i = 0; i < 10; i++) CHECK(ggml_graph_node(g, i) == chain[i]);  // topological order
    ggml_gallocr *a = ggml_gallocr_new();
    CHECK(ggml_gallocr_alloc_graph(a, g));
    const size_t row = 4032;  // 4000 bytes aligned to 64
    // liveness: the input plus at most two live intermediates at any time
    CHECK(ggml_gallocr_buffer_size(a) <= 3 * row + 64);
    CHECK(ggml_gallocr_buffer_size(a) < 12 * row);
    for (int i = 0; i < 11; i++) CHECK(ggml_graph_node(g, i)->data != nullptr);
    // no two simultaneously live tensors overlap: consecutive chain elements differ
    for (int i = 1; i < 10; i++) CHECK(chain[i]->data != chain[i - 1]->data);
    CHECK(y->data != x->data && y->data != cur->data);
    const size_t size1 = ggml_gallocr_buffer_size(a);
    // a second, identical graph reuses the buffer without growing it
    ggml_context *ctx2 = ggml_init(ip);
    ggml_tensor *x2 = ggml_new_tensor_1d(ctx2, GGML_TYPE_F32, n);
    ggml_tensor *c2 = x2;
    for (int i = 0; i < 10; i++) c2 = i % 2 ? ggml_silu(ctx2, c2) : ggml_scale(ctx2, c2, 2.0f);
    ggml_cgraph *g2 = ggml_new_graph(ctx2);
    ggml_build_forward_expand(g2, ggml_add(ctx2, c2, x2));
    void *before = x->data;
    const long news_before = g_news.load();
    CHECK(ggml_gallocr_alloc_graph(a, g2));
    CHECK(g_news.load() == news_before);  // re-planning the same shape: no heap allocation
    CHECK(ggml_gallocr_buffer_size(a) == size1);
    CHECK(x2->data == before);  // same plan, same place
    ggml_gallocr_free(a);
    ggml_free(ctx);
    ggml_free(ctx2);
}

static void test_barrier() {
    // Every worker increments a per-phase counter; after each barrier all
    // increments of the previous phase must be visible.
    for (int nth : {1, 2, 3, 4}) {
        ggml_threadpool *tp = ggml_threadpool_new(nth);
        std::atomic<int> counter{0};
        std::atomic<int> bad{0};
        std::vector<std::thread> th;
        for (int i = 0; i < nth; i++) {
            th.emplace_back([&] {
                for (int round = 1; round <= 200; round++) {
                    counter.fetch_add(1);
                    ggml_barrier(tp);
                    if (counter.load() < round * nth) bad++;
                    ggml_barrier(tp);
                }
            });
        }
        for (auto &t : th) t.join();
        CHECK(bad.load() == 0);
        CHECK(counter.load() == 200 * nth);
        ggml_threadpool_free(tp);
    }
}

// The op table against the constructors: every node's sources sit in the
// table's [n_src_min, n_src_max] slots; names map back to their op.
static void test_op_table() {
    for (int i = 0; i < GGML_OP_COUNT; i++) {
        const ggml_op op = (ggml_op)i;
        const ggml_op_traits *tr = ggml_get_op_traits(op);
        CHECK(tr && ggml_op_from_name(tr->key) == op && ggml_op_from_name(tr->name) == op);
        CHECK(0 <= tr->n_src_min && tr->n_src_min <= tr->n_src_max && tr->n_src_max <= GGML_MAX_SRC);
    }
    CHECK(ggml_get_op_traits(GGML_OP_COUNT) == nullptr && ggml_op_from_name("nope") == GGML_OP_COUNT);
    CHECK(strcmp(ggml_op_name(GGML_OP_MUL_MAT), "MUL_MAT") == 0);
    ggml_init_params ip = {256 * ggml_tensor_overhead(), nullptr, true};
    ggml_context *ctx = ggml_init(ip);
    const int64_t d = 64, n = 32;
    ggml_tensor *x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d, 2), *w = ggml_new_tensor_2d(ctx, GGML_TYPE_Q8_0, d, n);
    ggml_tensor *w3 = ggml_new_tensor_2d(ctx, GGML_TYPE_Q8_0, d, 3 * n), *wd = ggml_new_tensor_2d(ctx, GGML_TYPE_Q8_0, n, d);
    ggml_tensor *wt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d, n), *h = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, 2);
    ggml_tensor *pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 2), *ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 1);
    ggml_tensor *x3 = ggml_reshape_3d(ctx, x, 16, 4, 2), *mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d, 2);
    ggml_tensor *idx = ggml_sparse_select(ctx, h, 0.0f);
    ggml_tensor *nodes[] = {
        ggml_add(ctx, x, x), ggml_mul(ctx, x, x), ggml_scale(ctx, x, 2), ggml_rms_norm(ctx, x, 1e-6f), ggml_norm(ctx, x, 1e-5f),
        ggml_mul_mat(ctx, w, x), ggml_get_rows(ctx, w, ids), ggml_rope(ctx, x3, pos, 16, 0, 1e4f, 1),
        ggml_soft_max_ext(ctx, x, nullptr, 1), ggml_soft_max_ext(ctx, x, mask, 1), ggml_relu(ctx, x), ggml_silu(ctx, x),
        ggml_gelu(ctx, x), ggml_swiglu(ctx, x, x), ggml_reglu(ctx, x, x), ggml_geglu(ctx, x, x), ggml_argmax(ctx, x),
        ggml_cpy(ctx, x, mask), ggml_cont(ctx, x), x3, ggml_view_1d(ctx, x, 4, 0), ggml_transpose(ctx, x),
        ggml_permute(ctx, x, 1, 0, 2, 3), idx, ggml_sparse_mask(ctx, h, 0.5f), ggml_mul_mat_sparse_rows(ctx, w, x, idx, 0, n),
        ggml_sparse_down(ctx, wt, nullptr, h, idx, 0, n), ggml_sparse_down(ctx, wt, wd, h, idx, 0, n),
        ggml_sparse_ffn_bundle(ctx, w3, nullptr, nullptr, nullptr, x, idx, 0, n, GGML_OP_SWIGLU, false),
        ggml_sparse_ffn_bundle(ctx, w3, w, w, wd, x, idx, 0, n, GGML_OP_SWIGLU, false), x};
    for (ggml_tensor *t : nodes) {
        const ggml_op_traits *tr = ggml_get_op_traits(t->op);
        int used = 0;
        for (int j = 0; j < GGML_MAX_SRC; j++)
            if (t->src[j]) used = j + 1;
        bool required = true;
        for (int j = 0; j < tr->n_src_min; j++) required = required && t->src[j];
        CHECK(required && used <= tr->n_src_max);
        if (!(required && used <= tr->n_src_max)) fprintf(stderr, "  op %s: %d sources\n", tr->name, used);
    }
    ggml_free(ctx);
}

int main() {
    test_op_table();
    test_tensors();
    test_graph_and_planner();
    test_barrier();
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("test-graph: all checks passed\n");
    return 0;
}
