"""Reference kernels of every tensor type, checked against independent references.

- block layouts and dequantization: the `gguf` package's numpy decoders;
- legacy quantizers (Q4_0..Q8_0, BF16, F16): byte-exact with `gguf` (same
  reference algorithm); Q8_1/Q8_K activation quantizers: a numpy model here;
- K-quant quantizers: round-trip error bounds, and no worse than the legacy
  type of the same bit width quantized by `gguf`;
- fp16/bf16 conversion: exhaustive against numpy;
- dot kernels: float64 dot of the dequantized operands.
"""
import zlib

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

from pinfer import _core as c  # noqa: E402

FLOAT_TYPES = [T.F32, T.F16, T.BF16]
LEGACY = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
KQUANTS = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
ACT_ONLY = [T.Q8_1, T.Q8_K]
ALL = FLOAT_TYPES + LEGACY + ACT_ONLY + KQUANTS
WEIGHTS = FLOAT_TYPES + LEGACY + KQUANTS  # types with a dot kernel
GGUF_DEQUANT = FLOAT_TYPES + LEGACY + KQUANTS  # the gguf package decodes these
GGUF_QUANT = [T.F16, T.BF16] + LEGACY  # and can encode these

# Byte offsets of the fp16 scale fields inside one block.
FP16_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0], T.Q8_1: [0, 2],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}

VEC_DOT_TYPE = {
    T.F32: T.F32, T.F16: T.F16, T.BF16: T.BF16,
    T.Q4_0: T.Q8_0, T.Q5_0: T.Q8_0, T.Q8_0: T.Q8_0, T.Q4_1: T.Q8_1, T.Q5_1: T.Q8_1,
    T.Q2_K: T.Q8_K, T.Q3_K: T.Q8_K, T.Q4_K: T.Q8_K, T.Q5_K: T.Q8_K, T.Q6_K: T.Q8_K,
}


def ids(types):
    return [t.name for t in types]


# gguf's table still lists Q8_1 as 40 bytes (from when d and s were float32);
# ggml's block_q8_1 has been {fp16 d, fp16 s, int8 qs[32]} = 36 bytes since.
SIZES = {**GGML_QUANT_SIZES, T.Q8_1: (32, 36)}


def blck(t):
    return SIZES[t][0]


def tsize(t):
    return SIZES[t][1]


def rel_rms(y, x):
    return float(np.sqrt(np.mean((y.astype(np.float64) - x) ** 2) / np.mean(x.astype(np.float64) ** 2)))


def random_blocks(t, nblocks, rng):
    """Raw random bytes, with every fp16 scale field replaced by a finite value
    (random bits, exponent never all-ones: covers subnormal and huge scales)."""
    raw = rng.integers(0, 256, size=(nblocks, tsize(t)), dtype=np.uint8)
    for off in FP16_FIELDS[t]:
        h = rng.integers(0, 1 << 16, size=nblocks, dtype=np.uint16)
        h = np.where((h & 0x7C00) == 0x7C00, h & ~np.uint16(0x4000), h).astype(np.uint16)
        raw[:, off:off + 2] = h.view(np.uint8).reshape(nblocks, 2)
    return raw


@pytest.fixture
def rng(request):
    # a distinct, reproducible stream per test
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


# ---------------------------------------------------------------- traits

@pytest.mark.parametrize("t", ALL, ids=ids(ALL))
def test_type_info_matches_gguf(t):
    info = c.type_info(int(t))
    assert (info["blck_size"], info["type_size"]) == SIZES[t]
    assert info["name"].lower() == t.name.lower()
    assert info["is_quantized"] == (t not in FLOAT_TYPES)
    assert c.type_from_name(t.name) == int(t)
    assert c.type_from_name(t.name.lower()) == int(t)
    if t in VEC_DOT_TYPE:
        assert info["vec_dot_type"] == int(VEC_DOT_TYPE[t])
        assert info["has_vec_dot"]
    else:
        assert not info["has_vec_dot"]


# ---------------------------------------------------------------- fp16 / bf16

