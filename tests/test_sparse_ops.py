"""Neuron-aware sparse ops against numpy float64 references.

Ops (ggml.h): sparse_select / sparse_predict -> active index list, the
row-sparse matvec mul_mat_sparse_rows (gate/up) and the column-sparse down
projection sparse_down (on ffn_down_t). Every op runs with 1..4 threads and
must give bit-identical bytes; weights of every type are quantized with
pinfer._core.quantize and the reference uses the dequantized weights.

Shapes are numpy order (outermost first): numpy W (n, d) is ggml ne [d, n].
Index list: int32 (C, n + 1), each row = [count, ids ascending..., -1...];
the sparse ops read the last row (the union for a batch).
"""
import numpy as np
import pytest

from pinfer import _core

THREADS = (1, 2, 3, 4)

# Every weight type the dense matmul has a dot kernel for.
WEIGHT_TYPES = ["f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0",
                "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"]
DENSITIES = [0.0, 0.01, 0.5, 1.0]


def tid(name):
    return _core.type_from_name(name)


def blck(name):
    return _core.type_info(tid(name))["blck_size"]


def make_weight(name, n, d, g):
    """Random (n, d) weight of a type: (run_op input, float64 dequantized values)."""
    w = (g.standard_normal((n, d)) * 0.5).astype(np.float32)
    if name == "f32":
        return w, w.astype(np.float64)
    t = tid(name)
    raw = _core.quantize(t, w)
    deq = _core.dequantize(t, raw.tobytes()).reshape(n, d).astype(np.float64)
    return (raw.tobytes(), t, [n, d]), deq


def _converted(fmt, x):
    """x as the rows of activation format fmt stand for them (float64)."""
    if fmt == "f32":
        return x.astype(np.float64)
    vdt = tid("q8_0" if fmt == "q8x" else fmt)  # q8x rows hold the q8_0 values
    q = _core.quantize(vdt, x)
    return _core.dequantize(vdt, q.tobytes()).reshape(x.shape).astype(np.float64)


def act_as_seen(name, x, ncols=None):
    """Activations as the dot kernel sees them: converted as the CPU backend's rule
    (_core.act_format) says for a product with ncols activation rows (default: the
    rows of x). The dense path of the down projection dots each output with
    vec_dot, token by token: ncols=1."""
    ncols = x.reshape(-1, x.shape[-1]).shape[0] if ncols is None else ncols
    return _converted(_core.act_format(tid(name), x.shape[-1], ncols, False), x)


def index_list(n, sets):
    """Index list rows for the given active-id sets (the last one is read)."""
    out = np.full((len(sets), n + 1), -1, np.int32)
    for r, s in enumerate(sets):
        s = np.sort(np.asarray(s, np.int64))
        out[r, 0] = len(s)
        out[r, 1:1 + len(s)] = s
    return out


def random_active(n, density, g):
    k = int(round(density * n))
    return np.sort(g.choice(n, size=k, replace=False))


def run(op, inputs, params, cols=None):
    """Runs op with 1..4 threads; asserts bit-identical results (in cols of the
    innermost axis only, when given: row-sparse outputs outside [begin, end)
    are not written)."""
    outs = [_core.run_op(op, inputs, params, nt, None) for nt in THREADS]
    for nt, o in zip(THREADS[1:], outs[1:]):
        a, b = (o, outs[0]) if cols is None else (o[..., cols], outs[0][..., cols])
        assert o.shape == outs[0].shape and a.tobytes() == b.tobytes(), f"{op}: {nt} threads differ from 1"
    return outs[0]


# ---------------------------------------------------------------- select / predict

@pytest.mark.parametrize("n,T", [(1, 1), (37, 1), (301, 1), (64, 3), (1001, 5)])
def test_sparse_select(n, T):
    g = np.random.default_rng(n * 10 + T)
    p = g.standard_normal((T, n)).astype(np.float32)
    thr = 0.7
    out = run("sparse_select", [p], {"threshold": thr})
    C = 1 if T == 1 else T + 1
    out = out.reshape(C, n + 1)
    sets = [np.nonzero(p[t] > np.float32(thr))[0] for t in range(T)]
    if T > 1:
        sets.append(np.nonzero((p > np.float32(thr)).any(axis=0))[0])
    np.testing.assert_array_equal(out, index_list(n, sets))


def test_sparse_select_all_and_none():
    p = np.array([[-1.0, 2.0, 3.0], [-5.0, -6.0, 1.0]], np.float32)
    out = run("sparse_select", [p], {"threshold": 10.0}).reshape(3, 4)
    np.testing.assert_array_equal(out[:, 0], [0, 0, 0])
    out = run("sparse_select", [p], {"threshold": -10.0}).reshape(3, 4)
    np.testing.assert_array_equal(out, [[3, 0, 1, 2]] * 3)


@pytest.mark.parametrize("n,T", [(1, 1), (301, 1), (64, 3), (1001, 5)])
def test_sparse_select_abs(n, T):
    """Magnitude selection (threshold mode on SwiGLU activations)."""
    g = np.random.default_rng(n * 7 + T)
    p = g.standard_normal((T, n)).astype(np.float32)
    thr = 0.9
    out = run("sparse_select", [p], {"threshold": thr, "abs": 1})
    C = 1 if T == 1 else T + 1
    out = out.reshape(C, n + 1)
    sets = [np.nonzero(np.abs(p[t]) > np.float32(thr))[0] for t in range(T)]
    if T > 1:
        sets.append(np.nonzero((np.abs(p) > np.float32(thr)).any(axis=0))[0])
    np.testing.assert_array_equal(out, index_list(n, sets))


