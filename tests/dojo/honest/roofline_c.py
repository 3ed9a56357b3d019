"""Roofline kata: measure a machine's two ceilings, count a Llama pass, place prefill and decode.

A pass with arithmetic intensity I (FLOPs per byte moved) runs at most at
min(peak FLOP/s, bandwidth * I).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from time import perf_counter

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


# ------------------------------------------------------------------------------ counting


def _weights_cost(cfg, tokens: int, itemsize: int) -> Cost:
    """Every parameter read once; 2 FLOPs per matrix weight per new token; embedding rows looked up."""
    d, L = cfg.d_model, cfg.n_layers
    q_out = cfg.n_heads * cfg.head_dim
    kv_out = cfg.n_kv_heads * cfg.head_dim
    per_layer_matrix = d * q_out + 2 * d * kv_out + q_out * d + 3 * d * cfg.d_ff
    per_layer_vector = 2 * d  # attention and MLP RMSNorm
    embedding = cfg.vocab_size * d  # tied with the LM head
    matrices = L * per_layer_matrix + embedding
    parameters = matrices + L * per_layer_vector + d  # + final norm
    lookup = tokens * d
    return Cost(flops=2 * matrices * tokens, bytes=(parameters + lookup) * itemsize)


def _attention_cost(cfg, batch: int, seq_len: int, context_len: int, itemsize: int) -> Cost:
    total = context_len + seq_len
    kv_per_position = 2 * cfg.n_kv_heads * cfg.head_dim  # K and V, one layer
    written = batch * seq_len * kv_per_position
    read = batch * total * kv_per_position
    flops = 4 * cfg.n_heads * cfg.head_dim * seq_len * total * batch
    return Cost(flops=cfg.n_layers * flops, bytes=cfg.n_layers * (written + read) * itemsize)


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
        raise ValueError(f"unknown phase {phase!r}; expected one of {PHASES}")
    if phase == "decode" and seq_len != 1:
        raise ValueError(f"decode appends one token per row; seq_len={seq_len}")
    if batch < 1 or seq_len < 1:
        raise ValueError(f"batch and seq_len must be >= 1 (batch={batch}, seq_len={seq_len})")
    if context_len < 0:
        raise ValueError(f"context_len must be >= 0 (got {context_len})")
    if context_len + seq_len > config.max_seq_len:
        raise ValueError(f"{context_len} + {seq_len} positions exceed max_seq_len {config.max_seq_len}")
    itemsize = dtype.itemsize
    return _weights_cost(config, batch * seq_len, itemsize) + _attention_cost(
        config, batch, seq_len, context_len, itemsize
    )


# ------------------------------------------------------------------------------ the roof


def arithmetic_intensity(cost: Cost) -> float:
    if cost.bytes <= 0:
        raise ValueError(f"cost moves {cost.bytes} bytes: intensity undefined")
    return cost.flops / cost.bytes


def _ceilings_ok(peak_flops: float, bandwidth: float) -> None:
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"ceilings must be positive (peak_flops={peak_flops}, bandwidth={bandwidth})")


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    _ceilings_ok(peak_flops, bandwidth)
    return peak_flops / bandwidth


def attainable(ai: float, peak_flops: float, bandwidth: float) -> float:
    _ceilings_ok(peak_flops, bandwidth)
    if ai < 0:
        raise ValueError(f"intensity must be >= 0 (got {ai})")
    return min(peak_flops, bandwidth * ai)


def bound(ai: float, peak_flops: float, bandwidth: float) -> str:
    _ceilings_ok(peak_flops, bandwidth)
    if ai < 0:
        raise ValueError(f"intensity must be >= 0 (got {ai})")
    return "memory" if ai < peak_flops / bandwidth else "compute"


# ------------------------------------------------------------------------------ measuring

_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)i?B?\s*$", re.IGNORECASE)
_MULT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def last_level_cache_bytes() -> int:
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    sizes = []
    try:
        entries = sorted(root.glob("index*"))
    except OSError:
        return 0
    for entry in entries:
        try:
            m = _SIZE.match((entry / "size").read_text())
        except OSError:
            continue
        if m:
            sizes.append(int(m.group(1)) * _MULT[m.group(2).upper()])
    return max(sizes, default=0)


def _timed_median(run: Callable[[], object], repeats: int, device: torch.device) -> float:
    """One untimed warm-up, then the median wall time of `repeats` runs."""
    cuda = device.type == "cuda"
    run()
    if cuda:
        torch.cuda.synchronize(device)
    samples = []
    for _ in range(repeats):
        start = perf_counter()
        run()
        if cuda:
            torch.cuda.synchronize(device)
        samples.append(perf_counter() - start)
    return median(samples)


def measure_bandwidth(
    nbytes: int | None = None, repeats: int = 5, device: str | torch.device = "cpu"
) -> float:
    dev = torch.device(device)
    if nbytes is None:
        llc = last_level_cache_bytes() if dev.type == "cpu" else 0
        nbytes = 4 * llc if llc else 1 << 30
    if nbytes < 1 or repeats < 1:
        raise ValueError(f"nbytes and repeats must be >= 1 (nbytes={nbytes}, repeats={repeats})")
    src = torch.ones(nbytes, dtype=torch.uint8, device=dev)  # written: pages faulted in
    dst = torch.zeros(nbytes, dtype=torch.uint8, device=dev)
    seconds = _timed_median(lambda: dst.copy_(src), repeats, dev)
    return 2.0 * nbytes / seconds


def measure_peak_flops(
    n: int = 2048, dtype: torch.dtype = torch.float32, repeats: int = 5, device: str | torch.device = "cpu"
) -> float:
    dev = torch.device(device)
    if n < 1 or repeats < 1:
        raise ValueError(f"n and repeats must be >= 1 (n={n}, repeats={repeats})")
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(n, n, generator=gen).to(device=dev, dtype=dtype)
    b = torch.rand(n, n, generator=gen).to(device=dev, dtype=dtype)
    out = torch.empty(n, n, device=dev, dtype=dtype)
    seconds = _timed_median(lambda: torch.mm(a, b, out=out), repeats, dev)
    return 2.0 * n**3 / seconds


def measure_phase(
    model, phase: str, batch: int = 1, seq_len: int = 1, context_len: int = 0, repeats: int = 5
) -> Measurement:
    cfg = model.config
    param = next(iter(model.parameters()))
    cost = phase_cost(cfg, phase, batch, seq_len, context_len, param.dtype)
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1 (got {repeats})")
    dev = param.device
    cuda = dev.type == "cuda"
    cache = model.new_cache(batch, context_len + seq_len)
    samples = []
    with torch.inference_mode():
        if context_len:
            model.prefill(torch.randint(0, cfg.vocab_size, (batch, context_len), device=dev), cache)
        for run in range(1 + repeats):
            if phase == "prefill":
                ids = torch.randint(0, cfg.vocab_size, (batch, seq_len), device=dev)
                step = model.prefill
            else:
                ids = torch.randint(0, cfg.vocab_size, (batch,), device=dev)
                step = model.decode_step
            cache.truncate(context_len)
            if cuda:
                torch.cuda.synchronize(dev)
            start = perf_counter()
            step(ids, cache)
            if cuda:
                torch.cuda.synchronize(dev)
            if run:
                samples.append(perf_counter() - start)
    return Measurement(phase, median(samples), cost)


# ------------------------------------------------------------------------------ plotting


def plot_roofline(
    points: Mapping[str, tuple[float, float]], peak_flops: float, bandwidth: float, path: str | Path
):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ridge = ridge_point(peak_flops, bandwidth)
    pts = {}
    for name, (x, y) in points.items():
        if x <= 0 or y <= 0:
            raise ValueError(f"point {name!r} is not positive: ({x}, {y})")
        pts[name] = (float(x), float(y))

    all_x = [ridge, *(x for x, _ in pts.values())]
    left, right = min(all_x) / 8, max(all_x) * 8
    xs = [left, ridge, right]
    ys = [min(peak_flops, bandwidth * x) for x in xs]
    all_y = ys + [y for _, y in pts.values()]
    bottom, top = min(all_y) / 4, max(all_y) * 4

    fig, ax = plt.subplots(figsize=(8, 5.5))
    ax.loglog(
        xs,
        ys,
        color="tab:blue",
        linewidth=2,
        label=f"roof: {peak_flops / 1e9:.3g} GFLOP/s, {bandwidth / 1e9:.3g} GB/s",
    )
    ax.scatter(
        [ridge], [peak_flops], marker="x", color="tab:blue", zorder=3, label=f"ridge at {ridge:.3g} FLOP/byte"
    )
    for name, (x, y) in pts.items():
        ax.scatter([x], [y], s=50, zorder=4, label=f"{name}: {x:.3g} FLOP/B, {y / 1e9:.3g} GFLOP/s")
        ax.text(x, y, f" {name}", va="bottom")
    ax.set_xlim(left, right)
    ax.set_ylim(bottom, top)
    ax.set_xlabel("arithmetic intensity [FLOP/byte]")
    ax.set_ylabel("performance [FLOP/s]")
    ax.legend(fontsize="small")
    fig.savefig(path)
    plt.close(fig)
    return fig
