"""CPU op kernels against numpy float64 references.

Every op runs through pinfer._core.run_op / Graph (context -> op constructor ->
planner -> thread pool) on odd shapes, 1-element and 4-D tensors, non-contiguous
inputs (transposed, permuted, strided views) and broadcasting, and must give
bit-identical results for 1, 2, 3 and 4 threads.

Shapes here are numpy order (outermost first): numpy (A, B, C) is ggml ne [C, B, A].
"""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import quants

from pinfer import _core

THREADS = (1, 2, 3, 4)
RTOL, ATOL = 1e-5, 1e-6

SHAPES = [(1,), (7,), (3, 33), (5, 1, 17), (2, 3, 4, 13), (4, 100), (3, 257)]


def rng(seed):
    return np.random.default_rng(seed)


def run(op, inputs, params=None, views=None):
    """Runs op with every thread count; asserts the results are bit-identical."""
    outs = [_core.run_op(op, inputs, params or {}, n, views) for n in THREADS]
    for n, o in zip(THREADS[1:], outs[1:]):
        assert o.dtype == outs[0].dtype and o.shape == outs[0].shape
        assert o.tobytes() == outs[0].tobytes(), f"{op}: {n} threads differ from 1 thread"
    return outs[0]


def strip(shape):
    """ggml drops trailing ne of 1, i.e. leading numpy dims of 1."""
    shape = list(shape)
    while len(shape) > 1 and shape[0] == 1:
        shape.pop(0)
    return tuple(shape)


def check(out, ref, rtol=RTOL, atol=ATOL):
    assert out.shape == strip(ref.shape), (out.shape, ref.shape)
    np.testing.assert_allclose(out.astype(np.float64), ref.reshape(out.shape), rtol=rtol, atol=atol)


def permute_ref(x4, axes):
    """numpy equivalent of ggml_permute on a 4-D array: ggml dim i goes to axes[i]."""
    inv = [0] * 4
    for i, a in enumerate(axes):
        inv[a] = i
    return x4.transpose([3 - inv[3 - j] for j in range(4)])


