"""Roofline kata: measure a machine's two ceilings, count a Llama pass, place prefill and decode."""

from __future__ import annotations

import glob
import os
import statistics
import time
from collections.abc import Mapping
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
        """arithmetic_intensity(self.cost)."""
        return arithmetic_intensity(self.cost)


# ---------------------------------------------------------------------------------------------
# counting
# ---------------------------------------------------------------------------------------------


def _matrix_weights(config) -> int:
    d, hd = config.d_model, config.head_dim
    q = d * config.n_heads * hd
    kv = 2 * d * config.n_kv_heads * hd
    o = config.n_heads * hd * d
    mlp = 3 * d * config.d_ff
    return config.n_layers * (q + kv + o + mlp) + config.vocab_size * d


def _parameters(config) -> int:
    norms = config.n_layers * 2 * config.d_model + config.d_model
    return _matrix_weights(config) + norms


def phase_cost(
    config,
    phase: str,
    batch: int = 1,
    seq_len: int = 1,
    context_len: int = 0,
    dtype: torch.dtype = torch.float32,
) -> Cost:
    """Cost of one pass of a Llama-style `config` stored in `dtype`."""
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
    if phase == "decode" and seq_len != 1:
        raise ValueError(f"a decode step appends exactly 1 token per row, got seq_len={seq_len}")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    if context_len < 0:
        raise ValueError(f"context_len must be >= 0, got {context_len}")
    if context_len + seq_len > config.max_seq_len:
        raise ValueError(
            f"context_len + seq_len = {context_len + seq_len} exceeds max_seq_len={config.max_seq_len}"
        )

    elem = torch.empty((), dtype=dtype).element_size()
    new_tokens = batch * seq_len
    kv_width = 2 * config.n_kv_heads * config.head_dim  # K and V numbers per position per layer

    weight_bytes = _parameters(config) * elem
    embed_bytes = new_tokens * config.d_model * elem
    kv_write = config.n_layers * new_tokens * kv_width * elem
    kv_read = config.n_layers * batch * (context_len + seq_len) * kv_width * elem

    matmul_flops = 2 * _matrix_weights(config) * new_tokens
    pairs = batch * seq_len * (context_len + seq_len)
    attn_flops = config.n_layers * 4 * config.n_heads * config.head_dim * pairs

    return Cost(
        flops=int(matmul_flops + attn_flops), bytes=int(weight_bytes + embed_bytes + kv_write + kv_read)
    )


# ---------------------------------------------------------------------------------------------
# the roofline
# ---------------------------------------------------------------------------------------------


def arithmetic_intensity(cost: Cost) -> float:
    """FLOPs per byte moved. Raises ValueError if the cost moves no bytes."""
    if cost.bytes <= 0:
        raise ValueError("arithmetic intensity is undefined for a cost that moves no bytes")
    return cost.flops / cost.bytes


def _check_ceilings(peak_flops: float, bandwidth: float) -> None:
    if not peak_flops > 0:
        raise ValueError(f"peak_flops must be positive, got {peak_flops}")
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth}")


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """The intensity (FLOP/byte) where the bandwidth ceiling meets the compute ceiling."""
    _check_ceilings(peak_flops, bandwidth)
    return peak_flops / bandwidth


def attainable(ai: float, peak_flops: float, bandwidth: float) -> float:
    """The roof: min(peak_flops, bandwidth * ai) FLOP/s."""
    _check_ceilings(peak_flops, bandwidth)
    if ai < 0:
        raise ValueError(f"arithmetic intensity must be >= 0, got {ai}")
    return min(peak_flops, bandwidth * ai)


def bound(ai: float, peak_flops: float, bandwidth: float) -> str:
    """ "memory" left of the ridge (ai < ridge), "compute" at or right of it."""
    ridge = ridge_point(peak_flops, bandwidth)
    if ai < 0:
        raise ValueError(f"arithmetic intensity must be >= 0, got {ai}")
    return "memory" if ai < ridge else "compute"


# ---------------------------------------------------------------------------------------------
# measuring
# ---------------------------------------------------------------------------------------------