@pytest.mark.parametrize("n,T", [(1, 1), (300, 1), (65, 7)])
def test_sparse_mask(n, T):
    g = np.random.default_rng(n + 3 * T)
    a = g.standard_normal((T, n)).astype(np.float32)
    a[0, 0] = -0.5  # exactly at the threshold: not above it
    out = run("sparse_mask", [a], {"threshold": 0.5}).reshape(T, n)
    np.testing.assert_array_equal(out, np.where(np.abs(a) > np.float32(0.5), a, np.float32(0)))
    out0 = run("sparse_mask", [a], {"threshold": 0.0}).reshape(T, n)
    np.testing.assert_array_equal(out0, a)


@pytest.mark.parametrize("wtype", ["f32", "f16", "q8_0", "q4_0"])
@pytest.mark.parametrize("T", [1, 4])
def test_sparse_predict(wtype, T):
    g = np.random.default_rng(7 + T)
    d, r, n = 128, 64, 515
    fc1, fc1_64 = make_weight(wtype, r, d, g)
    fc2, fc2_64 = make_weight(wtype, n, r, g)
    x = g.standard_normal((T, d)).astype(np.float32)
    thr = 1.5
    out = run("sparse_predict", [fc1, fc2, x], {"threshold": thr})
    C = 1 if T == 1 else T + 1
    out = out.reshape(C, n + 1)
    p = np.maximum(x.astype(np.float64) @ fc1_64.T, 0.0) @ fc2_64.T  # (T, n)
    # float32 / quantized activations move p a little: only clear decisions count
    tol = (2e-5 if wtype in ("f32", "f16") else 0.05) * np.abs(p).max()
    rows = [p[t] for t in range(T)] + ([p.max(axis=0)] if T > 1 else [])
    for c, pc in enumerate(rows):
        m = out[c, 0]
        ids = out[c, 1:1 + m]
        assert np.all(np.diff(ids) > 0) and np.all(out[c, 1 + m:] == -1)
        got = np.zeros(n, bool)
        got[ids] = True
        assert np.all(got[pc > thr + tol]), "missed clearly active neurons"
        assert not np.any(got[pc < thr - tol]), "selected clearly inactive neurons"
    if T > 1:  # the union row is exactly the union of the token rows
        union = set()
        for c in range(T):
            union |= set(out[c, 1:1 + out[c, 0]].tolist())
        assert sorted(union) == out[T, 1:1 + out[T, 0]].tolist()


# ---------------------------------------------------------------- row-sparse matvec

def rows_case(wtype, n, d, T, density, rng_seed, begin=None, end=None, per_token_rows=False):
    g = np.random.default_rng(rng_seed)
    w, w64 = make_weight(wtype, n, d, g)
    x = g.standard_normal((T, d)).astype(np.float32)
    act = random_active(n, density, g)
    sets = [act]
    if per_token_rows and T > 1:  # token rows are subsets; the last row is the union
        sets = [act[g.random(len(act)) < 0.5] for _ in range(T)] + [act]
    idx = index_list(n, sets)
    b = 0 if begin is None else begin
    e = n if end is None else end
    y = run("mul_mat_sparse_rows", [w, x, idx], {"begin": b, "end": e}, slice(b, e)).reshape(T, n)
    xs = act_as_seen(wtype, x)
    ref = xs @ w64.T  # (T, n)
    mag = np.abs(xs) @ np.abs(w64).T
    in_rng = np.zeros(n, bool)
    in_rng[b:e] = True
    on = np.zeros(n, bool)
    on[act] = True
    sel = on & in_rng
    err = np.abs(y[:, sel] - ref[:, sel])
    assert np.all(err <= 3e-6 * mag[:, sel] + 1e-30), (wtype, err.max())
    assert np.all(y[:, in_rng & ~on] == 0.0)
    return w, x, idx, y, sel


@pytest.mark.parametrize("wtype", WEIGHT_TYPES)
@pytest.mark.parametrize("density", DENSITIES)
def test_rows_all_types(wtype, density):
    B = max(blck(wtype), 32)
    for n, d, T in [(37, 2 * B, 1), (301, B, 1), (65, 3 * B if B == 32 else B, 3)]:
        rows_case(wtype, n, d, T, density, hash((wtype, n, d)) % 1000, per_token_rows=T > 1)


@pytest.mark.parametrize("wtype", ["f32", "q4_0", "q6_K"])
def test_rows_matches_dense_mul_mat_bits(wtype):
    """For one token (decode), active outputs are the very same dot products the
    dense mat-vec computes. (With several tokens the dense mat-mat uses
    multi-column kernels whose summation order differs; rows_case bounds those
    against float64.)"""
    B = max(blck(wtype), 32)
    w, x, idx, y, sel = rows_case(wtype, 129, 2 * B, 1, 0.5, 3)
    dense = _core.run_op("mul_mat", [w, x], {}, 2, None).reshape(1, 129)
    np.testing.assert_array_equal(y[:, sel], dense[:, sel])


@pytest.mark.parametrize("begin,end", [(0, 0), (0, 50), (50, 301), (120, 121), (301, 301)])
def test_rows_ranges(begin, end):
    rows_case("q4_0", 301, 64, 1, 0.5, 11, begin, end)
    rows_case("q8_0", 301, 64, 2, 0.3, 12, begin, end)


def test_rows_scalar_kernels():
    _core.force_scalar(True)
    try:
        rows_case("q4_K", 99, 256, 2, 0.5, 5)
        rows_case("q4_0", 99, 64, 1, 0.5, 6)
    finally:
        _core.force_scalar(False)


# ---------------------------------------------------------------- column-sparse down

