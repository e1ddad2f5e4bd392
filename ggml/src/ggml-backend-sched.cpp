// The scheduler: one graph over several backends (ggml-backend.h).
//
// Segments are runs of consecutive nodes of one backend, cut after any node
// that another backend reads. Issue order: every device segment whose inputs
// are issued goes onto its queue at once (waiting on events of other
// backends' segments inside the queue), and only then does the calling
// thread run the next CPU segment (after blocking on the events of the device
// segments it reads). So the CPU's part of a layer runs while the device
// computes its own part, and a device never waits for the host to get round
// to it. Per backend, segments are issued in graph order: that is the order
// the liveness planner assumed when it reused memory.
#include <algorithm>
#include <unordered_map>
#include <vector>

#include "ggml-backend-impl.h"
#include "ggml-impl.h"

namespace {

struct segment {
    int backend;           // index into backends
    int begin, end;        // node range
    std::vector<int> deps;  // segments whose results it reads
    bool read_elsewhere = false;  // another backend reads a result: record an event
};

ggml_tensor *base_of(ggml_tensor *t) { return t->view_src ? t->view_src : t; }

}  // namespace

struct ggml_backend_sched {
    std::vector<ggml_backend *> backends;
    std::vector<ggml_backend_buffer_type *> bufts;  // distinct, each with its planner
    std::vector<ggml_gallocr *> planners;
    std::vector<segment> segs;
    std::vector<ggml_backend_event *> events;  // one per segment (grown on demand)
    std::unordered_map<const ggml_tensor *, int> producer;  // node -> segment
    // CPU results a device copies in: planned in that device's host memory
    // (pinned for CUDA), so the copy is a DMA from where the CPU wrote them
    std::unordered_map<const ggml_tensor *, ggml_backend_buffer_type *> staged;
    ggml_backend_sched_stats stats{};

    int index_of(const ggml_backend *be) const {
        if (!be) return (int)backends.size() - 1;  // NULL: the CPU
        for (size_t i = 0; i < backends.size(); i++)
            if (backends[i] == be) return (int)i;
        return -1;
    }
};

ggml_backend_sched *ggml_backend_sched_new(ggml_backend_t *backends, int n) {
    if (n < 1 || n > 4 || !backends[n - 1]->is_cpu) {
        ggml_backend_set_error("scheduler: needs 1 to 4 backends, the last one the CPU");
        return nullptr;
    }
    ggml_backend_sched *s = new ggml_backend_sched();
    s->backends.assign(backends, backends + n);
    for (ggml_backend *be : s->backends)
        for (ggml_backend_buffer_type *bt : {be->buft, be->host_buft})
            if (std::find(s->bufts.begin(), s->bufts.end(), bt) == s->bufts.end()) {
                s->bufts.push_back(bt);
                s->planners.push_back(ggml_gallocr_new_buft(bt));
            }
    return s;
}

void ggml_backend_sched_free(ggml_backend_sched *s) {
    if (!s) return;
    for (ggml_gallocr *a : s->planners) ggml_gallocr_free(a);
    for (ggml_backend_event *e : s->events) ggml_backend_event_free(e);
    delete s;
}

namespace {

struct plan_filter {
    const ggml_backend_sched *s;
    ggml_backend_buffer_type *buft;
};

// The buffer type a tensor is planned in: its backend's own memory, or that
// backend's host memory for the result of a device-to-host transfer; a CPU
// result that a host-to-device transfer reads goes to the device's host memory.
bool planned_in(const ggml_tensor *t, void *ud) {
    const plan_filter *f = (const plan_filter *)ud;
    auto st = f->s->staged.find(t);
    if (st != f->s->staged.end()) return st->second == f->buft;
    const int b = f->s->index_of(t->backend);
    if (b < 0) return false;
    const ggml_backend *be = f->s->backends[(size_t)b];
    return ((t->flags & GGML_TENSOR_FLAG_TRANSFER_HOST) ? be->host_buft : be->buft) == f->buft;
}

}  // namespace

