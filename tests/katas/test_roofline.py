"""Hidden suite for the roofline kata: count a Llama pass, measure the ceilings, place the phases.

Counting checks are exact, against SmolLM2-135M numbers worked out by hand below and against an
oracle that counts from a real model's parameter shapes. Measurement checks run at ONE thread
(fixed by the `one_thread` fixture) and compare the kata side by side with a plain timing loop
written here, on small arrays, so they are fair to any torch implementation and stay quick.
The model under measurement is the reference (solutions.model): tiny for the bookkeeping, a
SmolLM2-shaped random model (538 MB) for the physics.
"""

from __future__ import annotations

import itertools
import statistics
import time
from pathlib import Path

import pytest
import torch

from dojo.testing import expect_value_error
from solutions.model import Llama, LlamaConfig, tiny_model
from solutions.model import smollm2_shaped as model_of_smollm2_shape  # the fixture below takes the name

KATA = "roofline"

SMOL = LlamaConfig.smollm2_135m()
MB = 1e6

# --------------------------------------------------------------------------- SmolLM2 by hand
# Per layer, matmul weights: q 576*576 + k 576*192 + v 576*192 + o 576*576
#   + gate/up/down 3 * 576*1536 = 331,776 + 110,592 + 110,592 + 331,776 + 2,654,208 = 3,538,944.
# 30 layers: 106,168,320; LM head = the tied embedding, 49152*576 = 28,311,552.
MATMUL_PARAMS = 134_479_872
# Norms: 2 per layer + the final one, 61 * 576 = 35,136. All parameters: 134,515,008.
PARAMS = 134_515_008
WEIGHT_BYTES_FP32 = 538_060_032  # 4 * PARAMS: every weight read once per pass
ROW = 576 * 4  # one embedding row looked up per new token, fp32
KV_PER_POSITION = 30 * 2 * 192 * 4  # 46,080 bytes: K and V of 3 heads x 64 dims, every layer
ATTN_FLOPS_PER_PAIR = 30 * 9 * 4 * 64  # 69,120: QK^T and AV, 9 query heads, every layer

# decode, batch 1, empty cache: weights + 1 row + KV written (1 position) + KV read (1 position)
DECODE_B1_BYTES = WEIGHT_BYTES_FP32 + ROW + 2 * KV_PER_POSITION  # 538,154,496
DECODE_B1_FLOPS = 2 * MATMUL_PARAMS + ATTN_FLOPS_PER_PAIR  # 269,028,864
# decode, batch 1, 512 cached: reads K and V of 513 positions
DECODE_CTX512_BYTES = WEIGHT_BYTES_FP32 + ROW + KV_PER_POSITION + 513 * KV_PER_POSITION  # 561,747,456
DECODE_CTX512_FLOPS = 2 * MATMUL_PARAMS + 513 * ATTN_FLOPS_PER_PAIR  # 304,418,304
# prefill of 512 tokens, batch 1: 512 rows, 512 positions written and read, 512 x 512 pairs
PREFILL512_BYTES = WEIGHT_BYTES_FP32 + 512 * ROW + 2 * 512 * KV_PER_POSITION  # 586,425,600
PREFILL512_FLOPS = 2 * 512 * MATMUL_PARAMS + 512 * 512 * ATTN_FLOPS_PER_PAIR  # 155,826,782,208
# decode, batch 8, empty cache: the weights once, everything per row times 8
DECODE_B8_BYTES = WEIGHT_BYTES_FP32 + 8 * (ROW + 2 * KV_PER_POSITION)  # 538,815,744
DECODE_B8_FLOPS = 8 * DECODE_B1_FLOPS  # 2,152,230,912

# Example ceilings: roughly one core of the machine the kata was written on.
PEAK, BANDWIDTH = 1.5e11, 1.2e10  # FLOP/s, bytes/s: ridge 12.5 FLOP/byte


