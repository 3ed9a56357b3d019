"""The compiled Q4_1 x Q8_1 kernel (solutions.system.kernels.native) against its readable reference (solutions.system.kernels.q8_1),
and that reference against the plain fp32 product of the dequantized matrix. The kernel reads the
weights tiled (q8_1.repack); the reference reads the file's blocks.

Oracles: solutions.system.kernels.q8_1 (torch ops, exact integer block sums) and, for it, x @ dequantize_q4_1(W).T
in fp64 (bit-exact dequantizer, test_weights.py), from which int8 activations may move a product by
about 1% of its scale. Each instruction set this CPU runs is tested, the AVX2 floor included, and
the floor is also forced the way a CPU without VNNI would take it (DOJO_Q8_ISA).
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

from solutions.int4 import dequantize_q4_1, quantize_q4_1
from solutions.system.kernels import native, q8_1
from solutions.system.kernels.weight_modes import Q4Q8Linear


def q4_1_weight(n: int, k: int, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """Random Q4_1 blocks (N, K / 32 * 20) and the fp32 matrix they hold."""
    w = np.random.default_rng(seed).normal(scale=0.05, size=(n, k)).astype(np.float32)
    blocks = quantize_q4_1(w)
    return torch.from_numpy(blocks), dequantize_q4_1(blocks, (n, k))


def scale(x: torch.Tensor, w: np.ndarray) -> float:
    """The size of a product's terms: max over outputs of sum |x_j w_j|."""
    return float((x.abs().double() @ torch.from_numpy(np.abs(w)).double().T).max())


