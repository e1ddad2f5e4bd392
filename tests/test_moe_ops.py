"""The mixture-of-experts ops against numpy float64: top_k (the router's
choice) and mul_mat_id (each token's routed experts' products) for every
weight type, decoding and prompt batches whose tokens route to different
experts, b shared by the slots or one column per slot, both precisions."""
import numpy as np
import pytest

from pinfer import _core
from test_sparse_ops import act_as_seen, tid

TYPES = ["f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K", "q6_K"]


def experts(E, M, K, name, g):
    """E stacked [M, K] matrices of a type: (run_op input, float64 dequantized [E, M, K])."""
    w = (g.standard_normal((E, M, K)) * 0.5).astype(np.float32)
    if name == "f32":
        return w, w.astype(np.float64)
    t = tid(name)
    raw = _core.quantize(t, w.reshape(E * M, K))
    deq = _core.dequantize(t, raw.tobytes()).reshape(E, M, K).astype(np.float64)
    return (raw.tobytes(), t, [E, M, K]), deq


def routes(E, k, T, g):
    return np.stack([g.permutation(E)[:k] for _ in range(T)]).astype(np.int32)  # [T, k]


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("T", [1, 3, 33])
@pytest.mark.parametrize("per_slot", [False, True])
def test_mul_mat_id(name, T, per_slot):
    g = np.random.default_rng(T * 7 + per_slot)
    E, k, M = 5, 2, 24
    K = 256 if name.endswith("_K") else 64
    a, deq = experts(E, M, K, name, g)
    b = g.standard_normal((T, k if per_slot else 1, K)).astype(np.float32)
    ids = routes(E, k, T, g)
    outs = [_core.run_op("mul_mat_id", [a, b, ids], {}, nt, None) for nt in (1, 3)]
    assert outs[0].size == T * k * M  # ggml [M, k, T] (trailing ones dropped)
    outs = [o.reshape(T, k, M) for o in outs]
    assert outs[0].tobytes() == outs[1].tobytes()  # the thread count changes nothing
    # each expert's group of columns is one product: converted for that many columns
    group = np.bincount(ids.ravel(), minlength=E)
    ref = np.empty((T, k, M))
    for t in range(T):
        for s in range(k):
            e = ids[t, s]
            col = b[t, s if per_slot else 0][None]
            ref[t, s] = deq[e] @ act_as_seen(name, col, ncols=int(group[e]))[0]
    scale = np.max(np.abs(ref))
    tol = 1e-5 if name in ("f32", "f16", "bf16") else 2e-3  # K-quant activations: Q8_K sums in int, rounding of d
    assert np.max(np.abs(outs[0] - ref)) / scale < tol, name
    # an expert's routed columns are exactly the dense product of its matrix with
    # those columns (in token order): the same kernels, only the routed experts
    e = int(ids[T - 1, k - 1])
    cols = [(t, s) for t in range(T) for s in range(k) if ids[t, s] == e]
    if name == "f32":
        plane = np.ascontiguousarray(a[e])
    else:
        rb = len(a[0]) // (E * M)
        plane = (a[0][e * M * rb:(e + 1) * M * rb], a[1], [M, K])
    xs = np.stack([b[t, s if per_slot else 0] for t, s in cols])
    dense = _core.run_op("mul_mat", [plane, xs], {}, 2, None).reshape(len(cols), M)
    assert np.array_equal(np.stack([outs[0][t, s] for t, s in cols]), dense)


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("T", [1, 7])
def test_mul_mat_id_masked(name, T):
    """Only where the mask is nonzero: those elements are the unmasked product's, the rest 0."""
    g = np.random.default_rng(T + 100)
    E, k, M = 4, 2, 40
    K = 256 if name.endswith("_K") else 64
    a, deq = experts(E, M, K, name, g)
    b = g.standard_normal((T, 1, K)).astype(np.float32)
    ids = routes(E, k, T, g)
    mask = np.maximum(g.standard_normal((T, k, M)), 0).astype(np.float32)  # about half the rows
    outs = [_core.run_op("mul_mat_id", [a, b, ids, mask], {}, nt, None).reshape(T, k, M) for nt in (1, 3)]
    assert outs[0].tobytes() == outs[1].tobytes()
    seen = act_as_seen(name, b.reshape(-1, K), ncols=1)  # the masked path: one vec_dot per element
    ref = np.stack([[np.where(mask[t, s] != 0, deq[ids[t, s]] @ seen[t], 0.0) for s in range(k)] for t in range(T)])
    tol = 1e-5 if name in ("f32", "f16", "bf16") else 2e-3
    assert np.all(outs[0][mask == 0] == 0)
    assert np.max(np.abs(outs[0] - ref)) / np.max(np.abs(ref)) < tol, name


@pytest.mark.parametrize("name", ["q4_0", "q4_K", "f16"])
def test_mul_mat_id_prec_high_sees_activations_to_16_bits(name):
    g = np.random.default_rng(5)
    E, k, T, M = 4, 2, 6, 16
    K = 256 if name.endswith("_K") else 64
    a, deq = experts(E, M, K, name, g)
    b = g.standard_normal((T, 1, K)).astype(np.float32)
    ids = routes(E, k, T, g)
    out = _core.run_op("mul_mat_id", [a, b, ids], {"prec": "high"}, 2, None).reshape(T, k, M)
    ref = np.stack([[deq[ids[t, s]] @ b[t, 0].astype(np.float64) for s in range(k)] for t in range(T)])
    assert np.max(np.abs(out - ref)) / np.max(np.abs(ref)) < 2e-4


def test_mul_mat_id_bad_expert_id_is_an_error():
    g = np.random.default_rng(1)
    a, _ = experts(3, 8, 32, "f32", g)
    with pytest.raises(IndexError, match="expert id 3"):
        ids = np.array([[0, 3], [1, 2]], np.int32)
        _core.run_op("mul_mat_id", [a, np.ones((2, 1, 32), np.float32), ids], {}, 1, None)


@pytest.mark.parametrize("T", [1, 9])
def test_top_k(T):
    g = np.random.default_rng(T)
    x = g.standard_normal((T, 8)).astype(np.float32)
    x[0, 5] = x[0, 2] = 10.0  # a tie goes to the lower id
    for k in (1, 2, 8):
        out = _core.run_op("top_k", [x], {"k": k}, 2, None).reshape(T, k)
        ref = np.argsort(-x.astype(np.float64), axis=1, kind="stable")[:, :k]
        assert np.array_equal(out, ref), k
    y = x.copy()
    y[0, 1] = np.nan  # NaN is never chosen over a number
    assert 1 not in _core.run_op("top_k", [y], {"k": 7}, 1, None).reshape(T, 7)[0]