def down_case(wtype, n, d, T, density, rng_seed, begin=None, end=None, relu_zeros=False):
    g = np.random.default_rng(rng_seed)
    wt, wt64 = make_weight(wtype, n, d, g)  # ffn_down_t: one row of d per neuron
    h = g.standard_normal((T, n)).astype(np.float32)
    if relu_zeros:
        h = np.maximum(h, 0.0).astype(np.float32)
    act = random_active(n, density, g)
    idx = index_list(n, [act])
    b = 0 if begin is None else begin
    e = n if end is None else end
    y = run("sparse_down", [wt, h, idx], {"begin": b, "end": e}).reshape(T, d)
    use = act[(act >= b) & (act < e)]
    h64 = h.astype(np.float64)[:, use]
    ref = h64 @ wt64[use]
    mag = np.abs(h64) @ np.abs(wt64[use])
    # float32 accumulation in ascending neuron order: error grows with the count
    err = np.abs(y - ref)
    assert np.all(err <= 1.2e-7 * (len(use) + 4) * mag + 1e-30), (wtype, err.max())
    if len(use) == 0:
        assert np.all(y == 0.0)
    return y


@pytest.mark.parametrize("wtype", WEIGHT_TYPES)
@pytest.mark.parametrize("density", DENSITIES)
def test_down_all_types(wtype, density):
    B = max(blck(wtype), 32)
    for n, d, T in [(37, 2 * B, 1), (301, B, 1), (65, 3 * B if B == 32 else 2 * B, 3)]:
        down_case(wtype, n, d, T, density, hash((wtype, n, d, 1)) % 1000)


@pytest.mark.parametrize("wtype", ["f16", "q8_0", "q4_0", "q5_K"])
def test_down_wide_rows_and_relu_zeros(wtype):
    # d spans many thread slices, odd n; relu zeros in h are skipped
    B = max(blck(wtype), 32)
    down_case(wtype, 203, 24 * B if B == 32 else 4 * B, 1, 0.5, 21, relu_zeros=True)
    down_case(wtype, 203, 24 * B if B == 32 else 4 * B, 4, 0.5, 22, relu_zeros=True)


@pytest.mark.parametrize("begin,end", [(0, 0), (0, 40), (40, 301), (150, 151), (301, 301)])
def test_down_ranges(begin, end):
    down_case("q4_0", 301, 96, 1, 0.5, 31, begin, end)
    down_case("f16", 301, 96, 3, 0.5, 32, begin, end)


def test_down_scalar_kernels():
    _core.force_scalar(True)
    try:
        for t in ("f32", "f16", "q8_0", "q4_0", "q3_K"):
            B = max(blck(t), 32)
            down_case(t, 77, 4 * B if B == 32 else B, 1, 0.6, 41)
    finally:
        _core.force_scalar(False)


@pytest.mark.parametrize("wtype", ["f16", "q8_0", "q4_0", "q4_K"])
@pytest.mark.parametrize("T", [1, 3])
@pytest.mark.parametrize("b0,b1", [(0, None), (1, None), (0, 2), (1, 1)])  # in blocks of w_down
def test_down_dense_path(wtype, T, b0, b1):
    """With the plain ffn_down given, mode 2 (dense matvec over the range, inactive
    h as 0) and mode 0 (policy) compute the same sum as the sparse kernel."""
    g = np.random.default_rng(70 + T)
    B = max(blck(wtype), 32)
    n, d = 512 if B == 32 else 768, 2 * B
    begin, end = b0 * B, n if b1 is None else b1 * B
    wt, wt64 = make_weight(wtype, n, d, g)
    wd, wd64 = make_weight(wtype, d, n, g)  # independent values: the test sees which matrix was used
    h = g.standard_normal((T, n)).astype(np.float32)
    act = random_active(n, 0.6, g)
    idx = index_list(n, [act])
    use = act[(act >= begin) & (act < end)]
    hm = np.zeros((T, n))
    hm[:, use] = h[:, use]
    for mode, w_used in ((2, "dense"), (1, "sparse"), (0, None)):
        y = run("sparse_down", [wt, h, idx, wd], {"begin": begin, "end": end, "mode": mode}).reshape(T, d)
        ref_sparse = hm @ wt64
        # the dense path sees h as the dot kernel does (quantized to vec_dot_type)
        ref_dense = (act_as_seen(wtype, hm[:, begin:end].astype(np.float32), ncols=1) @ wd64.T[begin:end] if end > begin
                     else np.zeros((T, d)))
        mag_s = np.abs(hm) @ np.abs(wt64)
        mag_d = np.abs(hm[:, begin:end]) @ np.abs(wd64.T[begin:end]) if end > begin else np.zeros((T, d))
        ok_s = np.all(np.abs(y - ref_sparse) <= 1.2e-7 * (len(use) + 4) * mag_s + 1e-30)
        ok_d = np.all(np.abs(y - ref_dense) <= 3e-6 * mag_d + 1e-30)
        if begin == end:
            assert np.all(y == 0.0)
        elif w_used == "dense":
            assert ok_d
        elif w_used == "sparse":
            assert ok_s
        else:
            assert ok_s or ok_d


def test_down_dense_path_unaligned_range_stays_sparse():
    g = np.random.default_rng(80)
    n, d = 320, 64
    wt, wt64 = make_weight("q8_0", n, d, g)
    wd, _ = make_weight("q8_0", d, n, g)  # blocks of 32 along n: [5, 290) is not aligned
    h = g.standard_normal((1, n)).astype(np.float32)
    act = random_active(n, 0.9, g)
    idx = index_list(n, [act])
    y = run("sparse_down", [wt, h, idx, wd], {"begin": 5, "end": 290, "mode": 2}).reshape(1, d)
    use = act[(act >= 5) & (act < 290)]
    ref = h.astype(np.float64)[:, use] @ wt64[use]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)  # the sparse kernel ran, not w_down