_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def last_level_cache_bytes() -> int:
    """Size of the largest CPU cache, from /sys/devices/system/cpu/cpu0/cache (0 if unreadable)."""
    best = 0
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(d, "size")) as f:
                text = f.read().strip().upper()
        except OSError:
            continue
        if text.endswith("B"):
            text = text[:-1]
        unit = text[-1] if text and text[-1] in "KMG" else ""
        num = text[:-1] if unit else text
        try:
            size = int(num) * _UNITS[unit]
        except ValueError:
            continue
        best = max(best, size)
    return best


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_seconds(fn, repeats: int, device: torch.device) -> float:
    fn()  # untimed warm-up
    _sync(device)
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure_bandwidth(
    nbytes: int | None = None, repeats: int = 5, device: str | torch.device = "cpu"
) -> float:
    """Bytes/s of copying one `nbytes` array into another (read + write)."""
    device = torch.device(device)
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if nbytes is None:
        llc = last_level_cache_bytes()
        nbytes = 4 * llc if (llc > 0 and device.type == "cpu") else 1 << 30
    if nbytes < 1:
        raise ValueError(f"nbytes must be >= 1, got {nbytes}")
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    src.fill_(1)  # touch every page before timing
    dst.fill_(0)
    seconds = _median_seconds(lambda: dst.copy_(src), repeats, device)
    return 2 * nbytes / seconds


def measure_peak_flops(
    n: int = 2048, dtype: torch.dtype = torch.float32, repeats: int = 5, device: str | torch.device = "cpu"
) -> float:
    """FLOP/s of an (n, n) @ (n, n) torch matmul in `dtype`."""
    device = torch.device(device)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    seconds = _median_seconds(lambda: a @ b, repeats, device)
    return 2 * n**3 / seconds


def _model_dtype(model) -> torch.dtype:
    try:
        return next(model.parameters()).dtype
    except (AttributeError, StopIteration):
        return torch.float32


def _model_device(model) -> torch.device:
    try:
        return next(model.parameters()).device
    except (AttributeError, StopIteration):
        return torch.device("cpu")


def measure_phase(
    model, phase: str, batch: int = 1, seq_len: int = 1, context_len: int = 0, repeats: int = 5
) -> Measurement:
    """Time one `model.prefill` (or one `model.decode_step`) after `context_len` cached tokens."""
    dtype = _model_dtype(model)
    cost = phase_cost(model.config, phase, batch, seq_len, context_len, dtype)
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    device = _model_device(model)
    vocab = model.config.vocab_size
    cache = model.new_cache(batch, context_len + seq_len)

    with torch.no_grad():
        if context_len > 0:
            model.prefill(torch.randint(vocab, (batch, context_len), device=device), cache)

        def one_pass(ids):
            if phase == "prefill":
                return model.prefill(ids, cache)
            return model.decode_step(ids[:, 0], cache)

        times = []
        for i in range(repeats + 1):
            ids = torch.randint(vocab, (batch, seq_len), device=device)
            cache.truncate(context_len)
            _sync(device)
            t0 = time.perf_counter()
            one_pass(ids)
            _sync(device)
            elapsed = time.perf_counter() - t0
            if i > 0:  # the first pass is the untimed warm-up
                times.append(elapsed)
    return Measurement(phase=phase, seconds=statistics.median(times), cost=cost)


# ---------------------------------------------------------------------------------------------
# plotting
# ---------------------------------------------------------------------------------------------


def plot_roofline(
    points: Mapping[str, tuple[float, float]], peak_flops: float, bandwidth: float, path: str | Path
):
    """Draw the roof, the ridge and one labelled point per phase, log-log; save a PNG to `path`."""
    from matplotlib.figure import Figure

    ridge = ridge_point(peak_flops, bandwidth)
    for label, (ai, fl) in points.items():
        if not (ai > 0 and fl > 0):
            raise ValueError(f"point {label!r} must have positive intensity and FLOP/s, got {(ai, fl)}")

    xs = [ridge] + [ai for ai, _ in points.values()]
    ys = [peak_flops] + [fl for _, fl in points.values()]
    x_lo, x_hi = min(xs) / 10, max(xs) * 10
    roof_x = [x_lo, ridge, x_hi]
    roof_y = [min(peak_flops, bandwidth * x) for x in roof_x]
    y_lo = min(ys + roof_y) / 3
    y_hi = max(ys + roof_y) * 3

    fig = Figure(figsize=(7, 5))
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.plot(roof_x, roof_y, "-", color="black", label="roof")
    ax.plot([ridge], [peak_flops], "D", color="gray", label=f"ridge ({ridge:.3g} FLOP/byte)")
    for label, (ai, fl) in points.items():
        ax.plot([ai], [fl], "o", markersize=8, label=label)
        ax.annotate(label, (ai, fl), textcoords="offset points", xytext=(6, 6))
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, y_hi)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title("Roofline")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.savefig(path)
    return fig