def cost_of(kata, *args, **kwargs) -> tuple[int, int]:
    cost = kata.phase_cost(*args, **kwargs)
    return cost.flops, cost.bytes


# --------------------------------------------------------------------------- counting

@pytest.mark.example
@pytest.mark.points(3)
def test_decode_reads_every_weight_once(kata):
    """Decode at batch 1 reads every weight once: 538 MB of SmolLM2 in fp32, plus one embedding row and the KV cache"""
    got = cost_of(kata, SMOL, "decode", batch=1, seq_len=1, context_len=0, dtype=torch.float32)
    want = (DECODE_B1_FLOPS, DECODE_B1_BYTES)
    assert got == want, (
        f"phase_cost(SmolLM2, 'decode', batch=1, context_len=0) = (flops, bytes) {got}, want {want}: "
        f"{PARAMS:,} weights x 4 bytes (the LM head reads the whole tied embedding) + one 576-float "
        f"row + K and V of one position written and read; 2 FLOPs per matmul weight + attention")


@pytest.mark.points(2)
def test_decode_counts_kv_cache_reads(kata):
    """A decode step reads K and V of every cached position: 46,080 bytes per position for SmolLM2"""
    got = cost_of(kata, SMOL, "decode", batch=1, seq_len=1, context_len=512)
    want = (DECODE_CTX512_FLOPS, DECODE_CTX512_BYTES)
    assert got == want, (
        f"phase_cost(SmolLM2, 'decode', context_len=512) = {got}, want {want}: "
        f"513 positions x 46,080 KV bytes read, one written, and 513 keys per query head")


@pytest.mark.example
@pytest.mark.points(2)
def test_prefill_512_cost(kata):
    """Prefill of 512 tokens: 2 FLOPs per weight per token plus every query-key pair; weights read once"""
    got = cost_of(kata, SMOL, "prefill", batch=1, seq_len=512, context_len=0)
    want = (PREFILL512_FLOPS, PREFILL512_BYTES)
    assert got == want, f"phase_cost(SmolLM2, 'prefill', seq_len=512) = {got}, want {want}"


@pytest.mark.points(2)
def test_batch_shares_the_weight_read(kata):
    """A batch of 8 decodes reads the weights once and does 8 times the FLOPs"""
    got = cost_of(kata, SMOL, "decode", batch=8, seq_len=1, context_len=0)
    want = (DECODE_B8_FLOPS, DECODE_B8_BYTES)
    assert got == want, (f"phase_cost(SmolLM2, 'decode', batch=8) = {got}, want {want}: the rows of a "
                         "batch share one pass over the weights")