def test_sparse_should_use_dense_policy_drives_the_op():
    """mode 0 follows the CPU's policy (ggml_cpu_sparse_should_use_dense): full density -> dense path."""
    g = np.random.default_rng(81)
    n, d = 256, 64
    wt, wt64 = make_weight("f32", n, d, g)
    wd = np.zeros((d, n), np.float32)  # dense path would give exactly 0
    h = g.standard_normal((1, n)).astype(np.float32)
    full = index_list(n, [np.arange(n)])
    few = index_list(n, [np.arange(0, n, 50)])
    assert np.all(run("sparse_down", [wt, h, full, wd], {"mode": 0}) == 0.0)
    y = run("sparse_down", [wt, h, few, wd], {"mode": 0}).reshape(1, d)
    np.testing.assert_allclose(y, h[:, ::50].astype(np.float64) @ wt64[::50], rtol=1e-5, atol=1e-5)


def test_down_range_shares_add_up():
    """A GPU-style split: [0, k) and [k, n) computed separately sum to the whole."""
    n, d, k = 211, 128, 70
    a = down_case("q8_0", n, d, 1, 0.4, 51, 0, k)
    b = down_case("q8_0", n, d, 1, 0.4, 51, k, n)
    full = down_case("q8_0", n, d, 1, 0.4, 51)
    np.testing.assert_allclose(a + b, full, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- a whole sparse FFN in one graph

@pytest.mark.parametrize("T", [1, 3])
def test_reglu_ffn_exact_mode(T):
    """ReGLU exact mode: gate dense, up/down only where gate > 0 == dense FFN."""
    g = np.random.default_rng(60 + T)
    d, n = 64, 203
    wg = g.standard_normal((n, d)).astype(np.float32) * 0.3
    wu = g.standard_normal((n, d)).astype(np.float32) * 0.3
    wd = g.standard_normal((d, n)).astype(np.float32) * 0.3
    x = g.standard_normal((T, d)).astype(np.float32)
    outs = []
    for nt in THREADS:
        gr = _core.Graph()
        xi, gi, ui, dti = gr.input(x), gr.input(wg), gr.input(wu), gr.input(np.ascontiguousarray(wd.T))
        gate = gr.op("mul_mat", [gi, xi])
        idx = gr.op("sparse_select", [gate], {"threshold": 0.0})
        up = gr.op("mul_mat_sparse_rows", [ui, xi, idx])
        h = gr.op("reglu", [gate, up])
        y = gr.op("sparse_down", [dti, h, idx])
        gr.compute([y], n_threads=nt)
        outs.append(gr.get(y))
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()
    x64 = x.astype(np.float64)
    ref = (np.maximum(x64 @ wg.T.astype(np.float64), 0) * (x64 @ wu.T.astype(np.float64))) @ wd.T.astype(np.float64)
    np.testing.assert_allclose(outs[0].reshape(T, d), ref, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- bad arguments

def test_bad_index_lists_and_ranges():
    w = np.ones((5, 32), np.float32)
    x = np.ones((1, 32), np.float32)
    with pytest.raises(ValueError, match="ascending"):
        _core.run_op("mul_mat_sparse_rows", [w, x, np.array([[2, 3, 1, -1, -1, -1]], np.int32)])
    with pytest.raises(ValueError, match="ascending"):
        _core.run_op("sparse_down", [w, np.ones((1, 5), np.float32), np.array([[2, 3, 3, -1, -1, -1]], np.int32)])
    with pytest.raises(ValueError, match="count"):
        _core.run_op("mul_mat_sparse_rows", [w, x, np.array([[9, 0, 1, 2, 3, 4]], np.int32)])
    with pytest.raises(ValueError, match="begin"):
        _core.run_op("mul_mat_sparse_rows", [w, x, np.array([[0, -1, -1, -1, -1, -1]], np.int32)],
                     {"begin": 3, "end": 2})
    with pytest.raises(ValueError, match="differ"):
        _core.run_op("mul_mat_sparse_rows", [w, np.ones((1, 64), np.float32), np.zeros((1, 6), np.int32)])
    with pytest.raises(ValueError, match="idx"):
        _core.run_op("sparse_down", [w, np.ones((1, 5), np.float32), np.zeros((2, 1, 9), np.int32)])
    with pytest.raises(ValueError, match="end <= n"):  # the weight holds 5 neurons, whatever the list spans
        _core.run_op("sparse_down", [w, np.ones((1, 5), np.float32), np.zeros((1, 9), np.int32)], {"end": 8})
    with pytest.raises(ValueError, match="w_down"):
        _core.run_op("sparse_down", [w, np.ones((1, 5), np.float32), np.zeros((1, 6), np.int32),
                                     np.ones((5, 32), np.float32)])
    with pytest.raises(ValueError, match="mode"):
        _core.run_op("sparse_down", [w, np.ones((1, 5), np.float32), np.zeros((1, 6), np.int32)], {"mode": 3})


# ---------------------------------------------------------------- GGML_PREC_HIGH

def round_q8(v):
    """Round half away from zero, clamp to int8 (the activation quantizers' rule), float32."""
    r = np.where(v < 0, -np.floor(-v + np.float32(0.5)), np.floor(v + np.float32(0.5))).astype(np.float32)
    return np.clip(r, -127, 127)


def q8xh_values(x):
    """What a q8xh activation row stands for (ggml/src/cpu/vec-dot-simd.h): per block of 32,
    q as Q8_0 quantizes it and the residual on the grid df/128."""
    xb = x.astype(np.float32).reshape(x.shape[0], -1, 32)
    amax = np.abs(xb).max(-1, keepdims=True)
    d = (amax / np.float32(127)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), 0).astype(np.float32)
    df = d.astype(np.float16).astype(np.float32)
    ir = np.where(df != 0, np.float32(128) / np.where(df != 0, df, 1), 0).astype(np.float32)
    q = round_q8((xb * inv).astype(np.float32))
    q2 = round_q8(((xb - df * q).astype(np.float32) * ir).astype(np.float32))
    return ((df.astype(np.float64) / 128) * (128.0 * q + q2)).reshape(x.shape)


def q8K_resid_values(x, first):
    """q8_K's residual row under GGML_PREC_HIGH (ggml-quants.h): x - first on the grid
    d/128 of the q8_K row's blocks of 256 (d = amax / 127, float32)."""
    xb = x.astype(np.float32).reshape(x.shape[0], -1, 256)
    d = (np.abs(xb).max(-1, keepdims=True) / np.float32(127)).astype(np.float32)
    ir = np.where(d != 0, np.float32(128) / np.where(d != 0, d, 1), 0).astype(np.float32)
    r = (x.astype(np.float64) - first).astype(np.float32).reshape(xb.shape)
    return ((d / np.float32(128)).astype(np.float64) * round_q8((r * ir).astype(np.float32))).reshape(x.shape)


def act_as_seen_high(name, x, ncols=None):
    """Activations under GGML_PREC_HIGH: the converted row plus its converted residual
    (the q8xh layout's residual where the type runs on a q8xh kernel, q8_K's on the grid
    d/128 of its blocks); F16 and BF16 weights take the f32 activations themselves."""
    ncols = x.reshape(-1, x.shape[-1]).shape[0] if ncols is None else ncols
    fmt = _core.act_format(tid(name), x.shape[-1], ncols, True)
    if fmt == "q8xh":
        return q8xh_values(x)
    first = _converted(fmt, x)
    if fmt == "q8_K":
        return first + q8K_resid_values(x, first)
    return first if fmt == "f32" else first + _converted(fmt, (x.astype(np.float64) - first).astype(np.float32))


@pytest.mark.parametrize("wtype", ["f16", "q4_0", "q4_1", "q5_1", "q8_0", "q4_K", "q6_K"])
@pytest.mark.parametrize("T", [1, 3, 9])
def test_high_precision_products(wtype, T):
    """prec 'high' (ggml_set_prec): dense mul_mat, row-sparse rows and the dense path
    of sparse_down see the activations as row + residual, i.e. to about 16 bits: at
    least 20x closer to the exact float64 product than the default 8-bit conversion,
    the same value in the dense and the row-sparse kernel, 1..4 threads identical."""
    g = np.random.default_rng(90 + T)
    B = max(blck(wtype), 32)
    n, d = 70, 4 * B
    w, w64 = make_weight(wtype, n, d, g)
    x = g.standard_normal((T, d)).astype(np.float32)
    exact = x.astype(np.float64) @ w64.T
    mag = np.abs(x.astype(np.float64)) @ np.abs(w64).T
    dense_hi = run("mul_mat", [w, x], {"prec": "high"}).reshape(T, n)
    dense_lo = run("mul_mat", [w, x], {}).reshape(T, n)
    ref_hi = act_as_seen_high(wtype, x) @ w64.T
    assert np.all(np.abs(dense_hi - ref_hi) <= 6e-6 * mag + 1e-30)
    assert np.all(np.abs(dense_hi - exact) <= 3e-4 * mag)
    err_hi, err_lo = np.abs(dense_hi - exact).max(), np.abs(dense_lo - exact).max()
    assert err_hi * 20 < err_lo, (err_hi, err_lo)

    act = random_active(n, 0.5, g)
    idx = index_list(n, [act])
    rows = run("mul_mat_sparse_rows", [w, x, idx], {"prec": "high"}).reshape(T, n)
    np.testing.assert_allclose(rows[:, act], dense_hi[:, act], rtol=0, atol=float(6e-6 * mag.max()))

    # sparse_down's dense path (mode 2) converts h for the plain ffn_down
    wd, wd64 = make_weight(wtype, d, n, g) if n % B == 0 else make_weight(wtype, d, 2 * B, g)
    nn = wd64.shape[1]
    wt, _ = make_weight("f32", nn, d, g)
    h = g.standard_normal((T, nn)).astype(np.float32)
    idx = index_list(nn, [np.arange(nn)])
    y = run("sparse_down", [wt, h, idx, wd], {"mode": 2, "prec": "high"}).reshape(T, d)
    exact_d = h.astype(np.float64) @ wd64.T
    mag_d = np.abs(h.astype(np.float64)) @ np.abs(wd64).T
    assert np.all(np.abs(y - exact_d) <= 3e-4 * mag_d)


def test_prec_param_is_checked():
    w = np.ones((4, 32), np.float32)
    with pytest.raises(ValueError, match="prec"):
        _core.run_op("mul_mat", [w, np.ones((1, 32), np.float32)], {"prec": "ultra"})


# ---------------------------------------------------------------- neuron bundles (g rows per neuron)

def interleave(ws, n):
    """The run_op input of the bundle [a_0, b_0, ..., a_1, b_1, ...] of (n, d) weights."""
    if isinstance(ws[0], np.ndarray):
        return np.stack(ws, axis=1).reshape(len(ws) * n, -1)
    t, d = ws[0][1], ws[0][2][1]
    rows = np.stack([np.frombuffer(w[0], np.uint8).reshape(n, -1) for w in ws], axis=1)
    return rows.tobytes(), t, [len(ws) * n, d]


@pytest.mark.parametrize("wtype", WEIGHT_TYPES)
@pytest.mark.parametrize("density", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("T,prec", [(1, "default"), (3, "default"), (1, "high"), (5, "high")])
def test_rows_bundle_equals_separate_rows(wtype, density, T, prec):
    """mul_mat_sparse_rows over a gate/up bundle (rows gate_0, up_0, gate_1, ...,
    g = 2) gives, plane by plane, the very bits of the row-sparse op on the
    separate matrices (the same dot per row), and both match numpy."""
    g = np.random.default_rng(100 + T)
    B = max(blck(wtype), 32)
    n, d = 45, 2 * B
    wg, wg64 = make_weight(wtype, n, d, g)
    wu, wu64 = make_weight(wtype, n, d, g)
    x = g.standard_normal((T, d)).astype(np.float32)
    act = random_active(n, density, g)
    idx = index_list(n, [act])
    params = {"prec": prec}
    sep_g = run("mul_mat_sparse_rows", [wg, x, idx], params).reshape(T, n)
    sep_u = run("mul_mat_sparse_rows", [wu, x, idx], params).reshape(T, n)
    wb = interleave([wg, wu], n)
    both = run("mul_mat_sparse_rows", [wb, x, idx], dict(params, g=2)).reshape(2, T, n)
    assert both[0].tobytes() == sep_g.tobytes() and both[1].tobytes() == sep_u.tobytes()
    ref = (act_as_seen_high if prec == "high" else act_as_seen)(wtype, x) @ np.stack([wg64, wu64]).transpose(0, 2, 1)
    mag = np.abs(x.astype(np.float64)) @ np.abs(np.stack([wg64, wu64])).transpose(0, 2, 1)
    assert np.all(np.abs(both[:, :, act] - ref[:, :, act]) <= 6e-6 * mag[:, :, act] + 1e-30)
    off = np.setdiff1d(np.arange(n), act)
    assert np.all(both[:, :, off] == 0.0)


# ---------------------------------------------------------------- fused FFN over a (gate, up, down_t) bundle

ACTS = {"swiglu": lambda g: g / (1 + np.exp(-g)), "reglu": lambda g: np.maximum(g, 0),
        "geglu": lambda g: g / (1 + np.exp(-2 * 0.7978845608028654 * g * (1 + 0.044715 * g * g)))}


@pytest.mark.parametrize("wtype", WEIGHT_TYPES)
@pytest.mark.parametrize("T", [1, 3])
@pytest.mark.parametrize("density", [0.0, 0.05, 0.6])
def test_sparse_ffn_bundle(wtype, T, density):
    """y_t = sum over the active neurons of act(gate_i.x_t) up_i.x_t down_t_i, against
    float64 numpy on the kernels' view of the activations; 1..4 threads bit-identical;
    parts at fixed list positions (n = 300 gives several parts at 60% density)."""
    g = np.random.default_rng(int(density * 100) + T)
    B = max(blck(wtype), 32)
    n, d = 300, 2 * B
    (wg, g64), (wu, u64), (wd, d64) = (make_weight(wtype, n, d, g) for _ in range(3))
    x = g.standard_normal((T, d)).astype(np.float32)
    act = random_active(n, density, g)
    idx = index_list(n, [act])
    for name, prec in (("swiglu", "default"), ("reglu", "high"), ("geglu", "default")):
        y = run("sparse_ffn_bundle", [interleave([wg, wu, wd], n), x, idx], {"act": name, "prec": prec}).reshape(T, d)
        xs = (act_as_seen_high if prec == "high" else act_as_seen)(wtype, x)
        gv, uv = xs @ g64[act].T, xs @ u64[act].T  # (T, m)
        with np.errstate(over="ignore"):
            h = ACTS[name](gv) * uv
        ref = h @ d64[act]
        with np.errstate(over="ignore"):
            mag = (np.abs(h) @ np.abs(d64[act])
                   + np.abs(ACTS[name](gv)) * (np.abs(xs) @ np.abs(u64[act]).T) @ np.abs(d64[act]))
        assert np.all(np.abs(y - ref) <= 2e-5 * mag + 1e-30), (wtype, name, np.abs(y - ref).max())
        if len(act) == 0:
            assert np.all(y == 0.0)


def test_sparse_ffn_bundle_relu_up_and_errors():
    g = np.random.default_rng(5)
    n, d = 70, 64
    ws = [g.standard_normal((n, d)).astype(np.float32) for _ in range(3)]
    x = g.standard_normal((1, d)).astype(np.float32)
    act = random_active(n, 0.5, g)
    y = run("sparse_ffn_bundle", [interleave(ws, n), x, index_list(n, [act])], {"act": "reglu", "relu_up": 1})
    w64 = [w.astype(np.float64) for w in ws]
    h = np.maximum(x @ w64[0][act].T, 0) * np.maximum(x @ w64[1][act].T, 0)
    np.testing.assert_allclose(y.reshape(1, d), h @ w64[2][act], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="act"):
        _core.run_op("sparse_ffn_bundle", [interleave(ws, n), x, index_list(n, [act])], {"act": "tanh"})
    with pytest.raises(ValueError, match="3n"):
        _core.run_op("sparse_ffn_bundle", [ws[0], x, index_list(n, [act])], {})
    with pytest.raises(ValueError, match="tokens"):
        _core.run_op("sparse_ffn_bundle", [interleave(ws, n), np.ones((9, d), np.float32), index_list(n, [act])], {})
    with pytest.raises(ValueError, match="together"):
        _core.run_op("sparse_ffn_bundle", [interleave(ws, n), x, index_list(n, [act]), ws[2].T.copy(), ws[0]], {})


@pytest.mark.parametrize("wtype", ["f32", "q4_0", "q8_0", "q6_K"])
@pytest.mark.parametrize("density,prec", [(0.05, "default"), (0.6, "default"), (0.6, "high")])
def test_sparse_ffn_bundle_dense_fallback(wtype, density, prec):
    """Given the plain ffn_gate, ffn_up and ffn_down, past the crossover density
    (T = 1: half the neurons) the fused op reads gate and up from the plain
    matrices and computes the down projection as a dense mat-vec over ffn_down;
    below it, everything from the bundle. w_down has its own values here, so the
    reference shows which matrix was used."""
    g = np.random.default_rng(7)
    B = max(blck(wtype), 32)
    n, d = 8 * B, 2 * B
    (wg, g64), (wu, u64), (wt, t64) = (make_weight(wtype, n, d, g) for _ in range(3))
    wd, wd64 = make_weight(wtype, d, n, g)  # [d rows of n]: ffn_down
    x = g.standard_normal((1, d)).astype(np.float32)
    act = random_active(n, density, g)
    y = run("sparse_ffn_bundle", [interleave([wg, wu, wt], n), x, index_list(n, [act]), wd, wg, wu],
            {"act": "swiglu", "prec": prec}).reshape(1, d)
    seen = act_as_seen_high if prec == "high" else act_as_seen
    xs = seen(wtype, x)
    h = np.zeros((1, n))
    h[:, act] = ACTS["swiglu"](xs @ g64[act].T) * (xs @ u64[act].T)
    if density >= 0.5:  # dense: h converted as the dot kernel sees it (high: plus its converted residual)
        h32 = h.astype(np.float32)
        hs = act_as_seen(wtype, h32, ncols=1)
        if prec == "high":
            hs = hs + act_as_seen(wtype, (h32.astype(np.float64) - hs).astype(np.float32))
        ref = hs @ wd64.T
        mag = np.abs(h) @ np.abs(wd64).T
    else:
        ref = h @ t64
        mag = np.abs(h) @ np.abs(t64)
    assert np.all(np.abs(y - ref) <= 3e-5 * mag + 1e-30), np.abs(y - ref).max()


# ---------------------------------------------------------------- neuron ranges and compact (hot-prefix) weights

def first_rows(w, rows):
    """The first `rows` rows of a run_op weight input (a device's compact hot prefix)."""
    if isinstance(w, np.ndarray):
        return np.ascontiguousarray(w[:rows])
    raw, t, (nr, d) = w
    rb = len(raw) // nr
    return raw[:rows * rb], t, [rows, d]


def first_cols(w, cols):
    """The first `cols` columns of a run_op weight input (cols a multiple of the block size)."""
    if isinstance(w, np.ndarray):
        return np.ascontiguousarray(w[:, :cols])
    raw, t, (nr, n) = w
    rb, cb = len(raw) // nr, len(raw) // nr * cols // n
    return b"".join(raw[r * rb:r * rb + cb] for r in range(nr)), t, [nr, cols]


def range_cases(n, k):
    """(begin, end, weight neurons): the hot prefix [0, k), the cold rest [k, n) and
    empty ranges, each on weights of all n neurons and on weights of only `end`."""
    out = []
    for b, e in ((0, k), (k, n), (k, k), (0, 0), (n, n)):
        out += [(b, e, n)] + ([(b, e, e)] if 0 < e < n else [])
    return out


@pytest.fixture(scope="module")
def ffn_weights():
    """Per weight type: (gate, up, down_t, down) of n neurons, float64 values, and
    the neuron counts (n, hot prefix k, d). Built once per type."""
    cache = {}

    def get(wtype):
        if wtype not in cache:
            g = np.random.default_rng(500 + WEIGHT_TYPES.index(wtype))
            B = max(blck(wtype), 32)
            n, k, d = 4 * B, 2 * B, B if B > 32 else 2 * B
            ws = [make_weight(wtype, n, d, g) for _ in range(3)] + [make_weight(wtype, d, n, g)]
            cache[wtype] = (ws, (n, k, d), g)
        return cache[wtype]
    return get


@pytest.mark.parametrize("wtype", WEIGHT_TYPES)
@pytest.mark.parametrize("T", [1, 5])
def test_ranges_rows_and_bundle(ffn_weights, wtype, T):
    """mul_mat_sparse_rows (g = 1) and its gate/up bundle (g = 2) over [begin, end):
    the active ids inside are the float64 dots, the inactive ones inside are 0; the
    list spans all n neurons while the weight may hold only `end` (ids past it are
    never read); the output has the weight's neuron count."""
    (wg, wu, _, _), (n, k, d), g = ffn_weights(wtype)
    wg_, g64 = wg
    wu_, u64 = wu
    x = g.standard_normal((T, d)).astype(np.float32)
    act = random_active(n, 0.5, g)
    idx = index_list(n, [act])
    xs = act_as_seen(wtype, x)
    for b, e, nw in range_cases(n, k):
        on = np.zeros(nw, bool)
        on[act[act < nw]] = True
        in_rng = np.zeros(nw, bool)
        in_rng[b:e] = True
        y = run("mul_mat_sparse_rows", [first_rows(wg_, nw), x, idx], {"begin": b, "end": e}, slice(b, e))
        assert y.size == T * nw
        y = y.reshape(T, nw)
        yb = run("mul_mat_sparse_rows", [interleave([first_rows(wg_, nw), first_rows(wu_, nw)], nw), x, idx],
                 {"begin": b, "end": e, "g": 2}, slice(b, e)).reshape(2, T, nw)
        for got, w64 in ((y, g64), (yb[0], g64), (yb[1], u64)):
            ref = xs @ w64[:nw].T
            mag = np.abs(xs) @ np.abs(w64[:nw]).T
            sel = on & in_rng
            assert np.all(np.abs(got[:, sel] - ref[:, sel]) <= 6e-6 * mag[:, sel] + 1e-30), (wtype, b, e, nw)
            assert np.all(got[:, in_rng & ~on] == 0.0)


@pytest.mark.parametrize("wtype", WEIGHT_TYPES)
@pytest.mark.parametrize("T", [1, 5])
def test_ranges_sparse_down(ffn_weights, wtype, T):
    """sparse_down over [begin, end), sparse kernel (mode 1) and dense path on the
    plain ffn_down (mode 2), on full and compact (`end` neurons) weights with a
    list over all n: y = sum of h_i down_t_i over the active ids in the range."""
    (_, _, wt, wd), (n, k, d), g = ffn_weights(wtype)
    wt_, t64 = wt
    wd_, d64 = wd
    act = random_active(n, 0.5, g)
    idx = index_list(n, [act])
    for b, e, nw in range_cases(n, k):
        h = g.standard_normal((T, nw)).astype(np.float32)
        use = act[(act >= b) & (act < e)]
        hm = np.zeros((T, nw))
        hm[:, use] = h[:, use]
        ins = [first_rows(wt_, nw), h, idx, first_cols(wd_, nw)]
        y = run("sparse_down", ins, {"begin": b, "end": e, "mode": 1}).reshape(T, d)
        mag = np.abs(hm) @ np.abs(t64[:nw])
        assert np.all(np.abs(y - hm @ t64[:nw]) <= 1.2e-7 * (len(use) + 4) * mag + 1e-30), (wtype, b, e, nw)
        yd = run("sparse_down", ins, {"begin": b, "end": e, "mode": 2}).reshape(T, d)
        if b == e:
            assert np.all(y == 0.0) and np.all(yd == 0.0)
            continue
        ref = act_as_seen(wtype, hm[:, b:e].astype(np.float32), ncols=1) @ d64[:, b:e].T
        mag = np.abs(hm[:, b:e]) @ np.abs(d64[:, b:e]).T
        assert np.all(np.abs(yd - ref) <= 3e-6 * mag + 1e-30), (wtype, b, e, nw)


@pytest.mark.parametrize("wtype", WEIGHT_TYPES)
@pytest.mark.parametrize("T", [1, 5])
def test_ranges_sparse_ffn_bundle(ffn_weights, wtype, T):
    """The fused FFN over [begin, end): y_t = sum over the active ids in the range
    of act(gate_i.x_t) up_i.x_t down_t_i, on a bundle of all n neurons and on one
    of only `end` (the list spans n); every output written, 0 for an empty range.
    With the plain matrices and a near-full range (policy: dense) the down
    projection is the dense mat-vec over the columns [begin, end) of ffn_down."""
    (wg, wu, wt, wd), (n, k, d), g = ffn_weights(wtype)
    (wg_, g64), (wu_, u64), (wt_, t64), (wd_, d64) = wg, wu, wt, wd
    x = g.standard_normal((T, d)).astype(np.float32)
    xs = act_as_seen(wtype, x)
    sparse_act = random_active(n, 0.3, g)
    dense_act = np.setdiff1d(np.arange(n), np.arange(3, n, 10))  # 90% of every range
    for b, e, nw in range_cases(n, k):
        bundle = interleave([first_rows(wg_, nw), first_rows(wu_, nw), first_rows(wt_, nw)], nw)
        for act, plain in ((sparse_act, False), (dense_act, True)):
            idx = index_list(n, [act])
            use = act[(act >= b) & (act < e)]
            ins = [bundle, x, idx] + ([first_cols(wd_, nw), first_rows(wg_, nw), first_rows(wu_, nw)] if plain else [])
            y = run("sparse_ffn_bundle", ins, {"act": "swiglu", "begin": b, "end": e}).reshape(T, d)
            if b == e:
                assert np.all(y == 0.0)
                continue
            gv, uv = xs @ g64[use].T, xs @ u64[use].T
            h = ACTS["swiglu"](gv) * uv
            if plain:  # dense: h over the range as the dot kernel sees it, against ffn_down
                hr = np.zeros((T, e - b))
                hr[:, use - b] = h
                ref = act_as_seen(wtype, hr.astype(np.float32), ncols=1) @ d64[:, b:e].T
                mag = np.abs(hr) @ np.abs(d64[:, b:e]).T
                assert np.all(np.abs(y - ref) <= 3e-5 * mag + 1e-30), (wtype, b, e, nw, "dense")
            else:
                ref = h @ t64[use]
                mag = (np.abs(h) @ np.abs(t64[use])
                       + np.abs(ACTS["swiglu"](gv)) * (np.abs(xs) @ np.abs(u64[use]).T) @ np.abs(t64[use]))
                assert np.all(np.abs(y - ref) <= 2e-5 * mag + 1e-30), (wtype, b, e, nw, "sparse")


def test_ranges_bad_arguments():
    w = np.ones((6, 32), np.float32)
    x = np.ones((1, 32), np.float32)
    idx = index_list(20, [[1, 4, 9, 17]])  # a list over 20 neurons, a weight of 6 (2 per bundle)
    y = _core.run_op("sparse_ffn_bundle", [w, x, idx], {"begin": 0, "end": 2})
    np.testing.assert_allclose(y.reshape(32), np.full(32, 32 * 32 / (1 + np.exp(-32.0))), rtol=1e-6)  # neuron 1 only
    with pytest.raises(ValueError, match="end <= n"):
        _core.run_op("sparse_ffn_bundle", [w, x, idx], {"begin": 0, "end": 3})
    with pytest.raises(ValueError, match="begin"):
        _core.run_op("sparse_ffn_bundle", [w, x, idx], {"begin": 2, "end": 1})
