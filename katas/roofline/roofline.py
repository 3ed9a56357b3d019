"""Roofline kata: measure a machine's two ceilings, count a Llama pass, place prefill and decode.

A pass with arithmetic intensity I (FLOPs per byte moved) runs at most at
min(peak FLOP/s, bandwidth * I). Fill in every function below; the prompt gives the contract,
including exactly what `phase_cost` counts (`dojo start roofline` prints it; in a notebook it is
the first cell).
"""

from __future__ import annotations

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
        raise NotImplementedError

    @property
    def bytes_per_s(self) -> float:
        raise NotImplementedError

    @property
    def intensity(self) -> float:
        """arithmetic_intensity(self.cost)."""
        raise NotImplementedError


def phase_cost(
    config,
    phase: str,
    batch: int = 1,
    seq_len: int = 1,
    context_len: int = 0,
    dtype: torch.dtype = torch.float32,
) -> Cost:
    """Cost of one pass of a Llama-style `config` (a solutions.model.LlamaConfig) stored in `dtype`.

    `seq_len` new tokens per row (the prompt for "prefill"; exactly 1 for "decode") are appended
    after `context_len` cached ones, for `batch` rows. Counts weights, the embedding lookup, KV
    cache reads and writes, matmul and attention FLOPs, as the prompt specifies.
    Raises ValueError for an unknown phase, a decode with seq_len != 1, batch or seq_len < 1,
    context_len < 0, or context_len + seq_len beyond config.max_seq_len.
    """
    raise NotImplementedError


def arithmetic_intensity(cost: Cost) -> float:
    """FLOPs per byte moved. Raises ValueError if the cost moves no bytes."""
    raise NotImplementedError


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """The intensity (FLOP/byte) where the bandwidth ceiling meets the compute ceiling.

    Raises ValueError unless both ceilings are positive.
    """
    raise NotImplementedError


def attainable(ai: float, peak_flops: float, bandwidth: float) -> float:
    """The roof: min(peak_flops, bandwidth * ai) FLOP/s. Raises ValueError for ai < 0 or bad ceilings."""
    raise NotImplementedError


def bound(ai: float, peak_flops: float, bandwidth: float) -> str:
    """ "memory" left of the ridge (ai < ridge), "compute" at or right of it. ValueError for ceilings <= 0."""
    raise NotImplementedError


def last_level_cache_bytes() -> int:
    """Size in bytes of the largest CPU cache, from /sys/devices/system/cpu/cpu0/cache/index*/size
    ("48K", "260M": K, M, G are powers of 1024); 0 if none can be read."""
    raise NotImplementedError


def measure_bandwidth(
    nbytes: int | None = None, repeats: int = 5, device: str | torch.device = "cpu"
) -> float:
    """Bytes/s of copying one `nbytes` array into another, counting bytes read plus bytes written.

    nbytes defaults to 4x the last-level cache (1 GiB if unknown, or on a GPU). No first-touch
    page faults in the timing; the median of `repeats` copies after a warm-up; torch tensors at
    torch's current thread count. Raises ValueError for nbytes or repeats < 1.
    """
    raise NotImplementedError


def measure_peak_flops(
    n: int = 2048, dtype: torch.dtype = torch.float32, repeats: int = 5, device: str | torch.device = "cpu"
) -> float:
    """FLOP/s of an (n, n) @ (n, n) torch matmul in `dtype`: the median of `repeats` after a warm-up.

    Runs at torch's current thread count. Raises ValueError for n or repeats < 1.
    """
    raise NotImplementedError


def measure_phase(
    model, phase: str, batch: int = 1, seq_len: int = 1, context_len: int = 0, repeats: int = 5
) -> Measurement:
    """Time one `model.prefill` (or one `model.decode_step`) after `context_len` cached tokens.

    `model` follows solutions.model.Llama (config, new_cache, prefill, decode_step). Random
    token ids; the cache holds exactly `context_len` positions before every timed pass. Returns
    the median of `repeats` passes after a warm-up, credited with `phase_cost` of the model's
    config and parameter dtype. Raises ValueError as phase_cost does, and for repeats < 1.
    """
    raise NotImplementedError


def plot_roofline(
    points: Mapping[str, tuple[float, float]], peak_flops: float, bandwidth: float, path: str | Path
):
    """Draw the roof, the ridge and one labelled point per phase, log-log; save a PNG to `path`.

    points maps a label to (intensity FLOP/byte, achieved FLOP/s). Returns the matplotlib Figure,
    saved with `fig.savefig(path)` (its own size: no tight bbox). The prompt says what must be drawn.
    Raises ValueError for a point that is not positive.
    """
    raise NotImplementedError