def test_fp16_to_fp32_exhaustive():
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    ours = c.dequantize(int(T.F16), h.view(np.uint8))
    ref = h.view(np.float16).astype(np.float32)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(ours), nan)
    assert np.array_equal(np.signbit(ours[nan]), np.signbit(ref[nan]))
    assert np.array_equal(ours[~nan].view(np.uint32), ref[~nan].view(np.uint32))  # bit-exact, incl. -0 and subnormals


def test_fp32_to_fp16_exhaustive_round_trip():
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    f = h.view(np.float16).astype(np.float32)
    back = c.quantize(int(T.F16), f).view(np.uint16)
    nan = np.isnan(f)
    assert np.array_equal(back[~nan], h[~nan])
    assert np.all(np.isnan(back[nan].view(np.float16)))


def test_fp32_to_fp16_rounding_vs_numpy(rng):
    parts = [
        rng.integers(0, 1 << 32, size=200_000, dtype=np.uint64).astype(np.uint32).view(np.float32),  # any bits
        (rng.standard_normal(50_000) * 2.0 ** rng.integers(-30, 18, 50_000)).astype(np.float32),  # fp16 range
    ]
    # exact ties: midpoints between adjacent fp16 values (normal, subnormal, at the overflow edge)
    h = np.arange(0, 0x7C00, dtype=np.uint16)
    lo = h.view(np.float16).astype(np.float64)
    hi = (h + 1).view(np.float16).astype(np.float64)
    mid = ((lo + hi) / 2).astype(np.float32)
    parts += [mid, -mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(0))]
    parts += [np.array([65504, 65519.99, 65520, 65536, 1e30, np.inf, -np.inf, 2.0 ** -25, 2.0 ** -24, 0.0, -0.0],
                       dtype=np.float32)]
    x = np.concatenate(parts).astype(np.float32)
    ours = c.quantize(int(T.F16), x).view(np.uint16)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    nan = np.isnan(x)
    assert np.array_equal(ours[~nan], ref[~nan])
    assert np.all(np.isnan(ours[nan].view(np.float16)))


def test_bf16_exhaustive_and_rounding_vs_gguf(rng):
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    ours = c.dequantize(int(T.BF16), h.view(np.uint8))
    ref = (h.astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))  # nan payloads too

    bits = rng.integers(0, 1 << 32, size=300_000, dtype=np.uint64).astype(np.uint32)
    ties = (rng.integers(0, 1 << 16, size=20_000, dtype=np.uint32) << 16) | np.uint32(0x8000)  # exact halfway
    special = np.array([0x7F800000, 0xFF800000, 0x7F800001, 0x7FC00000, 0xFFFFFFFF, 0x7F7FFFFF, 0x7F7F8000,
                        0x00008000, 0x00018000, 0x80000000, 0], dtype=np.uint32)
    x = np.concatenate([bits, ties, special]).view(np.float32)
    got = c.quantize(int(T.BF16), x).view(np.uint16)
    want = gguf.quants.quantize(x.reshape(1, -1), T.BF16).view(np.uint16).ravel()
    assert np.array_equal(got, want)


# ---------------------------------------------------------------- dequantization

@pytest.mark.parametrize("t", GGUF_DEQUANT, ids=ids(GGUF_DEQUANT))
def test_dequantize_quantized_data_matches_gguf(t, rng):
    n = 4 * max(blck(t), 256)
    x = (rng.standard_normal((3, n)) * rng.uniform(0.01, 10, (3, 1))).astype(np.float32)
    q = gguf.quants.quantize(x, t).view(np.uint8) if t in GGUF_QUANT or t == T.F32 else c.quantize(int(t), x)
    q = np.ascontiguousarray(q).reshape(3, -1)
    want = gguf.quants.dequantize(q, t).reshape(3, n)
    for r in range(3):
        got = c.dequantize(int(t), q[r], n)
        np.testing.assert_array_equal(got, want[r])


@pytest.mark.parametrize("t", LEGACY + KQUANTS, ids=ids(LEGACY + KQUANTS))
def test_dequantize_random_bytes_matches_gguf(t, rng):
    raw = random_blocks(t, 64, rng)
    want = gguf.quants.dequantize(raw, t).ravel()
    got = c.dequantize(int(t), raw.tobytes())
    assert got.shape == (64 * blck(t),)
    np.testing.assert_array_equal(got, want)