# Non-contiguous variants of a 2-D array x (R, C): (view spec, numpy reference).
def views_2d(x):
    r, c = x.shape
    out = [(None, x), (("transpose",), x.T)]
    if r >= 2 and c >= 2:
        # every other row, columns 1..c-1
        k = c - 1
        out.append((("view", [k, r // 2], [2 * c * 4], 4), x[::2][: r // 2, 1:]))
    return out


# ---------------------------------------------------------------- references

def silu64(x):
    return x / (1.0 + np.exp(-x))


def gelu64(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


UNARY = {
    "relu": lambda x: np.maximum(x, 0.0),
    "silu": silu64,
    "gelu": gelu64,
    "tanh": np.tanh,
}
GATED = {
    "swiglu": lambda a, b: silu64(a) * b,
    "reglu": lambda a, b: np.maximum(a, 0.0) * b,
    "geglu": lambda a, b: gelu64(a) * b,
}


# ---------------------------------------------------------------- elementwise

@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op, shape):
    x = (rng(1).standard_normal(shape) * 4).astype(np.float32)
    check(run(op, [x]), UNARY[op](x.astype(np.float64)))


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_extremes(op):
    x = np.array([0.0, -0.0, 1e-30, -1e-30, 30, -30, 100, -100, 1e4, -1e4, 3e38, -3e38], np.float32)
    out = run(op, [x])
    with np.errstate(over="ignore"):
        ref = UNARY[op](x.astype(np.float64))
    assert np.all(np.isfinite(out))
    check(out, ref)


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_noncontiguous(op):
    x = (rng(2).standard_normal((9, 14)) * 3).astype(np.float32)
    for spec, ref in views_2d(x):
        check(run(op, [x], views=[spec]), UNARY[op](ref.astype(np.float64)))
    x4 = (rng(3).standard_normal((2, 3, 5, 7))).astype(np.float32)
    for axes in [(0, 2, 1, 3), (2, 0, 3, 1), (3, 2, 1, 0)]:
        check(run(op, [x4], views=[("permute",) + axes]), UNARY[op](permute_ref(x4.astype(np.float64), axes)))


@pytest.mark.parametrize("shape", SHAPES)
def test_scale(shape):
    x = rng(4).standard_normal(shape).astype(np.float32)
    s = np.float32(-0.3711)
    check(run("scale", [x], {"scale": float(s)}), x.astype(np.float64) * np.float64(s))
    check(run("scale", [x], {"scale": 0.5}), x.astype(np.float64) * 0.5, rtol=0, atol=0)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", sorted(GATED))
def test_gated(op, shape):
    g = rng(5)
    a = (g.standard_normal(shape) * 3).astype(np.float32)
    b = g.standard_normal(shape).astype(np.float32)
    check(run(op, [a, b]), GATED[op](a.astype(np.float64), b.astype(np.float64)))


@pytest.mark.parametrize("op", sorted(GATED))
def test_gated_noncontiguous(op):
    g = rng(6)
    a = (g.standard_normal((11, 6)) * 3).astype(np.float32)
    b = g.standard_normal((6, 11)).astype(np.float32)
    # a transposed, b contiguous: same logical shape (ne [11, 6])
    check(run(op, [a, b], views=[("transpose",), None]), GATED[op](a.T.astype(np.float64), b.astype(np.float64)))


def tiled(b, shape):
    """ggml repeat semantics: b tiled to shape (each dim of shape a multiple of b's)."""
    b = b.reshape((1,) * (len(shape) - b.ndim) + b.shape)
    return np.tile(b, [s // t for s, t in zip(shape, b.shape)])


BCAST = [
    ((7,), (7,)),
    ((7,), (1,)),
    ((3, 33), (33,)),
    ((3, 33), (3, 1)),
    ((3, 33), (1, 11)),     # src1 row repeated 3 times along the row
    ((2, 3, 4, 13), (13,)),
    ((2, 3, 4, 13), (3, 1, 13)),
    ((2, 3, 4, 10), (1, 3, 2, 5)),
    ((2, 3, 4, 10), (2, 3, 4, 10)),
    ((1,), (1,)),
]


@pytest.mark.parametrize("sa,sb", BCAST)
@pytest.mark.parametrize("op", ["add", "mul"])
def test_binary_broadcast(op, sa, sb):
    g = rng(7)
    a = g.standard_normal(sa).astype(np.float32)
    b = g.standard_normal(sb).astype(np.float32)
    f = np.add if op == "add" else np.multiply
    check(run(op, [a, b]), f(a.astype(np.float64), tiled(b.astype(np.float64), sa)))


@pytest.mark.parametrize("op", ["add", "mul"])
def test_binary_noncontiguous(op):
    g = rng(8)
    f = np.add if op == "add" else np.multiply
    a = g.standard_normal((9, 14)).astype(np.float32)
    b = g.standard_normal((14, 9)).astype(np.float32)
    for spec, ref in views_2d(a):
        if ref.shape == (14, 9):
            check(run(op, [a, b], views=[spec, None]), f(ref.astype(np.float64), b.astype(np.float64)))
    # both sides transposed
    b2 = g.standard_normal((9, 14)).astype(np.float32)
    check(run(op, [a, b2], views=[("transpose",), ("transpose",)]), f(a.T.astype(np.float64), b2.T.astype(np.float64)))
    # a broadcast src1 that is itself transposed (element stride 8 bytes), tiled 7x over a^T (14, 9)
    c = g.standard_normal((9, 2)).astype(np.float32)
    ref = f(a.T.astype(np.float64), tiled(c.T.astype(np.float64), (14, 9)))
    check(run(op, [a, c], views=[("transpose",), ("transpose",)]), ref)


def test_binary_4d_permuted():
    g = rng(9)
    a = g.standard_normal((2, 3, 5, 7)).astype(np.float32)
    axes = (1, 0, 3, 2)
    pa = permute_ref(a.astype(np.float64), axes)
    # b broadcast along what is now dim 0 of the permuted a (its ne0 = 5)
    b = g.standard_normal((5,)).astype(np.float32)
    check(run("add", [a, b], views=[("permute",) + axes, None]), pa + b.astype(np.float64))
    check(run("mul", [a, b], views=[("permute",) + axes, None]), pa * b.astype(np.float64))


# ---------------------------------------------------------------- norms

def rms64(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def norm64(x, eps):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps)


NORMS = {"rms_norm": rms64, "norm": norm64}


@pytest.mark.parametrize("shape", SHAPES + [(2, 4096), (3, 1, 2, 9)])
@pytest.mark.parametrize("op", sorted(NORMS))
def test_norm(op, shape):
    x = (rng(10).standard_normal(shape) * 2 + 0.5).astype(np.float32)
    for eps in (1e-6, 1e-5):
        check(run(op, [x], {"eps": eps}), NORMS[op](x.astype(np.float64), np.float64(np.float32(eps))))


@pytest.mark.parametrize("op", sorted(NORMS))
def test_norm_noncontiguous(op):
    x = (rng(11).standard_normal((12, 40)) + 3).astype(np.float32)
    for spec, ref in views_2d(x):
        check(run(op, [x], {"eps": 1e-5}, views=[spec]),
              NORMS[op](ref.astype(np.float64), np.float64(np.float32(1e-5))))
    x4 = rng(12).standard_normal((2, 3, 4, 6)).astype(np.float32)
    axes = (2, 1, 0, 3)
    check(run(op, [x4], {"eps": 1e-6}, views=[("permute",) + axes]),
          NORMS[op](permute_ref(x4.astype(np.float64), axes), np.float64(np.float32(1e-6))))


def test_norm_large_offset():
    # mean far from zero: the centring must not cancel away the signal
    x = (1000.0 + rng(13).standard_normal((3, 300))).astype(np.float32)
    check(run("norm", [x], {"eps": 1e-5}), norm64(x.astype(np.float64), np.float64(np.float32(1e-5))),
          rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- soft_max

def softmax64(x, mask, scale):
    y = x * scale
    if mask is not None:
        y = y + mask
    m = y.max(-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(y - m)
        out = e / e.sum(-1, keepdims=True)
    return np.where(np.isneginf(m), 0.0, out)  # fully masked rows: zeros (documented)


def causal_mask(rows, cols, n_past):
    m = np.zeros((rows, cols), np.float32)
    for i in range(rows):
        m[i, n_past + i + 1:] = -np.inf
    return m


@pytest.mark.parametrize("shape", SHAPES + [(4, 2, 1000)])
def test_soft_max_plain(shape):
    x = (rng(14).standard_normal(shape) * 5).astype(np.float32)
    check(run("soft_max", [x]), softmax64(x.astype(np.float64), None, 1.0))


@pytest.mark.parametrize("heads,t,n_past", [(1, 1, 0), (3, 5, 0), (4, 7, 9), (2, 13, 3), (5, 1, 40)])
def test_soft_max_causal(heads, t, n_past):
    g = rng(15)
    kv = n_past + t
    x = (g.standard_normal((heads, t, kv)) * 4).astype(np.float32)
    # mask padded to more rows than t: only the first t rows are used
    mask = np.full((t + 3, kv), 123.0, np.float32)
    mask[:t] = causal_mask(t, kv, n_past)
    scale = 1.0 / np.sqrt(64.0)
    out = run("soft_max", [x, mask], {"scale": scale})
    ref = softmax64(x.astype(np.float64), mask[:t].astype(np.float64), np.float64(np.float32(scale)))
    check(out, ref)
    # masked positions are exactly zero
    o = out.reshape(heads, t, kv)
    assert np.all(o[:, np.isneginf(mask[:t])] == 0.0)


def test_soft_max_fully_masked_row_is_zero():
    x = rng(16).standard_normal((2, 3, 6)).astype(np.float32)
    mask = np.zeros((3, 6), np.float32)
    mask[1, :] = -np.inf
    out = run("soft_max", [x, mask], {"scale": 0.7}).reshape(2, 3, 6)
    assert np.all(np.isfinite(out))
    assert np.all(out[:, 1] == 0.0)
    check(out, softmax64(x.astype(np.float64), mask.astype(np.float64), np.float64(np.float32(0.7))))


def test_soft_max_noncontiguous():
    g = rng(17)
    x = (g.standard_normal((9, 14)) * 3).astype(np.float32)
    for spec, ref in views_2d(x):
        check(run("soft_max", [x], {"scale": 0.5}, views=[spec]), softmax64(ref.astype(np.float64), None, 0.5))
    # permuted 3-D scores (KQ laid out [kv, heads, t] -> [kv, t, heads]) with a mask
    x3 = (g.standard_normal((4, 3, 8)) * 2).astype(np.float32)  # numpy (t=4, heads=3, kv=8)
    mask = causal_mask(4, 8, 4)
    axes = (0, 2, 1, 3)
    ref_x = permute_ref(x3.reshape(1, 4, 3, 8).astype(np.float64), axes)[0]  # (heads, t, kv)
    out = run("soft_max", [x3, mask], {"scale": 0.25}, views=[("permute",) + axes, None])
    check(out, softmax64(ref_x, mask.astype(np.float64), 0.25))


# ---------------------------------------------------------------- rope

def rope64(x, pos, n_dims, mode, base, scale, factors=None, mscale=1.0):
    """x numpy (n_tokens, n_head, head_dim); factors divide the angles, mscale scales cos/sin."""
    x = x.astype(np.float64)
    out = x.copy()
    half = n_dims // 2
    i = np.arange(half, dtype=np.float64)
    theta = pos.astype(np.float64)[:, None] * scale * base ** (-2.0 * i / n_dims)  # (T, half)
    if factors is not None:
        theta = theta / factors.astype(np.float64)[None, :]
    c, s = mscale * np.cos(theta)[:, None, :], mscale * np.sin(theta)[:, None, :]
    if mode == 0:
        x0, x1 = x[..., 0:n_dims:2], x[..., 1:n_dims:2]
        out[..., 0:n_dims:2] = x0 * c - x1 * s
        out[..., 1:n_dims:2] = x0 * s + x1 * c
    else:
        x0, x1 = x[..., :half], x[..., half:n_dims]
        out[..., :half] = x0 * c - x1 * s
        out[..., half:n_dims] = x0 * s + x1 * c
    return out


ROPE_CASES = [
    # (n_tokens, n_head, head_dim, n_dims, base, scale)
    (1, 1, 2, 2, 10000.0, 1.0),
    (5, 3, 16, 16, 10000.0, 1.0),
    (7, 2, 64, 64, 500000.0, 1.0),
    (4, 3, 20, 12, 10000.0, 0.25),     # partial rotation, linear scaling
    (3, 5, 34, 34, 1000000.0, 0.5),
    (2, 2, 130, 96, 10000.0, 1.0),
]


@pytest.mark.parametrize("mode", [0, 2])
@pytest.mark.parametrize("case", ROPE_CASES)
def test_rope(mode, case):
    t, h, d, n_dims, base, scale = case
    g = rng(18)
    x = g.standard_normal((t, h, d)).astype(np.float32)
    pos = g.integers(0, 4096, size=t).astype(np.int32)
    pos[0] = 0
    out = run("rope", [x, pos], {"n_dims": n_dims, "mode": mode, "freq_base": base, "freq_scale": scale})
    ref = rope64(x, pos, n_dims, mode, np.float64(np.float32(base)), np.float64(np.float32(scale)))
    check(out, ref)
    # dims past n_dims are copied bit for bit
    assert np.array_equal(out.reshape(t, h, d)[..., n_dims:], x[..., n_dims:])


@pytest.mark.parametrize("mode", [0, 2])
def test_rope_freq_factors(mode):
    """llama3 / LongRoPE / YaRN: per-pair divisors of the angle and a cos/sin magnitude."""
    t, h, d, n_dims = 6, 2, 24, 16
    g = rng(19)
    x = g.standard_normal((t, h, d)).astype(np.float32)
    pos = np.array([0, 1, 7, 100, 2000, 30000], np.int32)
    ff = np.exp(g.uniform(0, 3, size=n_dims // 2)).astype(np.float32)
    out = run("rope", [x, pos, ff], {"n_dims": n_dims, "mode": mode, "freq_base": 50000.0, "attn_factor": 1.25})
    check(out, rope64(x, pos, n_dims, mode, 50000.0, 1.0, ff, 1.25))
    with pytest.raises(ValueError):
        run("rope", [x, pos, ff[:3]], {"n_dims": n_dims, "mode": mode})


@pytest.mark.parametrize("mode", [0, 2])
def test_rope_noncontiguous(mode):
    # Q/K as a strided view: heads of 8 dims taken out of rows of 40 floats
    # (a fused QKV row), i.e. ne [8, 3, 5] with nb1 = 32 bytes, nb2 = 160 bytes.
    g = rng(19)
    t, h, d = 5, 3, 8
    fused = g.standard_normal((t, 40)).astype(np.float32)
    pos = np.arange(10, 10 + t, dtype=np.int32)
    spec = ("view", [d, h, t], [d * 4, 40 * 4], 4 * 4)
    ref_x = fused[:, 4:4 + h * d].reshape(t, h, d)
    out = run("rope", [fused, pos], {"n_dims": 6, "mode": mode, "freq_base": 10000.0}, views=[spec, None])
    check(out, rope64(ref_x, pos, 6, mode, 10000.0, 1.0))
    # permuted input: numpy (h, t, d) permuted to ggml [d, h, t]
    x = g.standard_normal((h, t, d)).astype(np.float32)
    out = run("rope", [x, pos], {"n_dims": d, "mode": mode}, views=[("permute", 0, 2, 1, 3), None])
    check(out, rope64(x.transpose(1, 0, 2), pos, d, mode, 10000.0, 1.0))


# ---------------------------------------------------------------- argmax

@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (5, 37), (64, 1000), (3, 4096)])
def test_argmax(shape):
    g = rng(20)
    x = g.standard_normal(shape).astype(np.float32)
    out = run("argmax", [x])
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.argmax(x, axis=-1).reshape(out.shape))
    # ties: small integer values repeat; the first maximum wins, like numpy
    xt = g.integers(-3, 3, size=shape).astype(np.float32)
    np.testing.assert_array_equal(run("argmax", [xt]), np.argmax(xt, axis=-1).reshape(out.shape))


def test_argmax_transposed():
    x = rng(21).standard_normal((30, 6)).astype(np.float32)
    np.testing.assert_array_equal(run("argmax", [x], views=[("transpose",)]), np.argmax(x.T, axis=-1))


# ---------------------------------------------------------------- get_rows

def f32_from_bf16_bits(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


def dequant_q8_simple(raw, block_bytes, d_dtype):
    """Q8_1 / Q8_K: y = d * q per block (d first in the block; q at 4 bytes for both)."""
    nb = raw.size // block_bytes
    blocks = raw.reshape(nb, block_bytes)
    d = blocks[:, : np.dtype(d_dtype).itemsize].copy().view(d_dtype).astype(np.float32)
    n = 32 if block_bytes == 36 else 256
    q = blocks[:, 4:4 + n].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(-1)


def make_rows(type_name, n_rows, n_per_row, g):
    """(raw bytes, float64 reference rows) for a weight type."""
    x = g.standard_normal((n_rows, n_per_row)).astype(np.float32)
    if type_name == "F32":
        return x.tobytes(), x.astype(np.float64)
    if type_name == "F16":
        h = x.astype(np.float16)
        return h.tobytes(), h.astype(np.float64)
    qt = QT[type_name]
    bs, ts = quants.GGML_QUANT_SIZES[qt]
    if type_name == "Q8_1":
        ts = 36  # fp16 d and s (ggml-quants.h); gguf-py still lists the old 40-byte float layout
    if type_name in ("BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"):
        raw = quants.quantize(x, qt)
        return raw.tobytes(), quants.dequantize(raw, qt).astype(np.float64)
    # No gguf quantizer for these: random blocks with sane scales, gguf (or a
    # plain numpy formula) as the dequantization reference.
    nblk = n_rows * n_per_row // bs
    raw = g.integers(0, 256, size=(nblk, ts), dtype=np.uint8)
    def put_f16(off):
        raw[:, off:off + 2] = g.uniform(0.001, 0.05, size=nblk).astype(np.float16).view(np.uint8).reshape(nblk, 2)
    if type_name == "Q2_K":
        put_f16(80), put_f16(82)
    elif type_name == "Q3_K":
        put_f16(108)
    elif type_name in ("Q4_K", "Q5_K"):
        put_f16(0), put_f16(2)
    elif type_name == "Q6_K":
        put_f16(208)
    elif type_name == "Q8_1":
        put_f16(0), put_f16(2)
        ref = dequant_q8_simple(raw.reshape(-1), ts, np.float16).reshape(n_rows, n_per_row)
        return raw.tobytes(), ref.astype(np.float64)
    elif type_name == "Q8_K":
        raw[:, 0:4] = g.uniform(0.001, 0.05, size=nblk).astype(np.float32).view(np.uint8).reshape(nblk, 4)
        ref = dequant_q8_simple(raw.reshape(-1), ts, np.float32).reshape(n_rows, n_per_row)
        return raw.tobytes(), ref.astype(np.float64)
    raw = raw.reshape(n_rows, -1)
    return raw.tobytes(), quants.dequantize(raw, qt).astype(np.float64)


GET_ROWS_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1",
                  "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"]


@pytest.mark.parametrize("type_name", GET_ROWS_TYPES)
def test_get_rows(type_name):
    g = rng(22)
    bs = quants.GGML_QUANT_SIZES[QT[type_name]][0]
    n_rows, n_per_row = 11, bs * 2 if bs > 1 else 37
    raw, ref = make_rows(type_name, n_rows, n_per_row, g)
    idx = np.array([3, 0, 10, 3, 7, 1, 9], np.int32)
    out = run("get_rows", [(raw, int(QT[type_name]), [n_rows, n_per_row]), idx])
    assert out.dtype == np.float32 and out.shape == (len(idx), n_per_row)
    # exact up to float rounding of the scale products
    np.testing.assert_allclose(out, ref[idx], rtol=1e-6, atol=1e-7 * max(1.0, np.abs(ref).max()))


def test_get_rows_single_and_f16_array():
    g = rng(23)
    x = g.standard_normal((5, 9)).astype(np.float16)
    out = run("get_rows", [x, np.array([4], np.int32)])
    np.testing.assert_array_equal(out, x[4:5].astype(np.float32).reshape(out.shape))


def test_get_rows_rejects_bad_index():
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(IndexError):
        _core.run_op("get_rows", [x, np.array([4], np.int32)], {}, 1, None)
    with pytest.raises(IndexError):
        _core.run_op("get_rows", [x, np.array([-1], np.int32)], {}, 1, None)


# ---------------------------------------------------------------- cpy / cont

SPECIAL = np.array([0.0, -0.0, 1.0, -2.5, 65504.0, 70000.0, -1e6, 6e-8, 1e-7, 3e-5, 0.1, np.inf, -np.inf,
                    1.0009765625, 1.00048828125, 1.00146484375], np.float32)  # last three: f16 round-to-even ties


def f32_values(shape, g):
    x = (g.standard_normal(shape) * 10).astype(np.float32)
    flat = x.reshape(-1)
    k = min(flat.size, SPECIAL.size)
    flat[:k] = SPECIAL[:k]
    return x


@pytest.mark.parametrize("shape", [(1,), (3, 33), (2, 3, 4, 13), (4, 100)])
def test_cpy_f32_f16(shape):
    g = rng(24)
    x = f32_values(shape, g)
    dst = np.zeros(shape, np.float16)
    out = run("cpy", [x, dst])
    assert out.dtype == np.uint16
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16)
    np.testing.assert_array_equal(out.reshape(shape), ref.view(np.uint16))
    # and back: F16 -> F32 is exact
    back = run("cpy", [ref, np.zeros(shape, np.float32)])
    np.testing.assert_array_equal(back.reshape(shape), ref.astype(np.float32))


@pytest.mark.parametrize("shape", [(1,), (3, 33), (2, 3, 4, 13)])
def test_cpy_f32_bf16(shape):
    g = rng(25)
    x = f32_values(shape, g)
    dst = (np.zeros(shape, np.uint16).tobytes(), int(QT.BF16), list(shape))
    out = run("cpy", [x, dst])
    ref = quants.quantize(x.reshape(-1, shape[-1]), QT.BF16).view(np.uint16)  # round to nearest even
    np.testing.assert_array_equal(out.reshape(-1), ref.reshape(-1))
    back = run("cpy", [(out.tobytes(), int(QT.BF16), list(shape)), np.zeros(shape, np.float32)])
    np.testing.assert_array_equal(back.reshape(-1), f32_from_bf16_bits(ref.reshape(-1)))


def test_cpy_noncontiguous_both_sides():
    # the KV-cache pattern: a transposed F32 source written into a strided
    # window of a bigger F16 cache; the rest of the cache must be untouched
    g = rng(26)
    src = g.standard_normal((6, 10)).astype(np.float32)      # ne [10, 6]
    cache = g.standard_normal((12, 16)).astype(np.float16)   # ne [16, 12]
    gr = _core.Graph()
    a = gr.transpose(gr.input(src))                          # ne [6, 10]
    c = gr.input(cache)
    win = gr.view(c, [6, 10], [16 * 2], (2 * 16 + 3) * 2)    # rows 2..11, cols 3..8
    y = gr.op("cpy", [a, win])
    gr.compute([y], n_threads=3)
    expect = cache.copy()
    expect[2:12, 3:9] = src.T.astype(np.float16)
    np.testing.assert_array_equal(gr.get(c), expect.view(np.uint16))
    np.testing.assert_array_equal(gr.get(y), expect[2:12, 3:9].view(np.uint16))


def test_cpy_reshaping():
    # same element count, different shapes: logical (row-major) order is kept
    x = rng(27).standard_normal((4, 6)).astype(np.float32)
    out = run("cpy", [x, np.zeros((3, 8), np.float16)])
    np.testing.assert_array_equal(out, x.reshape(3, 8).astype(np.float16).view(np.uint16))
    out = run("cpy", [x, np.zeros((3, 8), np.float32)], views=[("transpose",), None])
    np.testing.assert_array_equal(out, x.T.reshape(3, 8))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_cont(dtype):
    x = (rng(28).standard_normal((2, 3, 5, 7)) * 100).astype(dtype)
    es = x.itemsize
    cases = [(("transpose",), x.transpose(0, 1, 3, 2)),
             (("permute", 2, 0, 3, 1), permute_ref(x, (2, 0, 3, 1))),
             # x[:, :, ::2, :3] as a strided view
             (("view", [3, 3, 3, 2], [14 * es, 35 * es, 105 * es], 0), x[:, :, ::2, :3])]
    for spec, ref in cases:
        out = run("cont", [x], views=[spec])
        if dtype == np.float16:
            out = out.view(np.float16)
        assert out.shape == ref.shape
        np.testing.assert_array_equal(out, ref)


def test_cont_quantized_rows():
    g = rng(29)
    raw, ref = make_rows("Q8_0", 6, 64, g)
    # every other row of the Q8_0 matrix, made contiguous, then dequantized by get_rows
    gr = _core.Graph()
    q = gr.input_raw(raw, int(QT.Q8_0), [6, 64])
    v = gr.view(q, [64, 3], [2 * 68], 0)
    c = gr.op("cont", [v])
    y = gr.op("get_rows", [c, gr.input(np.array([2, 0, 1], np.int32))])
    gr.compute([y], n_threads=2)
    np.testing.assert_allclose(gr.get(y), ref[[4, 0, 2]], rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- mul_mat through the runner

@pytest.mark.parametrize("m,n,k", [(1, 1, 32), (7, 3, 64), (33, 5, 96)])
def test_mul_mat_f32(m, n, k):
    g = rng(30)
    a = g.standard_normal((m, k)).astype(np.float32)
    b = g.standard_normal((n, k)).astype(np.float32)
    out = _core.run_op("mul_mat", [a, b], {}, 2, None)
    ref = b.astype(np.float64) @ a.astype(np.float64).T
    np.testing.assert_allclose(out.reshape(n, m), ref, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- multi-op graphs and the planner

def build_chain(gr, x, w, bias):
    xi, wi, bi = gr.input(x), gr.input(w), gr.input(bias)
    h = gr.op("rms_norm", [xi], {"eps": 1e-6})
    h = gr.op("mul", [h, wi])
    h = gr.op("add", [h, bi])
    return gr.op("silu", [h])


def chain_ref(x, w, bias):
    x, w, bias = (v.astype(np.float64) for v in (x, w, bias))
    return silu64(rms64(x, np.float64(np.float32(1e-6))) * w + bias)


def test_chain_and_planner_reuse():
    g = rng(31)
    t, d = 6, 200
    x = g.standard_normal((t, d)).astype(np.float32)
    w = g.standard_normal(d).astype(np.float32)
    bias = g.standard_normal(d).astype(np.float32)
    results = []
    for n in THREADS:
        gr = _core.Graph()
        y = build_chain(gr, x, w, bias)
        gr.compute([y], n_threads=n)
        assert gr.n_nodes() == 4
        out = gr.get(y)
        check(out, chain_ref(x, w, bias))
        results.append(out.tobytes())
        # four [t, d] intermediates; liveness lets them share space
        assert gr.buffer_size() < 4 * t * d * 4
        assert gr.buffer_size() >= 2 * t * d * 4
    assert all(r == results[0] for r in results)


def test_shared_allocator_does_not_grow():
    g = rng(32)
    x = g.standard_normal((5, 130)).astype(np.float32)
    w = g.standard_normal(130).astype(np.float32)
    bias = g.standard_normal(130).astype(np.float32)
    alloc = _core.GraphAllocator()
    sizes = []
    for _ in range(3):
        gr = _core.Graph()
        y = build_chain(gr, x, w, bias)
        gr.compute([y], n_threads=2, allocator=alloc)
        check(gr.get(y), chain_ref(x, w, bias))
        sizes.append(alloc.buffer_size())
    assert sizes[0] > 0 and sizes[1] == sizes[0] and sizes[2] == sizes[0]


def test_graph_with_views_between_ops():
    # rope on a reshaped matmul-free projection, then soft_max of a permuted copy: views
    # inside a graph are resolved by the planner from their (planned) base
    g = rng(33)
    t, h, d = 4, 2, 8
    x = g.standard_normal((t, h * d)).astype(np.float32)
    pos = np.arange(t, dtype=np.int32)
    gr = _core.Graph()
    xi = gr.input(x)
    s = gr.op("scale", [xi], {"scale": 2.0})
    r = gr.reshape(s, [t, h, d])
    ro = gr.op("rope", [r, gr.input(pos)], {"n_dims": d, "mode": 2})
    p = gr.permute(ro, 0, 2, 1, 3)                       # numpy (h, t, d)
    c = gr.op("cont", [p])
    sm = gr.op("soft_max", [c], {"scale": 0.5})
    gr.compute([sm], n_threads=3)
    ref_r = rope64((2.0 * x.astype(np.float64)).reshape(t, h, d), pos, d, 2, 10000.0, 1.0)
    check(gr.get(sm), softmax64(ref_r.transpose(1, 0, 2), None, 0.5))


# ---------------------------------------------------------------- argument errors

def test_runner_argument_errors():
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(ValueError):
        _core.run_op("nope", [x], {}, 1, None)
    with pytest.raises(ValueError):
        _core.run_op("add", [x, np.zeros((3, 3), np.float32)], {}, 1, None)
    with pytest.raises(TypeError):
        _core.run_op("relu", [x.astype(np.float64)], {}, 1, None)
    with pytest.raises(ValueError):
        _core.run_op("rope", [np.zeros((2, 1, 4), np.float32), np.zeros(2, np.int32)], {"n_dims": 3}, 1, None)
    with pytest.raises(ValueError):
        _core.run_op("relu", [x], {}, 1, [("view", [4, 4], [16], 0)])  # past the end
    with pytest.raises(ValueError):
        _core.run_op("relu", [x], {}, 0, None)
    with pytest.raises(ValueError):
        _core.run_op("get_rows", [(b"\0" * 10, int(QT.Q4_0), [1, 32]), np.zeros(1, np.int32)], {}, 1, None)
