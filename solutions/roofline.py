"""The roofline model: measure a machine's two ceilings, count a forward pass, place it under them.

A pass of F FLOPs moving B bytes has intensity I = F / B and runs no faster than min(peak FLOP/s,
bandwidth * I): below the ridge I* = peak / bandwidth it waits on memory. `phase_cost` counts every
weight read once per pass (the tied embedding in full as the LM head, plus one row per new token),
the KV cache written for the new positions and read for all of them, 2 FLOPs per multiply-add of
every matmul for each new token, and 4 * n_heads * head_dim FLOPs per (query, key) pair, masked or
not. Not counted: activation traffic, elementwise work, caches, quantized weights.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class Cost:
    """Work and memory traffic of one pass: FLOPs, and bytes read plus bytes written."""

    flops: int
    bytes: int

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.flops + other.flops, self.bytes + other.bytes)


@dataclass(frozen=True)
class Measurement:
    """One timed phase: the median seconds of a pass, and the cost it was credited with."""

    phase: str
    seconds: float
    cost: Cost

    @property
    def flops_per_s(self) -> float:
        return self.cost.flops / self.seconds

    @property
    def bytes_per_s(self) -> float:
        return self.cost.bytes / self.seconds

    @property
    def intensity(self) -> float:
        return arithmetic_intensity(self.cost)


def phase_cost(
    config,
    phase: str,
    batch: int = 1,
    seq_len: int = 1,
    context_len: int = 0,
    dtype: torch.dtype = torch.float32,
) -> Cost:
    """Cost of one pass of a Llama-style `config`, weights and KV cache stored in `dtype`.

    `seq_len` new tokens per row (the prompt for "prefill"; exactly 1 for "decode") are appended
    after `context_len` cached ones, for `batch` rows. See the module docstring for what counts.
    Raises ValueError for an unknown phase, a decode with seq_len != 1, batch or seq_len < 1,
    context_len < 0, or context_len + seq_len beyond config.max_seq_len.
    """
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    if phase == "decode" and seq_len != 1:
        raise ValueError(f"a decode step adds exactly one token per row; got seq_len={seq_len}")
    if batch < 1 or seq_len < 1 or context_len < 0:
        raise ValueError(
            f"need batch >= 1, seq_len >= 1, context_len >= 0; got {batch}, {seq_len}, {context_len}"
        )
    c = config
    if context_len + seq_len > c.max_seq_len:
        raise ValueError(f"{context_len} cached + {seq_len} new tokens exceed the context of {c.max_seq_len}")
    size = torch.empty((), dtype=dtype).element_size()
    tokens = batch * seq_len  # new tokens this pass
    keys = context_len + seq_len  # positions each query attends to
    q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    per_layer = c.d_model * (q_dim + 2 * kv_dim) + q_dim * c.d_model + 3 * c.d_model * c.d_ff
    matmul_params = c.n_layers * per_layer + c.vocab_size * c.d_model  # the LM head is the embedding
    norm_params = (2 * c.n_layers + 1) * c.d_model
    weights = Cost(
        flops=2 * tokens * matmul_params, bytes=(matmul_params + norm_params + tokens * c.d_model) * size
    )
    kv_written = batch * seq_len * 2 * kv_dim * size  # K and V, per layer
    kv_read = batch * keys * 2 * kv_dim * size
    attention = Cost(
        flops=c.n_layers * batch * c.n_heads * seq_len * keys * 4 * c.head_dim,
        bytes=c.n_layers * (kv_written + kv_read),
    )
    return weights + attention


def arithmetic_intensity(cost: Cost) -> float:
    """FLOPs per byte moved. Raises ValueError if the cost moves no bytes."""
    if cost.bytes <= 0:
        raise ValueError(f"arithmetic intensity needs a positive byte count, got {cost.bytes}")
    return cost.flops / cost.bytes


def _check_ceilings(peak_flops: float, bandwidth: float) -> None:
    if not (peak_flops > 0 and bandwidth > 0):
        raise ValueError(f"ceilings must be positive: peak_flops={peak_flops}, bandwidth={bandwidth}")


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """The intensity (FLOP/byte) where the bandwidth ceiling meets the compute ceiling."""
    _check_ceilings(peak_flops, bandwidth)
    return peak_flops / bandwidth


def attainable(ai: float, peak_flops: float, bandwidth: float) -> float:
    """The roof: min(peak_flops, bandwidth * ai) FLOP/s. Raises ValueError for ai < 0."""
    _check_ceilings(peak_flops, bandwidth)
    if ai < 0:
        raise ValueError(f"arithmetic intensity cannot be negative, got {ai}")
    return min(peak_flops, bandwidth * ai)


def bound(ai: float, peak_flops: float, bandwidth: float) -> str:
    """ "memory" left of the ridge (ai < ridge), "compute" at or right of it."""
    return "memory" if ai < ridge_point(peak_flops, bandwidth) else "compute"


def _check_repeats(repeats: int) -> None:
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")


def _median_seconds(
    run: Callable[[], object], repeats: int, device: torch.device, setup: Callable[[], object] | None = None
) -> float:
    """Median wall time of `run` over `repeats` calls, after one untimed warm-up call."""
    _check_repeats(repeats)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []
    for i in range(repeats + 1):
        if setup is not None:
            setup()
        sync()
        start = time.perf_counter()
        run()
        sync()  # subtle: CUDA calls return before the work is done
        if i:  # call 0 is the warm-up: first-touch page faults, allocator, lazy init
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def last_level_cache_bytes() -> int:
    """Size of the largest CPU cache, from /sys/devices/system/cpu/cpu0/cache (0 if unreadable)."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        value = int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
        best = max(best, value)
    return best