def test_dequantize_random_float_bytes(rng):
    raw = rng.integers(0, 256, size=4096, dtype=np.uint8)
    np.testing.assert_array_equal(c.dequantize(int(T.F32), raw), raw.view(np.float32))
    f16 = raw.view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(c.dequantize(int(T.F16), raw), f16)


# ---------------------------------------------------------------- quantization

def edge_rows(n, rng):
    """Rows that stress the quantizers: zeros, constants, one spike, ties, tiny and huge scales."""
    rows = [
        np.zeros(n), np.full(n, 0.75), np.full(n, -3.0),
        np.where(np.arange(n) % 37 == 0, 50.0, 0.01),
        np.round(rng.standard_normal(n) * 8) / 8,  # many exact ties
        rng.standard_normal(n) * 1e-4, rng.standard_normal(n) * 3e3,
        np.abs(rng.standard_normal(n)),  # all positive (after relu)
        -np.abs(rng.standard_normal(n)),
    ]
    return np.stack(rows).astype(np.float32)


@pytest.mark.parametrize("t", GGUF_QUANT, ids=ids(GGUF_QUANT))
@pytest.mark.parametrize("ref", [True, False])
def test_quantize_bit_exact_with_gguf(t, ref, rng):
    n = 8 * blck(t) if blck(t) > 1 else 512
    x = np.concatenate([(rng.standard_normal((6, n)) * rng.uniform(0.001, 100, (6, 1))), edge_rows(n, rng)])
    x = x.astype(np.float32)
    got = c.quantize(int(t), x, ref=ref)
    want = gguf.quants.quantize(x, t).view(np.uint8).reshape(got.shape)
    assert got.shape == (x.shape[0], n // blck(t) * tsize(t))
    np.testing.assert_array_equal(got, want)


def np_roundf(v):  # C roundf: half away from zero
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def q8_model(blocks):
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = np_roundf((blocks * inv).astype(np.float32)).astype(np.int8)
    return d.ravel(), q


@pytest.mark.parametrize("ref", [True, False])
def test_quantize_q8_1_model(ref, rng):
    x = np.concatenate([rng.standard_normal((4, 256)) * 3, edge_rows(256, rng)]).astype(np.float32)
    got = c.quantize(int(T.Q8_1), x, ref=ref).reshape(-1, 36)
    d, q = q8_model(x.reshape(-1, 32))
    np.testing.assert_array_equal(got[:, 0:2].copy().view(np.float16).ravel(), d.astype(np.float16))
    np.testing.assert_array_equal(got[:, 4:].view(np.int8), q)
    s = (d * q.astype(np.int32).sum(axis=1).astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(got[:, 2:4].copy().view(np.float16).ravel(), s)


@pytest.mark.parametrize("ref", [True, False])
def test_quantize_q8_K_model(ref, rng):
    x = np.concatenate([rng.standard_normal((4, 512)) * 3, edge_rows(512, rng)]).astype(np.float32)
    got = c.quantize(int(T.Q8_K), x, ref=ref).reshape(-1, 292)
    d, q = q8_model(x.reshape(-1, 256))
    np.testing.assert_array_equal(got[:, 0:4].copy().view(np.float32).ravel(), d)
    np.testing.assert_array_equal(got[:, 4:260].view(np.int8), q)
    bsums = q.astype(np.int16).reshape(-1, 16, 16).sum(axis=2)
    np.testing.assert_array_equal(got[:, 260:].copy().view(np.int16), bsums)
    # and the decoder agrees with the model
    np.testing.assert_array_equal(c.dequantize(int(T.Q8_K), got.tobytes()),
                                  (d[:, None] * q.astype(np.float32)).ravel())


# Upper bounds on the relative RMS round-trip error of Gaussian data, and the
# gguf-quantized legacy type each K-quant must beat (same or fewer bits).
K_BOUNDS = {T.Q2_K: (0.30, None), T.Q3_K: (0.16, None), T.Q4_K: (0.078, T.Q4_0),
            T.Q5_K: (0.040, T.Q5_0), T.Q6_K: (0.019, None)}


@pytest.mark.parametrize("t", KQUANTS, ids=ids(KQUANTS))
def test_kquant_round_trip_error(t, rng):
    x = (rng.standard_normal((16, 1024)) * rng.uniform(0.01, 10, (16, 1))).astype(np.float32)
    q = c.quantize(int(t), x, ref=True)
    assert q.shape == (16, 4 * tsize(t))
    y = c.dequantize(int(t), q).reshape(x.shape)
    err = rel_rms(y, x)
    bound, legacy = K_BOUNDS[t]
    assert err < bound, f"{t.name} relative rms {err:.4f} >= {bound}"
    if legacy is not None:
        yl = gguf.quants.dequantize(gguf.quants.quantize(x, legacy), legacy)
        assert err <= rel_rms(yl, x), f"{t.name} worse than gguf {legacy.name}"
    # Q6_K has 6.56 bits per weight: it must beat gguf's 5.5-bit Q5_0 by a wide margin
    if t == T.Q6_K:
        y5 = gguf.quants.dequantize(gguf.quants.quantize(x, T.Q5_0), T.Q5_0)
        assert err < 0.6 * rel_rms(y5, x)


@pytest.mark.parametrize("t", KQUANTS, ids=ids(KQUANTS))
def test_kquant_edge_rows(t, rng):
    x = edge_rows(512, rng)
    y = c.dequantize(int(t), c.quantize(int(t), x, ref=True)).reshape(x.shape)
    assert np.all(np.isfinite(y))
    np.testing.assert_array_equal(y[0], 0.0)  # zeros stay zeros
    bound = 2 * K_BOUNDS[t][0]
    for r in range(1, x.shape[0]):
        assert rel_rms(y[r], x[r]) < bound, f"row {r}"
    # data so small that the fp16 super-block scales are subnormal: coarse, but not lost
    x = (rng.standard_normal((2, 512)) * 1e-6).astype(np.float32)
    y = c.dequantize(int(t), c.quantize(int(t), x, ref=True)).reshape(x.shape)
    assert rel_rms(y, x) < 0.5
    # heavy-tailed data: each super-block's outlier must not wreck the rest
    x = (rng.standard_t(3, (4, 1024))).astype(np.float32)
    y = c.dequantize(int(t), c.quantize(int(t), x, ref=True)).reshape(x.shape)
    assert rel_rms(y, x) < bound


@pytest.mark.parametrize("t", [T.Q2_K, T.Q4_K, T.Q5_K])
def test_kquant_decode_agrees_with_gguf_on_edge_rows(t, rng):
    q = c.quantize(int(t), edge_rows(512, rng), ref=True)
    np.testing.assert_array_equal(c.dequantize(int(t), q.tobytes()), gguf.quants.dequantize(q, t).ravel())


@pytest.mark.parametrize("t", ALL, ids=ids(ALL))
def test_quantize_fast_path_not_worse_than_ref(t, rng):
    n = 4 * max(blck(t), 64)
    x = rng.standard_normal((4, n)).astype(np.float32)
    e_ref = rel_rms(c.dequantize(int(t), c.quantize(int(t), x, ref=True)).reshape(x.shape), x)
    e_fast = rel_rms(c.dequantize(int(t), c.quantize(int(t), x, ref=False)).reshape(x.shape), x)
    assert e_fast <= e_ref * 1.05 + 1e-7


# ---------------------------------------------------------------- dot products

def dot_operands(t, n, rng, raw_weights):
    at = VEC_DOT_TYPE[t]
    if raw_weights and t in FP16_FIELDS:
        w = random_blocks(t, n // blck(t), rng).tobytes()
        # keep the sums in a sane range: scale fields are random bits otherwise
    else:
        w = c.quantize(int(t), rng.standard_normal(n).astype(np.float32)).tobytes()
    a = c.quantize(int(at), (rng.standard_normal(n) * 2).astype(np.float32)).tobytes()
    return w, a


def dot_reference(t, w, a, n):
    wf = c.dequantize(int(t), w, n).astype(np.float64)
    af = c.dequantize(int(VEC_DOT_TYPE[t]), a, n).astype(np.float64)
    return float(np.dot(wf, af)), float(np.abs(wf * af).sum())


@pytest.mark.parametrize("t", WEIGHTS, ids=ids(WEIGHTS))
@pytest.mark.parametrize("raw", [False, True], ids=["quantized", "raw-bytes"])
def test_vec_dot_ref_vs_float64(t, raw, rng):
    for nblk in (1, 3, 8):
        n = nblk * max(blck(t), 32)
        w, a = dot_operands(t, n, rng, raw)
        exact, mag = dot_reference(t, w, a, n)
        got = c.vec_dot(int(t), w, a, n, ref=True)
        # per-block float scaling and float accumulation: a few ulps of the magnitude
        assert abs(got - exact) <= 2e-6 * mag + 1e-30, (n, got, exact)


@pytest.mark.parametrize("t", WEIGHTS, ids=ids(WEIGHTS))
def test_vec_dot_fast_matches_ref(t, rng):
    n = 8 * max(blck(t), 32)
    for raw in (False, True):
        w, a = dot_operands(t, n, rng, raw)
        exact, mag = dot_reference(t, w, a, n)
        ref = c.vec_dot(int(t), w, a, n, ref=True)
        fast = c.vec_dot(int(t), w, a, n)
        assert abs(fast - ref) <= 1e-5 * mag + 1e-30
        c.force_scalar(True)
        try:
            assert c.cpu_backend_name() == "scalar"
            scalar = c.vec_dot(int(t), w, a, n)
        finally:
            c.force_scalar(False)
        assert scalar == ref


def test_vec_dot_f32_exact_small():
    w = np.array([1.5, -2.0, 0.25, 4.0], dtype=np.float32)
    a = np.array([2.0, 0.5, -8.0, 1.0], dtype=np.float32)
    assert c.vec_dot(int(T.F32), w.tobytes(), a.tobytes(), 4, ref=True) == pytest.approx(3.0 - 1.0 - 2.0 + 4.0, abs=0)


# ---------------------------------------------------------------- argument validation

def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown tensor type"):
        c.type_info(4)  # reserved id
    with pytest.raises(ValueError, match="unknown tensor type"):
        c.type_info(99)
    with pytest.raises(ValueError, match="unknown tensor type"):
        c.type_info(-1)
    with pytest.raises(ValueError, match="unknown tensor type name"):
        c.type_from_name("q9_9")
    with pytest.raises(ValueError, match="multiple of the q4_K block size"):
        c.dequantize(int(T.Q4_K), bytes(144), 100)
    with pytest.raises(ValueError, match="take 144 bytes, got 143"):
        c.dequantize(int(T.Q4_K), bytes(143), 256)
    with pytest.raises(ValueError, match="whole number"):
        c.dequantize(int(T.Q4_K), bytes(143))
    with pytest.raises(ValueError, match="uint8"):
        c.dequantize(int(T.Q4_0), np.zeros(18, dtype=np.float32), 32)
    with pytest.raises(ValueError, match="multiple of the q4_0 block size"):
        c.quantize(int(T.Q4_0), np.zeros((2, 48), dtype=np.float32))
    with pytest.raises(ValueError, match="1-D or 2-D"):
        c.quantize(int(T.Q4_0), np.zeros((2, 2, 32), dtype=np.float32))
    with pytest.raises(ValueError, match="no quantizer"):
        c.quantize(int(T.I32), np.zeros(4, dtype=np.float32))
    with pytest.raises(ValueError, match="no dot kernel"):
        c.vec_dot(int(T.Q8_K), bytes(292), bytes(292), 256)
    with pytest.raises(ValueError, match="act: 256 q8_K elements take 292 bytes, got 34"):
        c.vec_dot(int(T.Q4_K), bytes(144), bytes(34), 256)
    with pytest.raises(ValueError, match="weight"):
        c.vec_dot(int(T.Q4_0), bytes(17), bytes(34), 32)
    with pytest.raises(ValueError, match="multiple"):
        c.vec_dot(int(T.Q4_0), bytes(18), bytes(34), 31)


def test_quantize_accepts_float64_and_1d(rng):
    x = rng.standard_normal(64)
    a = c.quantize(int(T.Q8_0), x)
    b = c.quantize(int(T.Q8_0), x.astype(np.float32))
    assert a.shape == (68,) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, b)