def test_quantizers_agree_bit_for_bit(kernel):
    """Each of the kernel's Q8_1 quantizers (the readable one and each instruction set's vectorized
    one) gives the reference's q, d and s exactly, all-zero blocks, tiny scales and ties included;
    with the residual pass, its q, lo, d and s too."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 96, generator=gen) * torch.rand(5, 96, generator=gen) * 3
    x[1, 32:64] = 0  # a block with no scale
    x[3, 64:96] = 1e-30  # a scale near the bottom of fp32
    x[2, 5] = 0.5 * x[2, :32].abs().max() / 127 * 2  # ties are rounded half to even by both
    for residual, want, names in (
        (False, q8_1.quantize_q8_1(x), "q d s"),
        (True, q8_1.quantize_q8_1_residual(x), "q lo d s"),
    ):
        for isa in ("readable", *kernel.isas):
            for got, exp, what in zip(kernel.module.quantize(x, residual, isa), want, names.split()):
                assert torch.equal(got, exp), (
                    f"{isa}: {what} (residual {residual}) differs from the reference at "
                    f"{(got != exp).nonzero()[:3].tolist()}"
                )


@pytest.mark.parametrize("n", [1, 16, 37])
def test_repack_is_a_permutation_of_the_blocks(n):
    """q8_1.repack puts each byte of the file's blocks where the kernel reads it (tile t, block b: 16
    rows' d, their m, then 4 groups of each row's 4 code bytes) and q8_1.unpack gives them back;
    a last tile's missing rows are zero blocks."""
    blocks = torch.randint(0, 256, (n, 3 * 20), dtype=torch.uint8, generator=torch.Generator().manual_seed(n))
    tiles = q8_1.repack(blocks)
    assert tiles.shape == (-(-n // 16), 3, 320)
    assert torch.equal(q8_1.unpack(tiles, n), blocks)
    row, b = n - 1, 2  # the last row's last block
    t, r = divmod(row, 16)
    blk = blocks[row, b * 20 : (b + 1) * 20]
    assert torch.equal(tiles[t, b, 2 * r : 2 * r + 2], blk[0:2]) and torch.equal(
        tiles[t, b, 32 + 2 * r : 34 + 2 * r], blk[2:4]
    )
    for g in range(4):
        assert torch.equal(tiles[t, b, 64 + 64 * g + 4 * r : 68 + 64 * g + 4 * r], blk[4 + 4 * g : 8 + 4 * g])
    if n % 16:
        assert not tiles[-1, :, 2 * (n % 16) : 32].any(), "the padding rows are not zero blocks"
    with pytest.raises(ValueError, match="rows"):
        q8_1.unpack(tiles, 16 * tiles.shape[0] + 1)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("rows", [1, 3, 8, 11])
@pytest.mark.parametrize("n,k", [(1, 32), (7, 96), (100, 576), (33, 1536)])
def test_kernel_is_the_reference(kernel, rows, n, k, residual):
    """On every instruction set this CPU runs, the kernel's product is the reference's up to fp32
    summation order: random shapes, K an odd number of blocks, one output row, a last tile of 1-15
    rows, 1-8 rows (11: a prefill taken 8 at a time), with and without the residual pass."""
    blocks, w = q4_1_weight(n, k, seed=rows * n + k)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(k))
    want = q8_1.matmul(x, blocks, residual)
    for isa in kernel.isas:
        got = kernel.matmul(x, q8_1.repack(blocks), n, isa, residual)
        err = float((got - want).abs().max()) / scale(x, w)
        assert got.shape == (rows, n) and err < 1e-6, (
            f"{isa}, x ({rows}, {k}) @ W ({n}, {k}), residual {residual}: "
            f"off the reference by {err:.2e} of the terms' size"
        )


def test_reference_is_the_dequantized_product():
    """q8_1.matmul is x @ W.T for W the Q4_1 matrix, up to int8 rounding of x (under 1% of the scale;
    with the residual pass, under 0.01%)."""
    blocks, w = q4_1_weight(64, 320, seed=1)
    x = torch.randn(3, 320, generator=torch.Generator().manual_seed(1))
    exact = x.double() @ torch.from_numpy(w).double().T
    for residual, bound in ((False, 1e-2), (True, 1e-4)):
        err = float((q8_1.matmul(x, blocks, residual).double() - exact).abs().max()) / scale(x, w)
        assert 0 < err < bound, f"residual {residual}: the product is off fp64 by {err:.2e} of its scale"


GGUF_TENSORS = ("blk.0.attn_q.weight", "blk.14.ffn_down.weight", "blk.29.ffn_gate.weight")


@pytest.fixture(scope="module")
def gguf_blocks(smollm2_reader) -> dict[str, torch.Tensor]:
    """A few of SmolLM2's Q4_1 matrices as block rows (N, K / 32 * 20), from the session's parsed file."""
    tensors = {t.name: t for t in smollm2_reader.tensors}
    return {
        name: torch.from_numpy(
            np.asarray(tensors[name].data).reshape(int(tensors[name].shape[-1]), -1).copy()
        )
        for name in GGUF_TENSORS
    }


@pytest.mark.parametrize("name", GGUF_TENSORS)
def test_the_gguf_tensors(kernel, gguf_blocks, name):
    """SmolLM2's own Q4_1 matrices, batch 1 and 4, and with the residual pass: the kernel is the
    reference, the reference the dequantized product to 1% of its scale."""
    blocks = gguf_blocks[name]
    n, k = blocks.shape[0], blocks.shape[1] // 20 * 32
    w = dequantize_q4_1(blocks.numpy(), (n, k))
    for rows, residual in ((1, False), (4, False), (1, True)):
        x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
        want = q8_1.matmul(x, blocks, residual)
        got = kernel.matmul(x, q8_1.repack(blocks), n, residual=residual)
        kernel_err = float((got - want).abs().max()) / scale(x, w)
        exact = x.double() @ torch.from_numpy(w).double().T
        ref_err = float((want.double() - exact).abs().max()) / scale(x, w)
        assert kernel_err < 1e-6 and ref_err < 1e-2, (
            f"{name}, {rows} rows: kernel off the reference by {kernel_err:.2e}, reference off fp64 by {ref_err:.2e}"
        )


def test_forced_avx2_path(monkeypatch):
    """DOJO_Q8_ISA=avx2 runs the floor, as a CPU without VNNI would; a set the CPU lacks means no
    kernel (the readable path), with the reason named; Q4Q8Linear gives the same product either way."""
    blocks, _ = q4_1_weight(40, 96, seed=2)
    x = torch.randn(2, 96, generator=torch.Generator().manual_seed(2))
    try:
        monkeypatch.setenv(native.ISA_ENV, "avx2")
        native._load.cache_clear()
        k = native.kernel()
        if k is None:
            assert "AVX2" in native.why_not() or "x86-64" in native.why_not(), native.why_not()
        else:
            assert k.isa == "avx2" and "avx2 (forced by DOJO_Q8_ISA)" in native.describe()
            for residual in (False, True):
                lin = Q4Q8Linear.from_blocks(blocks, residual)
                torch.testing.assert_close(lin(x), q8_1.matmul(x, blocks, residual), rtol=1e-5, atol=1e-5)
        monkeypatch.setenv(native.ISA_ENV, "sse9")
        native._load.cache_clear()
        assert native.kernel() is None and "sse9" in native.why_not()
        lin = Q4Q8Linear.from_blocks(blocks, residual=True)
        assert lin.kernel is None and "readable torch path" in native.describe()
        assert torch.equal(lin(x[None]), q8_1.matmul(x, blocks, True)[None]), (
            "the fallback is not the reference"
        )
    finally:
        monkeypatch.delenv(native.ISA_ENV)
        native._load.cache_clear()


def test_prefetch_distance_changes_no_result(kernel):
    """The prefetch distance (measured at load, solutions.system.kernels.fused_step) only moves memory traffic: the
    product is bit for bit the same at 0, 3 and 4096 tile-blocks ahead (past the weights' end), and
    a distance out of range is refused."""
    blocks, _ = q4_1_weight(100, 576, seed=4)
    tiles, x = q8_1.repack(blocks), torch.randn(2, 576, generator=torch.Generator().manual_seed(4))
    before = kernel.module.prefetch()
    try:
        results = []
        for distance in (0, 3, 4096):
            kernel.module.set_prefetch(distance)
            results.append(kernel.matmul(x, tiles, 100, residual=True))
        assert all(torch.equal(results[0], r) for r in results[1:])
        with pytest.raises(RuntimeError, match="0..4096"):
            kernel.module.set_prefetch(-1)
    finally:
        kernel.module.set_prefetch(before)


def test_the_build_holds_its_prefetches(kernel):
    """The compiled tile loops and paged attention of every instruction set hold prefetch
    instructions. GCC 12 at -O3 once dropped every `_mm_prefetch` in this file, and each calibrated
    distance then ran as 0 without a test noticing (docs/serving.md); objdump comes with binutils,
    which the kernel's build needs."""
    objdump = shutil.which("objdump")
    assert objdump, "objdump (binutils, which builds the kernel) is not on PATH"
    listing = subprocess.run(
        [objdump, "-d", "-C", "--no-show-raw-insn", str(native.built_path())],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # (instruction set, "tiles" or "attend") -> prefetch instructions in its functions: the tile loops,
    # and the attention's, wherever the compiler left attend_row_at (its own function or inlined)
    prefetches: dict[tuple[str, str], int] = {}
    where = None
    for line in listing.splitlines():
        if found := re.match(r"[0-9a-f]+ <.*?\(anonymous namespace\)::(\w+)::(tiles(?=<)|attend)", line):
            where = found.groups()
            prefetches.setdefault(where, 0)
        elif line.endswith(">:"):
            where = None
        elif where and "prefetcht0" in line:
            prefetches[where] += 1
    isas = {isa for isa, _ in prefetches}
    assert kernel.isa in isas, f"no tile loop of {kernel.isa} found in the build's disassembly"
    for isa in isas:
        for loop, what in (("tiles", "tile loops"), ("attend", "attention")):
            assert prefetches.get((isa, loop)), f"{isa}'s {what} hold no prefetch instruction"


@pytest.mark.parametrize("residual", [False, True])
def test_weight_streams_change_no_result(kernel, residual):
    """How many weight streams a thread reads side by side (measured at load, solutions.system.kernels.streams)
    only orders the tiles: at every row count 1-8 and every choice it offers (1, 2 or 4 with streams x
    rows <= 8), on every instruction set, the product is bit for bit the one-stream product, over 19
    tiles (runs that do not divide a thread's share evenly); a choice it does not offer is refused."""
    blocks, _ = q4_1_weight(300, 96, seed=6)
    tiles = q8_1.repack(blocks)
    before = {rows: kernel.module.streams(rows) for rows in range(1, 9)}
    try:
        for rows in range(1, 9):
            x = torch.randn(rows, 96, generator=torch.Generator().manual_seed(rows))
            choices = kernel.module.stream_choices(rows)
            assert choices == [p for p in (1, 2, 4) if p * rows <= 8], f"{rows} rows offer {choices}"
            for isa in kernel.isas:
                kernel.module.set_streams(rows, 1)
                one = kernel.matmul(x, tiles, 300, isa, residual)
                for streams in choices[1:]:
                    kernel.module.set_streams(rows, streams)
                    got = kernel.matmul(x, tiles, 300, isa, residual)
                    assert kernel.module.streams(rows) == streams and torch.equal(got, one), (
                        f"{isa}, {rows} rows, residual {residual}: {streams} weight streams change the product"
                    )
        with pytest.raises(RuntimeError, match="1, 2 or 4 streams"):
            kernel.module.set_streams(3, 4)
        with pytest.raises(RuntimeError, match="rows must be 1..8"):
            kernel.module.set_streams(9, 1)
    finally:
        for rows, streams in before.items():
            kernel.module.set_streams(rows, streams)


def test_roof_is_a_rate_and_checks_its_arguments(kernel):
    """The tile loop's compute roof (benchmarks/batch_roof.py reads it) is a positive, finite rate of
    block sums on every instruction set this CPU runs; a duration outside (0, 10] s is refused."""
    for isa in kernel.isas:
        rate = kernel.module.roof(isa, 0.02)
        assert math.isfinite(rate) and rate > 1e6, f"{isa}: the roof is {rate} block sums a second"
    for seconds in (0, -1, 11):
        with pytest.raises(RuntimeError, match=r"seconds must be in \(0, 10\]"):
            kernel.module.roof(kernel.isa, seconds)


def test_bad_operands_are_clear_errors(kernel):
    """A weight of another K, a row count the tiles cannot hold, untiled blocks, or int8 activations
    are refused with the mismatch named."""
    blocks, _ = q4_1_weight(4, 64, seed=3)
    tiles = q8_1.repack(blocks)
    with pytest.raises(RuntimeError, match="96 columns, but the weight's K is 64"):
        kernel.matmul(torch.randn(1, 96), tiles, 4)
    with pytest.raises(RuntimeError, match="hold 1..16 rows, not 17"):
        kernel.matmul(torch.randn(1, 64), tiles, 17)
    with pytest.raises(RuntimeError, match="repack"):
        kernel.matmul(torch.randn(1, 64), blocks, 4)
    with pytest.raises(RuntimeError, match="fp32"):
        kernel.matmul(torch.ones(1, 64, dtype=torch.int8), tiles, 4)
    with pytest.raises(ValueError, match=r"\(M, 64\)"):
        q8_1.matmul(torch.randn(1, 96), blocks)
    with pytest.raises(ValueError, match="uint8"):
        Q4Q8Linear(tiles.float(), 4)
    with pytest.raises(ValueError, match="cannot hold 17 rows"):
        Q4Q8Linear(tiles, 17)
