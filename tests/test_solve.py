"""pinfer solve: the neuron-placement ILP against brute force, the greedy baseline,
constraints on random instances, budget monotonicity, the GGUF placement section
(cross-read with the gguf package), the model description from a GGUF, the CLI and
its errors.

The brute force here enumerates every per-layer prefix (whole groups, or the whole
layer) independently of the module: objective, bytes, minimum and balance are
recomputed from the raw inputs.

Needs: pip install highspy matplotlib gguf
"""
import argparse
import itertools
import json
import math

import gguf
import highspy  # noqa: F401  (hard dependency: the ILP)
import matplotlib  # noqa: F401
import numpy as np
import pytest

from pinfer import _core
from pinfer import solve as S

GIB = 1 << 30


# ---------------------------------------------------------------- independent reference

def ref_prefixes(n, g, m):
    """All legal k (neurons) for one layer: 0, or whole groups / the whole layer with k >= m."""
    ks = [0]
    for j in range(1, -(-n // g) + 1):
        k = min(j * g, n)
        if k >= m:
            ks.append(k)
    return ks


def ref_brute(freqs, nbytes, avail, g, mins, weights=None, balance=None):
    """Exhaustive optimum of sum_l w_l * (sum of the k_l largest f) over legal prefixes."""
    L = len(freqs)
    w = np.ones(L) if weights is None else np.asarray(weights, float)
    srt = [np.sort(np.asarray(f, float))[::-1] for f in freqs]
    choices = []
    for l in range(L):
        opts = []
        for k in ref_prefixes(srt[l].size, g, mins[l]):
            if balance is not None and k > 0:
                cpu_bw, gpu_bw, c, slack = balance
                Fk, F = srt[l][:k].sum(), srt[l].sum()
                t_cpu = nbytes[l] * (F - Fk) / cpu_bw / 1e3
                t_gpu = nbytes[l] * Fk / gpu_bw / 1e3 + c
                if t_cpu > t_gpu + slack:
                    continue
            opts.append((k, w[l] * srt[l][:k].sum(), nbytes[l] * k))
        choices.append(opts)
    best, arg = -1.0, None
    for combo in itertools.product(*choices):
        if sum(c[2] for c in combo) <= avail:
            v = sum(c[1] for c in combo)
            if v > best:
                best, arg = v, [c[0] for c in combo]
    return best, arg


def ref_min(f, b, cpu_bw, gpu_bw, pcie_bw, sync_us, n_embd):
    """Loop version of the communication minimum."""
    c = sync_us + 2 * n_embd * 4 / pcie_bw / 1e3
    s = np.sort(f)[::-1]
    acc = 0.0
    for k in range(1, s.size + 1):
        acc += s[k - 1]
        if b * acc * (1 / cpu_bw - 1 / gpu_bw) / 1e3 >= c:
            return k
    return s.size + 1


def random_case(rng, L=None):
    L = L or int(rng.integers(2, 4))
    g = int(rng.integers(2, 6))
    n = [int(rng.integers(3, 4 * g + 1)) for _ in range(L)]
    freqs = [rng.uniform(0, 1, size=k) ** rng.uniform(1, 4) for k in n]
    nb = [float(rng.integers(50, 400)) for _ in range(L)]
    model = S.ModelDesc(n_layer=L, n_embd=16, n_ff=n, neuron_bytes=nb,
                        attn_bytes=[float(rng.integers(0, 1000)) for _ in range(L)],
                        pred_bytes=[float(rng.integers(0, 100)) for _ in range(L)], kv_bytes_per_token=8.0,
                        output_bytes=500.0)
    return g, freqs, model


HW = S.hardware("rtx4090")


def inst_for(freqs, model, g, **kw):
    kw.setdefault("ctx", 4)
    return S.build_instance(freqs, model, HW, group=g, **kw)


# ---------------------------------------------------------------- ILP vs brute force

@pytest.mark.parametrize("formulation", S.FORMULATIONS)
def test_ilp_matches_brute_force(formulation):
    rng = np.random.default_rng(1)
    for trial in range(25):
        g, freqs, model = random_case(rng)
        mins = [int(rng.integers(1, n + 2)) for n in model.n_ff]  # n+1: never on the GPU
        inst = inst_for(freqs, model, g, min_neurons=None)
        inst.min_neurons = mins  # exercise arbitrary minimums, incl. infeasible layers
        inst.min_groups = [-(-m // g) for m in mins]
        ffn = sum(b * n for b, n in zip(model.neuron_bytes, model.n_ff))
        budget = inst.resident_bytes + rng.uniform(0, 1.1) * ffn
        avail = budget - inst.resident_bytes
        ref, ref_k = ref_brute(freqs, model.neuron_bytes, avail, g, mins)
        p = S.solve_ilp(inst, budget, mip_rel_gap=0.0, formulation=formulation)
        assert p.objective == pytest.approx(ref, rel=1e-9, abs=1e-9), (trial, p.gpu_neurons, ref_k)
        assert p.status == "Optimal"
        # the reported objective is the placement's own mass
        srt = [np.sort(f)[::-1] for f in freqs]
        assert p.objective == pytest.approx(sum(s[:k].sum() for s, k in zip(srt, p.gpu_neurons)), rel=1e-12)


def test_ilp_weighted_and_derived_minimum_vs_brute_force():
    rng = np.random.default_rng(2)
    hw = S.hardware("rtx3090", sync_us=0.02, pcie_bw=25)
    for _ in range(15):
        g, freqs, model = random_case(rng)
        model.n_embd = 4
        w = rng.uniform(0.1, 2.0, size=model.n_layer)
        inst = S.build_instance(freqs, model, hw, group=g, ctx=4, weights=w)
        mins = [ref_min(f, b, hw.cpu_bw, hw.gpu_bw, hw.pcie_bw, hw.sync_us, 4)
                for f, b in zip(freqs, model.neuron_bytes)]
        assert inst.min_neurons == mins
        ffn = sum(b * n for b, n in zip(model.neuron_bytes, model.n_ff))
        budget = inst.resident_bytes + rng.uniform(0.1, 0.9) * ffn
        ref, _ = ref_brute(freqs, model.neuron_bytes, budget - inst.resident_bytes, g, mins, weights=w)
        p = S.solve_ilp(inst, budget, mip_rel_gap=0.0)
        assert p.objective == pytest.approx(ref, rel=1e-9, abs=1e-9)


def test_balance_constraint_vs_brute_force():
    rng = np.random.default_rng(3)
    hw = S.hardware("rtx4070", sync_us=1.0)
    n_checked = 0
    for _ in range(15):
        g, freqs, model = random_case(rng)
        model.n_embd = 4
        model.neuron_bytes = [b * 300 for b in model.neuron_bytes]  # CPU parts of a few us
        inst = S.build_instance(freqs, model, hw, group=g, ctx=4, min_neurons=1)
        c = hw.sync_us + 2 * 4 * 4 / hw.pcie_bw / 1e3
        assert inst.overhead_us == pytest.approx(c)
        slack = float(rng.uniform(0, 0.3))
        ffn = sum(b * n for b, n in zip(model.neuron_bytes, model.n_ff))
        budget = inst.resident_bytes + rng.uniform(0.1, 0.7) * ffn
        ref, _ = ref_brute(freqs, model.neuron_bytes, budget - inst.resident_bytes, g, [1] * model.n_layer,
                           balance=(hw.cpu_bw, hw.gpu_bw, c, slack))
        for form in S.FORMULATIONS:
            p = S.solve_ilp(inst, budget, mip_rel_gap=0.0, balance="constraint", balance_slack_us=slack,
                            formulation=form)
            assert p.objective == pytest.approx(ref, rel=1e-9, abs=1e-9)
        free = S.solve_ilp(inst, budget, mip_rel_gap=0.0)
        assert free.objective >= ref - 1e-9  # a constraint never helps
        n_checked += free.objective > ref + 1e-9
    assert n_checked > 0  # the balance rows did bind somewhere


def test_makespan_stage():
    rng = np.random.default_rng(4)
    hw = S.hardware("rtx4090", gpu_bw=80.0, cpu_bw=50.0, sync_us=0.3)  # a slow GPU: balance matters
    for _ in range(8):
        g, freqs, model = random_case(rng)
        model.n_embd = 4
        inst = S.build_instance(freqs, model, hw, group=g, ctx=4, min_neurons=1)
        ffn = sum(b * n for b, n in zip(model.neuron_bytes, model.n_ff))
        budget = inst.resident_bytes + 0.8 * ffn
        base = S.solve_ilp(inst, budget, mip_rel_gap=0.0)
        for tol in (0.0, 0.3):
            p = S.solve_ilp(inst, budget, mip_rel_gap=0.0, balance="makespan", balance_tol=tol)
            assert p.objective >= (1 - tol) * base.objective - 1e-9
            assert p.est_token_ms <= base.est_token_ms + 1e-12
            # brute force the stage-2 optimum: min sum_l max(T_cpu, T_gpu) over placements keeping the mass
            srt = [np.sort(f)[::-1] for f in freqs]
            c = inst.overhead_us
            best = math.inf
            opts = [ref_prefixes(s.size, g, 1) for s in srt]
            for combo in itertools.product(*opts):
                if sum(b * k for b, k in zip(model.neuron_bytes, combo)) > budget - inst.resident_bytes:
                    continue
                if sum(s[:k].sum() for s, k in zip(srt, combo)) < (1 - tol) * base.objective - 1e-9:
                    continue
                t = 0.0
                for s, k, b in zip(srt, combo, model.neuron_bytes):
                    Fk, F = s[:k].sum(), s.sum()
                    t += max(b * (F - Fk) / hw.cpu_bw / 1e3, (b * Fk / hw.gpu_bw / 1e3 + c) if k else 0.0)
                best = min(best, t)
            assert p.est_token_ms * 1e3 == pytest.approx(best, rel=1e-7)


# ---------------------------------------------------------------- greedy, constraints, monotonicity

def check_independently(freqs, model, inst, p, budget):
    L = model.n_layer
    assert len(p.gpu_neurons) == L
    used = inst.resident_bytes
    for l, k in enumerate(p.gpu_neurons):
        n = model.n_ff[l]
        assert 0 <= k <= n
        assert k % inst.group == 0 or k == n
        assert k == 0 or k >= inst.min_neurons[l]
        used += model.neuron_bytes[l] * k
    assert used <= budget * (1 + 1e-12)


def test_greedy_never_beats_ilp_and_constraints_hold():
    rng = np.random.default_rng(5)
    strictly = 0
    for _ in range(40):
        g, freqs, model = random_case(rng, L=int(rng.integers(2, 7)))
        inst = inst_for(freqs, model, g, min_neurons=int(rng.integers(1, 3 * g)))
        ffn = sum(b * n for b, n in zip(model.neuron_bytes, model.n_ff))
        budget = inst.resident_bytes + rng.uniform(0, 1.05) * ffn
        gr = S.solve_greedy(inst, budget)
        p = S.solve_ilp(inst, budget, mip_rel_gap=0.0)
        check_independently(freqs, model, inst, gr, budget)
        check_independently(freqs, model, inst, p, budget)
        assert S.check_placement(inst, p.gpu_neurons, budget) == []
        assert gr.objective <= p.objective + 1e-9
        strictly += gr.objective < p.objective - 1e-9
    assert strictly > 0  # the instances are hard enough for greedy to lose sometimes


def test_budget_monotonicity():
    rng = np.random.default_rng(6)
    g, freqs, model = random_case(rng, L=5)
    inst = inst_for(freqs, model, g, min_neurons=2 * g)
    ffn = sum(b * n for b, n in zip(model.neuron_bytes, model.n_ff))
    prev = -1.0
    for frac in np.linspace(0, 1.1, 23):
        p = S.solve_ilp(inst, inst.resident_bytes + frac * ffn, mip_rel_gap=0.0)
        assert p.objective >= prev - 1e-9
        prev = p.objective
    total = sum(f.sum() for f in freqs)
    assert prev == pytest.approx(total)  # everything fits at the end
    assert p.gpu_neurons == model.n_ff


def test_solve_several_budgets_sorted_and_hot_first():
    rng = np.random.default_rng(7)
    g, freqs, model = random_case(rng, L=3)
    res = inst_for(freqs, model, g).resident_bytes
    budgets = [(res + 2000) / GIB, (res + 500) / GIB, (res + 8000) / GIB]
    pls = S.solve(freqs, model, budgets, hw=HW, group=g, ctx=4, mip_rel_gap=0.0)
    assert [p.budget_bytes for p in pls] == sorted(p.budget_bytes for p in pls)
    assert all(a.objective <= b.objective + 1e-9 for a, b in zip(pls, pls[1:]))
    # already-sorted input gives the same answer as shuffled input
    srt = [np.sort(f)[::-1] for f in freqs]
    pls2 = S.solve(srt, model, budgets, hw=HW, group=g, ctx=4, mip_rel_gap=0.0, sort=False)
    assert [p.objective for p in pls2] == pytest.approx([p.objective for p in pls])
    with pytest.raises(S.PlacementError, match="hot-first"):
        S.solve(freqs, model, budgets, hw=HW, group=g, ctx=4, sort=False)


def test_cpu_only_and_resident():
    rng = np.random.default_rng(8)
    g, freqs, model = random_case(rng)
    inst = S.build_instance(freqs, model, S.hardware("cpu"), group=g, ctx=10, reserve_gib=0.0)
    assert all(m == n + 1 for m, n in zip(inst.min_neurons, model.n_ff))
    p = S.solve_ilp(inst, 0)
    assert p.gpu_neurons == [0] * model.n_layer and p.status == "cpu-only"
    assert S.solve_greedy(inst, 0).gpu_neurons == [0] * model.n_layer
    # resident: attention + predictors + KV(ctx) + output (+ norm); embeddings off by default
    want = sum(model.attn_bytes) + sum(model.pred_bytes) + 10 * sum(model.kv_bytes_per_token) + 500.0
    assert inst.resident_bytes == pytest.approx(want)


def test_large_instance_sanity():
    """A mid-size instance: the ILP is optimal within the gap and at least as good as greedy."""
    rng = np.random.default_rng(9)
    L, n = 12, 2048
    freqs = [np.minimum(1, rng.uniform(5, 50) * np.arange(1, n + 1) ** -rng.uniform(0.6, 1.1)) for _ in range(L)]
    model = S.ModelDesc(n_layer=L, n_embd=512, n_ff=n, neuron_bytes=[float(rng.integers(800, 1600)) for _ in range(L)],
                        attn_bytes=1e5, pred_bytes=1e4, kv_bytes_per_token=256)
    inst = S.build_instance(freqs, model, HW, group=64, ctx=128)
    ffn = sum(b * n for b in model.neuron_bytes)
    for frac in (0.2, 0.5):
        budget = inst.resident_bytes + frac * ffn
        p, gr = S.solve_ilp(inst, budget, mip_rel_gap=1e-6), S.solve_greedy(inst, budget)
        assert p.mip_gap <= 1e-6 and p.objective >= gr.objective - 1e-9
        check_independently(freqs, model, inst, p, budget)
        # LP bound: fractional knapsack by mass per byte ignoring minimums is an upper bound
        items = sorted(((f[i] / b, f[i], b) for f, b in zip([np.sort(x)[::-1] for x in freqs], model.neuron_bytes)
                        for i in range(n)), reverse=True)
        cap, ub = budget - inst.resident_bytes, 0.0
        for _, m, b in items:
            take = min(1.0, cap / b)
            ub += take * m
            cap -= take * b
            if cap <= 0:
                break
        assert p.objective <= ub + 1e-6


# ---------------------------------------------------------------- GGUF placement section

def tiny_placements():
    return [S.Placement(budget_bytes=12 * GIB, solver="greedy", status="x", objective=1.5, gpu_neurons=[64, 0, 128]),
            S.Placement(budget_bytes=(1 << 40) + 3, solver="highs-ilp", status="x", objective=2.25,
                        gpu_neurons=[128, 64, 2 ** 31 - 1])]


def write_tiny_gguf(path, extra=None):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(3)
    w.add_embedding_length(8)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_string("general.name", "tiny")
    if extra:
        extra(w)
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((10, 8)).astype(np.float32))
    w.add_tensor("output_norm.weight", np.ones(8, np.float32))
    for l in range(3):
        w.add_tensor(f"blk.{l}.attn_q.weight", rng.standard_normal((8, 8)).astype(np.float16))
        w.add_tensor(f"blk.{l}.attn_k.weight", rng.standard_normal((4, 8)).astype(np.float16))
        w.add_tensor(f"blk.{l}.attn_v.weight", rng.standard_normal((4, 8)).astype(np.float16))
        w.add_tensor(f"blk.{l}.attn_output.weight", rng.standard_normal((8, 8)).astype(np.float16))
        w.add_tensor(f"blk.{l}.attn_norm.weight", np.ones(8, np.float32))
        w.add_tensor(f"blk.{l}.ffn_norm.weight", np.ones(8, np.float32))
        w.add_tensor(f"blk.{l}.ffn_gate.weight", rng.standard_normal((16, 8)).astype(np.float32))
        w.add_tensor(f"blk.{l}.ffn_up.weight", rng.standard_normal((16, 8)).astype(np.float16))
        w.add_tensor(f"blk.{l}.ffn_down.weight", rng.standard_normal((8, 16)).astype(np.float16))
        w.add_tensor(f"blk.{l}.ffn_down_t.weight", rng.standard_normal((16, 8)).astype(np.float32))
        w.add_tensor(f"blk.{l}.fc1.weight", rng.standard_normal((4, 8)).astype(np.float16))
        w.add_tensor(f"blk.{l}.fc2.weight", rng.standard_normal((16, 4)).astype(np.float16))
        w.add_tensor(f"blk.{l}.ffn_freq", np.linspace(1, 0, 16).astype(np.float32) * (l + 1) / 3)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_write_and_read_placements(tmp_path):
    src, dst = tmp_path / "m.gguf", tmp_path / "p.gguf"
    write_tiny_gguf(src, lambda w: w.add_uint32("pinfer.placement.count", 7))  # a stale section is replaced
    pls = tiny_placements()
    S.write_placements(str(src), str(dst), pls[::-1])
    r = _core.GGUFReader(str(dst))
    got = S.read_placements(r, n_layer=3)
    assert [(p.budget_bytes, p.solver, p.objective, p.gpu_neurons) for p in got] == \
        [(p.budget_bytes, p.solver, p.objective, p.gpu_neurons) for p in pls]
    # the gguf package reads the exact types and values; every other key and tensor survives
    gr = gguf.GGUFReader(str(dst))
    f = gr.fields
    T = gguf.GGUFValueType
    assert f["pinfer.placement.count"].types == [T.UINT32] and f["pinfer.placement.count"].contents() == 2
    assert f["pinfer.placement.1.budget_bytes"].types == [T.UINT64]
    assert f["pinfer.placement.1.budget_bytes"].contents() == (1 << 40) + 3
    assert f["pinfer.placement.0.solver"].contents() == "greedy"
    assert f["pinfer.placement.1.objective"].types == [T.FLOAT64]
    assert f["pinfer.placement.0.gpu_neurons"].types == [T.ARRAY, T.INT32]
    assert f["pinfer.placement.1.gpu_neurons"].contents() == [128, 64, 2 ** 31 - 1]
    orig = gguf.GGUFReader(str(src))
    assert f["general.name"].contents() == "tiny"
    for a, b in zip(orig.tensors, gr.tensors):
        assert a.name == b.name and a.tensor_type == b.tensor_type
        np.testing.assert_array_equal(np.asarray(a.data), np.asarray(b.data))
    assert len(orig.tensors) == len(gr.tensors)


def test_add_placements_with_gguf_package_writer(tmp_path):
    path = tmp_path / "g.gguf"
    pls = tiny_placements()
    write_tiny_gguf(path, lambda w: S.add_placements(w, pls))
    got = S.read_placements(_core.GGUFReader(str(path)), n_layer=3)
    assert [p.gpu_neurons for p in got] == [p.gpu_neurons for p in pls]
    assert S.read_placements({"general.name": "x"}) == []


@pytest.mark.parametrize("meta,msg", [
    ({"pinfer.placement.count": 0}, "count"),
    ({"pinfer.placement.count": 1}, "missing"),
    ({"pinfer.placement.count": 1, "pinfer.placement.0.budget_bytes": -1, "pinfer.placement.0.solver": "g",
      "pinfer.placement.0.objective": 1.0, "pinfer.placement.0.gpu_neurons": np.zeros(3, np.int32)}, "unsigned"),
    ({"pinfer.placement.count": 1, "pinfer.placement.0.budget_bytes": 1, "pinfer.placement.0.solver": "g",
      "pinfer.placement.0.objective": 1.0, "pinfer.placement.0.gpu_neurons": np.zeros(2, np.int32)}, "2 entries"),
    ({"pinfer.placement.count": 1, "pinfer.placement.0.budget_bytes": 1, "pinfer.placement.0.solver": "g",
      "pinfer.placement.0.objective": 1.0, "pinfer.placement.0.gpu_neurons": np.array([1.5, 2, 3])}, "integers"),
])
def test_read_placements_malformed(meta, msg):
    with pytest.raises(S.PlacementError, match=msg):
        S.read_placements(meta, n_layer=3)


def test_placement_kv_errors():
    p = tiny_placements()
    with pytest.raises(S.PlacementError, match="same budget"):
        S.placement_kv([p[0], p[0]])
    with pytest.raises(S.PlacementError, match="no placements"):
        S.placement_kv([])
    with pytest.raises(S.PlacementError, match="gpu_neurons"):
        S.placement_kv([p[0], S.Placement(budget_bytes=1, solver="g", status="", objective=0, gpu_neurons=[1, 2])])


def test_model_from_gguf(tmp_path):
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path)
    m = S.model_from_gguf(_core.GGUFReader(str(path)))
    ref = gguf.GGUFReader(str(path))
    nb = {t.name: int(t.n_bytes) for t in ref.tensors}
    assert m.n_layer == 3 and m.n_ff == [16] * 3 and m.n_embd == 8
    for l in range(3):
        # gate + up + ffn_down_t (not ffn_down: one copy moves) per neuron
        want = (nb[f"blk.{l}.ffn_gate.weight"] + nb[f"blk.{l}.ffn_up.weight"] + nb[f"blk.{l}.ffn_down_t.weight"]) / 16
        assert m.neuron_bytes[l] == want
        assert m.pred_bytes[l] == nb[f"blk.{l}.fc1.weight"] + nb[f"blk.{l}.fc2.weight"]
        assert m.attn_bytes[l] == sum(nb[f"blk.{l}.{k}"] for k in (
            "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "attn_norm.weight",
            "ffn_norm.weight"))
        assert m.kv_bytes_per_token[l] == 2 * 4 * 1 * 2  # (k + v) x head_dim 4 x 1 kv head x f16
    assert m.embd_bytes == nb["token_embd.weight"] and m.output_bytes == nb["token_embd.weight"]  # tied
    fr = S.freqs_from_gguf(_core.GGUFReader(str(path)))
    np.testing.assert_allclose(fr[2], np.linspace(1, 0, 16).astype(np.float32))


# ---------------------------------------------------------------- inputs and errors

def test_load_freqs(tmp_path):
    a = np.random.default_rng(0).uniform(size=(3, 7))
    np.savez(tmp_path / "per.npz", **{f"freq_{l}": a[l] for l in range(3)}, tokens=np.array(5))
    np.savez(tmp_path / "two.npz", counts=a)
    for name in ("per.npz", "two.npz"):
        got = S.load_freqs(str(tmp_path / name))
        np.testing.assert_array_equal(np.stack(got), a)
    np.savez(tmp_path / "gap.npz", freq_0=a[0], freq_2=a[2])
    with pytest.raises(S.PlacementError, match="freq_1"):
        S.load_freqs(str(tmp_path / "gap.npz"))
    np.savez(tmp_path / "obj.npz", freq_0=np.array([{"a": 1}], dtype=object))
    with pytest.raises(S.PlacementError, match="pickle"):
        S.load_freqs(str(tmp_path / "obj.npz"))
    np.savez(tmp_path / "big.npz", freq_0=np.array([0.5, 3.0]))
    with pytest.raises(S.PlacementError, match=r"outside \[0, 1\]"):
        S.load_freqs(str(tmp_path / "big.npz"))
    np.savez(tmp_path / "none.npz", x=np.zeros(3))
    with pytest.raises(S.PlacementError, match="2-D"):
        S.load_freqs(str(tmp_path / "none.npz"))
    with pytest.raises(S.PlacementError, match="no such file"):
        S.load_freqs(str(tmp_path / "missing.npz"))
    (tmp_path / "junk.npz").write_bytes(b"not an npz at all")
    with pytest.raises(S.PlacementError, match="cannot read"):
        S.load_freqs(str(tmp_path / "junk.npz"))


def test_input_errors():
    rng = np.random.default_rng(10)
    g, freqs, model = random_case(rng, L=2)
    with pytest.raises(S.PlacementError, match="layers"):
        S.build_instance(freqs[:1], model, HW)
    with pytest.raises(S.PlacementError, match="neurons"):
        S.build_instance([freqs[0], freqs[1][:-1]], model, HW)
    with pytest.raises(S.PlacementError, match="group"):
        S.build_instance(freqs, model, HW, group=0)
    with pytest.raises(S.PlacementError, match=r"\[0, 1\]"):
        S.build_instance([freqs[0], -freqs[1]], model, HW)
    with pytest.raises(S.PlacementError, match=r"\[0, 1\]"):
        S.build_instance([freqs[0], np.full_like(freqs[1], np.nan)], model, HW)
    with pytest.raises(S.PlacementError, match="weights"):
        S.build_instance(freqs, model, HW, weights=[1.0])
    with pytest.raises(S.PlacementError, match="unknown preset"):
        S.hardware("rtx9999")
    with pytest.raises(S.PlacementError, match="gpu_bw"):
        S.hardware("rtx4090", gpu_bw=-1.0)
    with pytest.raises(S.PlacementError, match="unknown field"):
        S.hardware({"preset": "a100", "bogus": 1})
    with pytest.raises(S.PlacementError, match="n_ff"):
        S.ModelDesc(n_layer=2, n_embd=4, n_ff=[3], neuron_bytes=1.0, attn_bytes=0, pred_bytes=0, kv_bytes_per_token=0)
    with pytest.raises(S.PlacementError, match="missing"):
        S.ModelDesc.from_dict({"n_layer": 2})
    inst = S.build_instance(freqs, model, HW, group=g, ctx=4)
    with pytest.raises(S.PlacementError, match="below the resident"):
        S.solve_ilp(inst, inst.resident_bytes - 1)
    with pytest.raises(S.PlacementError, match="below the resident"):
        S.solve_greedy(inst, inst.resident_bytes / 2)
    with pytest.raises(S.PlacementError, match="below the resident"):
        S.solve(freqs, model, [100.0, 0.0], hw=HW, group=g, ctx=4)  # fails before solving anything
    for kw, msg in (({"balance": "x"}, "balance"), ({"formulation": "x"}, "formulation"),
                    ({"time_limit": 0}, "time limit"), ({"balance_tol": 1.5}, "balance_tol")):
        with pytest.raises(S.PlacementError, match=msg):
            S.solve_ilp(inst, inst.resident_bytes + 1, **kw)
    with pytest.raises(S.PlacementError, match="budget"):
        S.solve(freqs, model, ["lots"], hw=HW)
    with pytest.raises(S.PlacementError, match="solver"):
        S.solve(freqs, model, [1.0], hw=HW, solver="cplex")


# ---------------------------------------------------------------- CLI

def run_cli(argv, capsys):
    ap = argparse.ArgumentParser(prog="pinfer")
    sub = ap.add_subparsers()
    S.add_parser(sub)
    a = ap.parse_args(["solve"] + argv)
    rc = a.func(a)
    return rc, capsys.readouterr()


def test_cli_end_to_end(tmp_path, capsys):
    rng = np.random.default_rng(11)
    L, n = 4, 256
    freqs = np.stack([np.minimum(1, 8 * np.arange(1, n + 1) ** -0.8) for _ in range(L)])
    np.savez(tmp_path / "f.npz", **{f"freq_{l}": rng.permutation(freqs[l]) for l in range(L)})
    model = {"n_layer": L, "n_embd": 64, "n_ff": n, "neuron_bytes": 1 << 20, "attn_bytes": 1 << 24,
             "kv_bytes_per_token": 1024, "name": "toy"}
    (tmp_path / "m.json").write_text(json.dumps(model))
    (tmp_path / "hw.json").write_text(json.dumps({"preset": "rtx3090", "cpu_bw": 40}))
    rc, out = run_cli(["--model", str(tmp_path / "m.json"), "--freq", str(tmp_path / "f.npz"), "--budget", "0.5", "1",
                       "--hw", str(tmp_path / "hw.json"), "--ctx", "128", "--group", "32",
                       "--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "p.png")], capsys)
    assert rc == 0, out.err
    assert "budget GiB" in out.out and "highs-ilp" in out.out and "Running HiGHS" not in out.out
    rep = json.loads((tmp_path / "r.json").read_text())
    assert [p["budget_gib"] for p in rep["placements"]] == [0.5, 1.0]
    assert rep["hardware"]["cpu_bw"] == 40 and rep["hardware"]["gpu_bw"] == 936
    for p in rep["placements"]:
        assert p["objective"] >= p["greedy"]["objective"] - 1e-9
        assert sum(p["gpu_neurons"]) * (1 << 20) + p["resident_bytes"] <= p["budget_bytes"]
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_gguf_roundtrip(tmp_path, capsys):
    src, dst = tmp_path / "m.gguf", tmp_path / "o.gguf"
    write_tiny_gguf(src)
    rc, out = run_cli(["--model", str(src), "--budget", "0.001", "0.002", "--ctx", "8", "--group", "4",
                       "--reserve-gib", "0", "--min-neurons", "4", "--write-gguf", str(dst)], capsys)
    assert rc == 0, out.err
    got = S.read_placements(_core.GGUFReader(str(dst)), n_layer=3)
    assert [p.budget_bytes for p in got] == [round(0.001 * GIB), round(0.002 * GIB)]
    assert all(p.solver == "highs-ilp" for p in got)
    # 0.002 GiB (2 MiB) holds the whole tiny model's FFN: every layer fully on the GPU
    assert got[1].gpu_neurons == [16, 16, 16]


def test_cli_errors(tmp_path, capsys):
    (tmp_path / "m.json").write_text(json.dumps({"n_layer": 2, "n_embd": 4, "n_ff": 8, "neuron_bytes": 10,
                                                 "attn_bytes": 1 << 30}))
    np.savez(tmp_path / "f.npz", f=np.full((2, 8), 0.5))
    base = ["--model", str(tmp_path / "m.json"), "--freq", str(tmp_path / "f.npz")]
    cases = [
        (["--budget", "0.5"], "below the resident"),
        (["--budget", "4", "--hw", "nope"], "unknown preset"),
        (["--budget", "4", "--write-gguf", str(tmp_path / "x.gguf")], "needs --model to be a GGUF"),
        (["--budget", "4", "--group", "0"], "group"),
    ]
    for extra, msg in cases:
        rc, out = run_cli(base + extra, capsys)
        assert rc == 1 and msg in out.err, (extra, out.err)
    rc, out = run_cli(["--model", str(tmp_path / "m.json"), "--budget", "4"], capsys)
    assert rc == 1 and "ffn_freq" in out.err
    rc, out = run_cli(["--model", str(tmp_path / "nope.json"), "--budget", "4"], capsys)
    assert rc == 1 and "no such file" in out.err
    assert not (tmp_path / "x.gguf").exists()
