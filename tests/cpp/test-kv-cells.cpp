// The KV cache's cells shared by several sequences: runs of free cells, removal
// of a sequence or of a range of positions, a prefix shared with seq_cp, and the
// attention mask each token gets from them (kq_mask_value), checked against a
// direct statement of the rule: a token sees the cells of its own sequence at
// positions not after its own.
#include <math.h>
#include <stdio.h>

#include <random>
#include <vector>

#include "llama-kv-cache.h"
#include "check.h"

using pinfer::kv_cache;
using pinfer::kv_cell;

static void put(kv_cache &kv, int cell0, int seq, int pos0, int n) {
    for (int i = 0; i < n; i++) kv.cells[(size_t)(cell0 + i)] = kv_cell{pos0 + i, 1ull << seq};
}

int main() {
    pinfer::hparams hp;
    hp.n_layer = 2;
    hp.head_dim = 4;
    hp.n_head_kv = 2;
    kv_cache kv(hp, 16, GGML_TYPE_F16);
    CHECK(kv.find_run(16) == 0 && kv.find_run(17) == -1, "empty cache: one run of 16");
    CHECK(kv.used_end() == 0 && kv.n_used() == 0 && kv.seq_pos_max(0) == -1, "empty cache");

    put(kv, 0, 0, 0, 5);   // sequence 0: positions 0..4 in cells 0..4
    put(kv, 5, 1, 0, 3);   // sequence 1: positions 0..2 in cells 5..7
    put(kv, 8, 0, 5, 2);   // sequence 0 continues in cells 8..9
    CHECK(kv.find_run(6) == 10 && kv.find_run(7) == -1, "free run after cell 9");
    CHECK(kv.used_end() == 10 && kv.n_used() == 10, "10 cells used");
    CHECK(kv.seq_pos_max(0) == 6 && kv.seq_pos_max(1) == 2, "positions");

    // the mask: a direct statement of the rule for every (cell, token) pair
    for (int seq = 0; seq < 3; seq++)
        for (int pos = 0; pos < 8; pos++)
            for (int c = 0; c < 16; c++) {
                const kv_cell &cell = kv.cells[(size_t)c];
                const bool see = !cell.free() && (cell.seqs >> seq & 1) && cell.pos <= pos;
                const float m = pinfer::kq_mask_value(cell, pos, seq);
                CHECK(see ? m == 0.0f : (isinf(m) && m < 0), "mask seq %d pos %d cell %d", seq, pos, c);
            }

    // sequence 1 leaves: its cells are free again and the lowest run starts there
    kv.seq_rm(1, 0, -1);
    CHECK(kv.seq_pos_max(1) == -1 && kv.n_used() == 7 && kv.find_run(3) == 5, "seq 1 removed");
    // a range of positions of sequence 0
    kv.seq_rm(0, 3, 6);
    CHECK(kv.n_used() == 4 && kv.seq_pos_max(0) == 6, "positions 3..5 of seq 0 removed");
    CHECK(kv.cells[3].free() && kv.cells[4].free() && kv.cells[8].free() && !kv.cells[9].free(), "which cells");

    // sequence 2 shares sequence 0's positions 0..1: no new cell, both see them
    kv.seq_cp(0, 2, 0, 2);
    CHECK(kv.n_used() == 4 && kv.seq_pos_max(2) == 1, "shared prefix");
    CHECK(pinfer::kq_mask_value(kv.cells[1], 5, 2) == 0.0f && pinfer::kq_mask_value(kv.cells[2], 5, 2) != 0.0f,
          "seq 2 sees cells 0..1 only");
    kv.seq_rm(0, 0, -1);  // sequence 0 leaves; the shared cells stay for sequence 2
    CHECK(kv.n_used() == 2 && !kv.cells[0].free() && kv.cells[9].free(), "shared cells kept");
    kv.seq_rm(-1, 0, -1);
    CHECK(kv.n_used() == 0 && kv.used_end() == 0, "every sequence removed");

    // random operations against a model of the cells
    std::mt19937 rng(7);
    std::vector<std::vector<int>> has(4);  // has[seq]: positions held
    kv.clear();
    for (int step = 0; step < 2000; step++) {
        const int seq = (int)(rng() % 4), op = (int)(rng() % 3);
        if (op < 2) {
            const int n = 1 + (int)(rng() % 3);
            const int c0 = kv.find_run(n);
            if (c0 < 0) continue;
            const int p0 = has[seq].empty() ? 0 : has[seq].back() + 1;
            put(kv, c0, seq, p0, n);
            for (int i = 0; i < n; i++) has[seq].push_back(p0 + i);
        } else {
            const int32_t keep = has[seq].empty() ? 0 : (int32_t)(rng() % (has[seq].size() + 1));
            kv.seq_rm(seq, keep, -1);
            while ((int32_t)has[seq].size() > keep) has[seq].pop_back();
        }
        size_t total = 0;
        for (int s = 0; s < 4; s++) {
            total += has[s].size();
            CHECK(kv.seq_pos_max(s) == (has[s].empty() ? -1 : has[s].back()), "step %d seq %d pos max", step, s);
        }
        CHECK(kv.n_used() == total, "step %d: %u cells used, model says %zu", step, kv.n_used(), total);
        if (g_fail) break;
    }
    if (g_fail) {
        fprintf(stderr, "test-kv-cells: %d failures\n", g_fail);
        return 1;
    }
    printf("test-kv-cells: ok\n");
    return 0;
}