def measure_bandwidth(
    nbytes: int | None = None, repeats: int = 5, device: str | torch.device = "cpu"
) -> float:
    """Bytes/s of copying one `nbytes` array into another, counting bytes read plus bytes written.

    nbytes defaults to 4x the last-level cache (1 GiB if that is unknown, or on a GPU) so the
    copy streams from memory. Both arrays are written before timing (no first-touch page faults);
    the result is 2 * nbytes / the median of `repeats` timed copies after a warm-up copy.
    Runs at torch's current thread count. Raises ValueError for nbytes or repeats < 1.
    """
    _check_repeats(repeats)
    device = torch.device(device)
    if nbytes is None:
        llc = last_level_cache_bytes() if device.type == "cpu" else 0
        nbytes = 4 * llc if llc else 1 << 30
    if nbytes < 1:
        raise ValueError(f"nbytes must be >= 1, got {nbytes}")
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.zeros(nbytes, dtype=torch.uint8, device=device)
    seconds = _median_seconds(lambda: dst.copy_(src), repeats, device)
    return 2 * nbytes / seconds


def measure_peak_flops(
    n: int = 2048, dtype: torch.dtype = torch.float32, repeats: int = 5, device: str | torch.device = "cpu"
) -> float:
    """FLOP/s of an (n, n) @ (n, n) matmul in `dtype`: 2 * n**3 / the median of `repeats` timings.

    Warmed up by one untimed matmul; runs at torch's current thread count.
    Raises ValueError for n or repeats < 1.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    _check_repeats(repeats)
    device = torch.device(device)
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device, dtype)
    b = torch.randn(n, n, generator=gen).to(device, dtype)
    out = torch.empty(n, n, dtype=dtype, device=device)
    seconds = _median_seconds(lambda: torch.matmul(a, b, out=out), repeats, device)
    return 2 * n**3 / seconds


def measure_phase(
    model, phase: str, batch: int = 1, seq_len: int = 1, context_len: int = 0, repeats: int = 5
) -> Measurement:
    """Time one prefill (or one decode step) of `model` after `context_len` cached tokens.

    Random token ids (seeded); the cache is filled to `context_len` once and truncated back
    before each timed pass. Reports the median of `repeats` passes after a warm-up, at torch's
    current thread count, credited with `phase_cost` of the model's config and dtype.
    Raises ValueError as phase_cost does, and for repeats < 1.
    """
    _check_repeats(repeats)
    param = next(model.parameters())
    cost = phase_cost(model.config, phase, batch, seq_len, context_len, param.dtype)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(model.config.vocab_size, (batch, context_len + seq_len), generator=gen)
    ids = ids.to(param.device)  # (B, context_len + seq_len)
    new = ids[:, context_len:]  # (B, seq_len)
    cache = model.new_cache(batch, max_len=context_len + seq_len)
    with torch.inference_mode():
        if context_len:
            model.prefill(ids[:, :context_len], cache)
        if phase == "prefill":
            run = lambda: model.prefill(new, cache)
        else:
            run = lambda: model.decode_step(new[:, 0], cache)
        seconds = _median_seconds(run, repeats, param.device, setup=lambda: cache.truncate(context_len))
    return Measurement(phase, seconds, cost)


def plot_roofline(
    points: Mapping[str, tuple[float, float]], peak_flops: float, bandwidth: float, path: str | Path
):
    """Draw the roof, the ridge and one labelled point per phase, log-log; save a PNG to `path`.

    points maps a label to (intensity FLOP/byte, achieved FLOP/s). The roof is one line through
    (x_lo, bandwidth * x_lo), (ridge, peak), (x_hi, peak); the ridge is also a marker, and each
    point a marker with its label as text. Saved with `fig.savefig(path)` (the figure's own size,
    no tight bbox) so pixel positions follow the returned matplotlib Figure.
    Raises ValueError for a point that is not positive (it has no place on log axes).
    """
    from matplotlib.figure import Figure  # no pyplot: no global state, renders with Agg

    for label, (ai, flops) in points.items():
        if not (ai > 0 and flops > 0):
            raise ValueError(f"point {label!r} must have positive intensity and FLOP/s, got {(ai, flops)}")
    ridge = ridge_point(peak_flops, bandwidth)
    xs = [ai for ai, _ in points.values()] + [ridge]
    ys = [flops for _, flops in points.values()]
    x_lo, x_hi = min(xs) / 4, max(xs) * 4
    fig = Figure(figsize=(7, 4.5), dpi=100)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.plot([x_lo, ridge, x_hi], [bandwidth * x_lo, peak_flops, peak_flops], color="black", lw=2)
    ax.plot([ridge], [peak_flops], "s", color="gray")
    ax.annotate(
        f"ridge {ridge:.3g} FLOP/B",
        (ridge, peak_flops),
        textcoords="offset points",
        xytext=(6, 6),
        color="gray",
    )
    for label, (ai, flops) in points.items():
        ax.plot([ai], [flops], "o", markersize=9)
        ax.annotate(label, (ai, flops), textcoords="offset points", xytext=(0, 9), ha="center")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(min(ys + [bandwidth * x_lo]) / 3, peak_flops * 3)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(f"roofline: {bandwidth / 1e9:.3g} GB/s, {peak_flops / 1e9:.3g} GFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    fig.savefig(path)
    return fig