bool ggml_backend_sched_alloc_graph(ggml_backend_sched *s, ggml_cgraph *g) {
    ggml_tensor **nodes = ggml_graph_nodes(g);
    const int n = ggml_graph_n_nodes(g);
    ggml_backend *cpu = s->backends.back();
    // NULL is the CPU: name it, so that the planner compares like with like
    for (int i = 0; i < n; i++) {
        if (!nodes[i]->backend) nodes[i]->backend = cpu;
        if (s->index_of(nodes[i]->backend) < 0) {
            ggml_backend_set_error("scheduler: node '%s' is on a backend the scheduler does not have", nodes[i]->name);
            return false;
        }
    }
    for (int i = 0; i < ggml_graph_n_leafs(g); i++) {
        ggml_tensor *l = ggml_graph_leaf(g, i);
        if (!l->backend) l->backend = cpu;
    }
    s->staged.clear();
    for (int i = 0; i < n; i++) {
        ggml_tensor *t = nodes[i];
        if (!ggml_is_transfer(t) || (t->flags & GGML_TENSOR_FLAG_TRANSFER_HOST) || !t->src[0]) continue;
        ggml_tensor *src = base_of(t->src[0]);
        if (src->backend == cpu && !src->data && t->backend->host_buft != cpu->buft) s->staged.emplace(src, t->backend->host_buft);
    }
    for (size_t k = 0; k < s->bufts.size(); k++) {
        plan_filter f{s, s->bufts[k]};
        if (!ggml_gallocr_alloc_graph_for(s->planners[k], g, planned_in, &f)) return false;
    }

    // Segments. A graph on one backend is one segment (the CPU-only path pays
    // for nothing here); otherwise nodes read by another backend end theirs.
    s->segs.clear();
    s->producer.clear();
    bool one = true;
    for (int i = 0; i < n && one; i++) one = nodes[i]->backend == nodes[0]->backend;
    if (one) {
        if (n) s->segs.push_back(segment{s->index_of(nodes[0]->backend), 0, n, {}, false});
    } else {
        std::unordered_map<const ggml_tensor *, int> cross;  // node -> read by another backend (1)
        cross.reserve((size_t)n * 2);
        for (int i = 0; i < n; i++) cross[nodes[i]] = 0;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < GGML_MAX_SRC; k++) {
                ggml_tensor *src = nodes[i]->src[k];
                if (!src) continue;
                auto it = cross.find(base_of(src));
                if (it != cross.end() && base_of(src)->backend != nodes[i]->backend) it->second = 1;
            }
        bool cut = true;
        for (int i = 0; i < n; i++) {
            ggml_tensor *t = nodes[i];
            if (ggml_op_is_view(t->op)) continue;
            const int b = s->index_of(t->backend);
            if (cut || s->segs.back().backend != b) s->segs.push_back(segment{b, i, i + 1, {}, false});
            segment &cur = s->segs.back();
            const int si = (int)s->segs.size() - 1;
            cur.end = i + 1;
            s->producer[t] = si;
            for (int k = 0; k < GGML_MAX_SRC; k++) {
                if (!t->src[k]) continue;
                auto it = s->producer.find(base_of(t->src[k]));
                if (it == s->producer.end() || it->second == si) continue;
                if (std::find(cur.deps.begin(), cur.deps.end(), it->second) == cur.deps.end()) cur.deps.push_back(it->second);
            }
            // consecutive results read elsewhere share one event (the state and
            // the list a hybrid layer sends down: one wait, not two)
            int nx = i + 1;
            while (nx < n && ggml_op_is_view(nodes[nx]->op)) nx++;
            const bool batch = nx < n && nodes[nx]->backend == t->backend && cross[nodes[nx]] && ggml_is_transfer(t) &&
                               ggml_is_transfer(nodes[nx]);
            cut = cross[t] != 0 && !batch;
            if (cross[t]) cur.read_elsewhere = true;
        }
    }
    while (s->events.size() < s->segs.size())
        s->events.push_back(nullptr);
    s->stats.n_segments = (int)s->segs.size();
    for (size_t b = 0; b < s->backends.size() && b < 4; b++) {
        s->stats.compute_bytes[b] = 0;
        for (size_t k = 0; k < s->bufts.size(); k++)
            if (s->bufts[k] == s->backends[b]->buft) s->stats.compute_bytes[b] = ggml_gallocr_buffer_size(s->planners[k]);
    }
    return true;
}

int ggml_backend_sched_graph_compute(ggml_backend_sched *s, ggml_cgraph *g) {
    ggml_tensor **nodes = ggml_graph_nodes(g);
    const size_t ns = s->segs.size();
    std::vector<char> issued(ns, 0);
    std::vector<size_t> next(s->backends.size(), 0);  // per backend: first segment not issued
    auto advance = [&](size_t b) {
        while (next[b] < ns && (s->segs[next[b]].backend != (int)b || issued[next[b]])) next[b]++;
    };
    auto ready = [&](const segment &sg) {
        for (int d : sg.deps)
            if (!issued[(size_t)d]) return false;
        return true;
    };
    auto event_of = [&](size_t si) {
        ggml_backend *be = s->backends[(size_t)s->segs[si].backend];
        if (!s->events[si] || s->events[si]->be != be) {
            ggml_backend_event_free(s->events[si]);
            s->events[si] = ggml_backend_event_new(be);
        }
        return s->events[si];
    };
    int rc = 0, waits = 0;
    const size_t cpu = s->backends.size() - 1;
    size_t n_issued = 0;
    auto issue = [&](size_t si) {
        segment &sg = s->segs[si];
        ggml_backend *be = s->backends[(size_t)sg.backend];
        for (int d : sg.deps)
            if (s->segs[(size_t)d].backend != sg.backend && s->segs[(size_t)d].backend != (int)cpu) {
                ggml_backend_event_wait(be, s->events[(size_t)d]);  // CPU producers are done already
                waits++;
            }
        if (!rc) rc = be->iface.compute(be, nodes + sg.begin, sg.end - sg.begin);
        if (sg.read_elsewhere) ggml_backend_event_record(event_of(si));
        issued[si] = 1;
        n_issued++;
    };
    while (n_issued < ns && !rc) {
        bool progress = false;
        for (size_t b = 0; b < cpu; b++) {  // devices first: fill their queues
            for (advance(b); next[b] < ns && ready(s->segs[next[b]]); advance(b)) {
                issue(next[b]);
                progress = true;
            }
        }
        advance(cpu);
        if (next[cpu] < ns && ready(s->segs[next[cpu]])) {
            issue(next[cpu]);
            progress = true;
        }
        if (!progress) {
            ggml_backend_set_error("scheduler: no segment can run (a dependency cycle between backends)");
            rc = -1;
        }
    }
    for (size_t b = 0; b < cpu; b++) {
        const int e = s->backends[b]->iface.synchronize(s->backends[b]);
        if (e && !rc) {
            rc = e;
            ggml_backend_set_error("%s: queued compute failed (code %d)", s->backends[b]->name, e);
        }
    }
    s->stats.n_event_waits = waits;
    return rc;
}

void ggml_backend_sched_get_stats(const ggml_backend_sched *s, ggml_backend_sched_stats *st) { *st = s->stats; }