@pytest.mark.points(1)
def test_dtype_sets_bytes_not_flops(kata):
    """bf16 halves every byte and leaves the FLOPs alone"""
    got = cost_of(kata, SMOL, "decode", batch=1, seq_len=1, context_len=0, dtype=torch.bfloat16)
    want = (DECODE_B1_FLOPS, DECODE_B1_BYTES // 2)
    assert got == want, f"phase_cost(SmolLM2, 'decode', dtype=bfloat16) = {got}, want {want}"


def oracle_cost(config: LlamaConfig, batch: int, seq_len: int, context_len: int, size: int) -> tuple[int, int]:
    """Count from a real model's parameters: matrices do 2 FLOPs per weight per token; all read once."""
    model = Llama(config)  # uninitialised weights: only shapes matter
    flops = nbytes = 0
    for p in model.parameters():  # the tied embedding appears once
        nbytes += p.numel() * size
        if p.dim() == 2:
            flops += 2 * batch * seq_len * p.numel()
    nbytes += batch * seq_len * config.d_model * size  # embedding lookup: one row per new token
    kv_dim = config.n_kv_heads * config.head_dim
    for _layer in range(config.n_layers):
        for _row in range(batch):
            nbytes += seq_len * 2 * kv_dim * size  # write new K, V
            nbytes += (context_len + seq_len) * 2 * kv_dim * size  # read all K, V
            for _head in range(config.n_heads):
                pairs = seq_len * (context_len + seq_len)
                flops += 2 * pairs * config.head_dim + 2 * pairs * config.head_dim  # QK^T, AV
    return flops, nbytes


@pytest.mark.points(2)
@pytest.mark.parametrize("overrides, phase, batch, seq_len, context_len", [
    ({}, "prefill", 1, 7, 0),
    ({}, "decode", 3, 1, 10),
    ({"n_heads": 8, "n_kv_heads": 2, "d_model": 128, "d_ff": 96, "n_layers": 3, "vocab_size": 100}, "prefill", 2, 5, 4),
    ({"n_heads": 6, "n_kv_heads": 6, "d_model": 48, "n_layers": 1}, "decode", 1, 1, 30),
])
def test_cost_matches_parameter_count(kata, overrides, phase, batch, seq_len, context_len):
    """Any Llama config: bytes and FLOPs match a count over the model's own parameters"""
    config = LlamaConfig.tiny(**overrides)
    got = cost_of(kata, config, phase, batch=batch, seq_len=seq_len, context_len=context_len)
    want = oracle_cost(config, batch, seq_len, context_len, size=4)
    assert got == want, (f"phase_cost({overrides or 'tiny'}, {phase!r}, batch={batch}, seq_len={seq_len}, "
                         f"context_len={context_len}) = {got}, want {want}")


@pytest.mark.points(2)
def test_prefill_intensity_grows_with_tokens(kata):
    """Prefill intensity grows with the number of tokens: each weight read serves every token"""
    ais = [kata.arithmetic_intensity(kata.phase_cost(SMOL, "prefill", 1, t, 0)) for t in (1, 8, 64, 512)]
    assert all(a < b for a, b in itertools.pairwise(ais)), f"prefill intensity at 1, 8, 64, 512 tokens: {ais}"
    assert ais[-1] > 200, f"prefill of 512 tokens: {ais[-1]:.1f} FLOP/byte, want about 266"


@pytest.mark.points(2)
def test_decode_intensity_grows_with_batch(kata):
    """Decode intensity grows with batch: about 0.5 FLOP/byte per row in fp32"""
    ais = {b: kata.arithmetic_intensity(kata.phase_cost(SMOL, "decode", b, 1, 0)) for b in (1, 2, 8, 64)}
    assert abs(ais[1] - 0.5) < 0.01, f"decode at batch 1: {ais[1]:.4f} FLOP/byte, want about 0.5"
    assert ais[8] > 7 * ais[1] and ais[64] > 50 * ais[1], (
        f"decode intensity by batch {ais}: it should grow almost in proportion, the weights are shared")


@pytest.mark.points(1)
def test_phase_cost_rejects_bad_input(kata):
    """phase_cost raises ValueError for an unknown phase and for impossible shapes"""
    cases = {
        "phase='sample'": lambda: kata.phase_cost(SMOL, "sample", 1, 1, 0),
        "decode with seq_len=2": lambda: kata.phase_cost(SMOL, "decode", 1, 2, 0),
        "batch=0": lambda: kata.phase_cost(SMOL, "prefill", 0, 4, 0),
        "seq_len=0": lambda: kata.phase_cost(SMOL, "prefill", 1, 0, 0),
        "context_len=-1": lambda: kata.phase_cost(SMOL, "decode", 1, 1, -1),
        "8192 cached + 1 new": lambda: kata.phase_cost(SMOL, "decode", 1, 1, 8192),
    }
    for what, fn in cases.items():
        expect_value_error(fn, f"phase_cost with {what}")


# --------------------------------------------------------------------------- the roofline

@pytest.mark.example
@pytest.mark.points(2)
def test_ridge_and_roof(kata):
    """Ridge = peak / bandwidth; the roof is min(peak, bandwidth x intensity)"""
    ridge = kata.ridge_point(PEAK, BANDWIDTH)
    assert ridge == pytest.approx(12.5), f"ridge_point(1.5e11, 1.2e10) = {ridge}, want 12.5"
    for ai, want in [(0.5, 6e9), (12.5, 1.5e11), (250.0, 1.5e11), (0.0, 0.0)]:
        got = kata.attainable(ai, PEAK, BANDWIDTH)
        assert got == pytest.approx(want), f"attainable({ai}, 1.5e11, 1.2e10) = {got}, want {want}"


@pytest.mark.example
@pytest.mark.points(2)
def test_decode_memory_bound_prefill_compute_bound(kata):
    """On a 12.5 FLOP/byte ridge, SmolLM2 decode is memory-bound and prefill of 512 tokens compute-bound"""
    decode = kata.arithmetic_intensity(kata.phase_cost(SMOL, "decode", 1, 1, 0))
    prefill = kata.arithmetic_intensity(kata.phase_cost(SMOL, "prefill", 1, 512, 0))
    got = (kata.bound(decode, PEAK, BANDWIDTH), kata.bound(prefill, PEAK, BANDWIDTH))
    assert got == ("memory", "compute"), f"verdicts (decode, prefill 512) = {got}, want ('memory', 'compute')"


@pytest.mark.points(1)
def test_bound_at_the_ridge_is_compute(kata):
    """Exactly at the ridge the pass is "compute"-bound; just left of it, "memory"-bound"""
    got = (kata.bound(12.5, PEAK, BANDWIDTH), kata.bound(12.499, PEAK, BANDWIDTH))
    assert got == ("compute", "memory"), f"bound(12.5), bound(12.499) on ridge 12.5 = {got}"


@pytest.mark.points(1)
def test_roofline_rejects_bad_input(kata):
    """Non-positive ceilings, negative intensity and a cost with no bytes raise ValueError"""
    cost = kata.phase_cost(SMOL, "decode", 1, 1, 0)
    cases = {
        "ridge_point(0, 1e10)": lambda: kata.ridge_point(0.0, 1e10),
        "ridge_point(1e11, -1)": lambda: kata.ridge_point(1e11, -1.0),
        "attainable(-1, ...)": lambda: kata.attainable(-1.0, PEAK, BANDWIDTH),
        "bound(1, 0, 1e10)": lambda: kata.bound(1.0, 0.0, 1e10),
        "arithmetic_intensity of 0 bytes": lambda: kata.arithmetic_intensity(type(cost)(flops=1, bytes=0)),
    }
    for what, fn in cases.items():
        expect_value_error(fn, what)


# --------------------------------------------------------------------------- measuring


def oracle_seconds(run, repeats: int = 3) -> float:
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def oracle_bandwidth(nbytes: int) -> float:
    """2 * nbytes / the median time of dst.copy_(src), on fresh arrays (as a kata's call would be)."""
    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.zeros(nbytes, dtype=torch.uint8)
    return 2 * nbytes / oracle_seconds(lambda: dst.copy_(src))


def oracle_flops(n: int) -> float:
    """2 * n**3 / the median time of an (n, n) @ (n, n) matmul."""
    a, b, out = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    return 2 * n**3 / oracle_seconds(lambda: torch.matmul(a, b, out=out))


def agrees(measure, oracle, tries: int) -> tuple[bool, float]:
    """Kata and oracle taking turns, the best of `tries` runs each: on a shared machine a run is
    only ever slowed down, so the best runs of both see the machine alike. Within 1.4x either way?"""
    got = want = 0.0
    for _ in range(tries):
        want = max(want, oracle())
        got = max(got, measure())
    ratio = got / want
    return 1 / 1.4 <= ratio <= 1.4, ratio


COPY_BYTES = 4 << 20  # small enough to be quick here; the contract's default is 4x the LLC


@pytest.mark.points(2)
def test_bandwidth_plausible(kata, one_thread):
    """measure_bandwidth returns bytes/s between 1 GB/s and 2 TB/s"""
    bw = max(kata.measure_bandwidth(nbytes=COPY_BYTES, repeats=3) for _ in range(3))  # others share the machine
    assert 1e9 < bw < 2e12, f"measure_bandwidth(4 MiB) = {bw / 1e9:.3g} GB/s, want 1 GB/s .. 2 TB/s"


@pytest.mark.points(2)
def test_bandwidth_counts_read_and_write(kata, one_thread):
    """A copy of N bytes moves 2N: N read plus N written"""
    ok, ratio = agrees(lambda: kata.measure_bandwidth(nbytes=COPY_BYTES, repeats=3),
                       lambda: oracle_bandwidth(COPY_BYTES), tries=9)
    assert ok, (f"measure_bandwidth(4 MiB) is {ratio:.2f}x a plain timing of dst.copy_(src) credited with "
                "2 x 4 MiB; near 0.5 means the copy was counted as N bytes, not N read + N written")


@pytest.mark.points(2)
def test_matmul_counts_two_flops_per_multiply_add(kata, one_thread):
    """An (n, n) @ (n, n) matmul is 2 n^3 FLOPs: a multiply and an add per term"""
    ok, ratio = agrees(lambda: kata.measure_peak_flops(n=384, repeats=3), lambda: oracle_flops(384), tries=9)
    assert ok, (f"measure_peak_flops(n=384) is {ratio:.2f}x a plain timing of a @ b credited with 2 * 384**3; "
                "near 0.5 means n**3 FLOPs were counted")


@pytest.mark.points(1)
def test_last_level_cache_from_sysfs(kata):
    """last_level_cache_bytes reads the largest cache size the kernel reports for cpu0"""
    want = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        size = (index / "size").read_text().strip() if (index / "size").exists() else ""
        if size:
            scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(size[-1], 1)
            want = max(want, int(size.rstrip("KMG")) * scale)
    got = kata.last_level_cache_bytes()
    assert got == want, f"last_level_cache_bytes() = {got}, want {want} (largest index*/size)"


@pytest.mark.points(1)
def test_measurements_reject_bad_sizes(kata):
    """measure_bandwidth and measure_peak_flops raise ValueError for sizes or repeats below 1"""
    cases = {
        "measure_bandwidth(nbytes=0)": lambda: kata.measure_bandwidth(nbytes=0),
        "measure_bandwidth(repeats=0)": lambda: kata.measure_bandwidth(nbytes=1024, repeats=0),
        "measure_peak_flops(n=0)": lambda: kata.measure_peak_flops(n=0),
        "measure_peak_flops(repeats=0)": lambda: kata.measure_peak_flops(n=8, repeats=0),
    }
    for what, fn in cases.items():
        expect_value_error(fn, what)


def spied(model):
    """The model, with every prefill / decode_step call logged: (name, ids shape, cache length, seconds)."""
    calls = []
    for name in ("prefill", "decode_step"):
        real = getattr(model, name)

        def wrapper(ids, cache, attention_mask=None, _real=real, _name=name):
            start_len, start = cache.length, time.perf_counter()
            out = _real(ids, cache, attention_mask)
            calls.append((_name, tuple(ids.shape), start_len, time.perf_counter() - start))
            return out

        object.__setattr__(model, name, wrapper)
    return model, calls


@pytest.mark.points(2)
@pytest.mark.parametrize("phase, batch, seq_len, context_len", [("decode", 2, 1, 5), ("prefill", 3, 6, 4)])
def test_measure_phase_times_the_right_pass(kata, one_thread, phase, batch, seq_len, context_len):
    """measure_phase times `repeats` passes of the phase at the given context, and reports the median of one"""
    model, calls = spied(tiny_model(seed=0))
    got = kata.measure_phase(model, phase, batch=batch, seq_len=seq_len, context_len=context_len, repeats=5)
    name, shape = ("decode_step", (batch,)) if phase == "decode" else ("prefill", (batch, seq_len))
    timed = [sec for n, s, length, sec in calls if (n, s, length) == (name, shape, context_len)]
    assert len(timed) >= 5, (f"measure_phase({phase!r}, batch={batch}, seq_len={seq_len}, "
                             f"context_len={context_len}, repeats=5) made {len(timed)} calls of {name} with "
                             f"ids {shape} on a cache holding {context_len} positions; want at least 5")
    want_cost = oracle_cost(model.config, batch, seq_len, context_len, size=4)
    assert (got.cost.flops, got.cost.bytes) == want_cost, f"measured cost {got.cost}, want {want_cost}"
    inner = statistics.median(timed)
    assert 0.7 * inner <= got.seconds <= 1.5 * inner + 2e-4, (
        f"measure_phase reports {got.seconds * 1e3:.3f} ms per pass, but the passes took a median "
        f"{inner * 1e3:.3f} ms each (total instead of median? timing the wrong thing?)")
    assert got.flops_per_s == pytest.approx(got.cost.flops / got.seconds), "flops_per_s != cost.flops / seconds"
    assert got.bytes_per_s == pytest.approx(got.cost.bytes / got.seconds), "bytes_per_s != cost.bytes / seconds"


@pytest.fixture(scope="module")
def smollm2_shaped():
    """SmolLM2's shapes with random weights (no load): 538 MB in fp32, the cost of the real thing."""
    return model_of_smollm2_shape()


@pytest.mark.points(3)
def test_decode_cannot_beat_the_bandwidth_ceiling(kata, one_thread, smollm2_shaped):
    """A decode step of a 538 MB model moves its bytes no faster than the copy bandwidth (+10%)"""
    bws = [kata.measure_bandwidth(nbytes=COPY_BYTES, repeats=5)]
    decode = kata.measure_phase(smollm2_shaped, "decode", batch=1, seq_len=1, context_len=16, repeats=3)
    bws += [kata.measure_bandwidth(nbytes=COPY_BYTES, repeats=5) for _ in range(4)]
    bw = max(bws)  # the ceiling: the best the machine did while decode ran
    assert decode.bytes_per_s <= 1.1 * bw, (
        f"decode moved {decode.bytes_per_s / 1e9:.3g} GB/s, above the measured ceiling of {bw / 1e9:.3g} GB/s: "
        "the bytes of a pass, the bandwidth, or the timing is off")
    peak = max(kata.measure_peak_flops(n=512, repeats=3) for _ in range(3))
    assert peak > 4 * bw * decode.intensity, (
        f"matmul peak {peak / 1e9:.3g} GFLOP/s is not well above bandwidth x decode intensity = "
        f"{bw * decode.intensity / 1e9:.3g} GFLOP/s")


@pytest.mark.points(2)
def test_prefill_runs_at_many_times_decode_flops(kata, one_thread, smollm2_shaped):
    """Prefill of 32 tokens achieves several times the FLOP/s of a decode step: the weights are reused"""
    decode = kata.measure_phase(smollm2_shaped, "decode", batch=1, seq_len=1, context_len=0, repeats=3)
    prefill = kata.measure_phase(smollm2_shaped, "prefill", batch=1, seq_len=32, context_len=0, repeats=2)
    ratio = prefill.flops_per_s / decode.flops_per_s
    assert ratio > 3, (f"prefill of 32 tokens: {prefill.flops_per_s / 1e9:.3g} GFLOP/s, decode: "
                       f"{decode.flops_per_s / 1e9:.3g} GFLOP/s, only {ratio:.2f}x")


# --------------------------------------------------------------------------- the plot

POINTS = {"decode": (0.5, 3e9), "prefill": (250.0, 1e11)}


def vertices(ax) -> list[tuple[float, float]]:
    """Every data-coordinate vertex drawn on the axes: line points and scatter offsets."""
    found = []
    for line in ax.get_lines():
        if line.get_transform() == ax.transData:
            found += [tuple(map(float, xy)) for xy in line.get_xydata()]
    for coll in ax.collections:
        if coll.get_offset_transform() == ax.transData:
            found += [tuple(map(float, xy)) for xy in coll.get_offsets()]
    return found


def near(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return abs(a[0] - b[0]) <= 1e-9 * abs(b[0]) and abs(a[1] - b[1]) <= 1e-9 * abs(b[1])


@pytest.fixture(scope="module")
def plotted(kata, tmp_path_factory):
    path = tmp_path_factory.mktemp("roofline") / "roofline.png"
    fig = kata.plot_roofline(POINTS, PEAK, BANDWIDTH, path)
    return fig, path


@pytest.mark.example
@pytest.mark.points(2)
def test_plot_is_a_log_log_png(plotted):
    """plot_roofline saves a valid PNG of a log-log roofline"""
    import matplotlib.image

    fig, path = plotted
    assert path.exists() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    image = matplotlib.image.imread(path)
    want = tuple(round(v) for v in fig.get_size_inches() * fig.dpi)[::-1]
    assert image.shape[:2] == want, f"PNG is {image.shape[:2]} pixels, the figure {want}: saved with a tight bbox?"
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log"), "the axes must be log-log"


@pytest.mark.points(2)
def test_plot_draws_both_ceilings_and_the_ridge(plotted):
    """The roof: the bandwidth slope left of the ridge, the flat peak right of it, the ridge marked"""
    fig, _ = plotted
    drawn = vertices(fig.axes[0])
    ridge = (12.5, PEAK)
    on_roof = [(x, y) for x, y in drawn if abs(y - min(PEAK, BANDWIDTH * x)) <= 1e-9 * y]
    assert any(near(v, ridge) for v in drawn), f"no vertex at the ridge {ridge}"
    assert any(x < 12.5 * 0.99 for x, _ in on_roof), "no vertex on the bandwidth ceiling left of the ridge"
    assert any(x > 12.5 * 1.01 for x, _ in on_roof), "no vertex on the compute ceiling right of the ridge"


@pytest.mark.points(2)
def test_plot_points_sit_where_they_should(plotted):
    """Each phase is a labelled marker at (intensity, achieved FLOP/s), visible in the PNG"""
    import matplotlib.image

    fig, path = plotted
    ax = fig.axes[0]
    drawn = vertices(ax)
    labels = {t.get_text() for t in ax.texts}
    if ax.get_legend() is not None:
        labels |= {t.get_text() for t in ax.get_legend().get_texts()}
    image = matplotlib.image.imread(path)[..., :3]
    height = image.shape[0]
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    for label, point in POINTS.items():
        assert any(near(v, point) for v in drawn), f"no marker at {label} {point}"
        assert any(label in text for text in labels), f"no text or legend entry says {label!r}"
        assert x0 < point[0] < x1 and y0 < point[1] < y1, f"{label} {point} lies outside the axes limits"
        px, py = ax.transData.transform(point)
        row, col = int(height - py + 0.5), int(px + 0.5)
        patch = image[row - 1:row + 2, col - 1:col + 2]
        assert (patch < 0.8).any(), f"the PNG is blank where {label} should be (pixel {col}, {row})"


@pytest.mark.points(1)
def test_plot_rejects_points_off_log_axes(kata, tmp_path):
    """A point with zero intensity or FLOP/s has no place on log axes: ValueError"""
    expect_value_error(lambda: kata.plot_roofline({"bad": (0.0, 1e9)}, PEAK, BANDWIDTH, tmp_path / "x.png"),
                       "plot_roofline with a point at intensity 0")
