"""How many weight streams the native products read side by side, at each row count, on this machine.

The int4-q8 tile loop reads 1, 2 or 4 runs of tiles a thread at once (csrc/tiles_*.h's P, with
P x rows <= 8), the fp32 product 1, 2 or 4 runs of weight rows (decode_step_f32.h's J). More streams
keep more of memory's requests in flight at few rows and cost registers and cache at more; which is
faster depends on the CPU, so `calibrate_streams` times the fused step at each row count with a
choice, every choice, on scratch caches (`q4_step`, `f32_step`), and keeps the fastest. Measured once
per machine and model shape, kept in streams_file(). Any choice gives the same logits bit for bit.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch

from solutions.system.kernels import native

ROUNDS = 3  # interleaved rounds over the choices, the median kept ...
BUDGET_S = 1.0  # ... while the calibration has taken less than this (one round always runs): a busy
# machine is measured again at the next start rather than kept waiting
_calibrated: dict[str, dict[int, dict[int, float]]] = {}  # this process's, by key: rows -> streams -> s


def streams_file() -> Path:
    """Where measured choices are kept: beside the compiled kernel, which is per machine."""
    return native.BUILD_DIR / "streams.json"


def calibrate_streams(
    kernel, key: str, step, *, f32: bool = False, budget: float | None = None
) -> dict[int, dict[int, float]]:
    """{rows: {streams: median seconds of `step(rows)`}} for every row count with more than one choice
    (the int4-q8 tile loop's, or with `f32` the fp32 product's): read from streams_file() under `key`
    (what the measurement depends on: fused_step.calibration_key) where it was measured before (delete
    the file to measure again), else measured now and saved when every round fit `budget` seconds
    (default BUDGET_S).
    Sets the fastest choice of each."""
    medians = _calibrated.get(key) or _read_saved(key, kernel, f32)
    if medians is None:
        medians, complete = _measure(kernel, step, f32, BUDGET_S if budget is None else budget)
        if complete:
            _save(key, medians)
    _calibrated[key] = medians
    apply(kernel, fastest(medians), f32)
    return medians


def q4_step(decoder, config):
    """`step(rows)` for the int4-q8 Decoder: one token a row, each row at position 0 of its own slot of a
    scratch pool (n_layers, 2, 8, n_kv_heads, head_dim)."""
    pool = torch.zeros(config.n_layers, 2, 8, config.n_kv_heads, config.head_dim)

    def step(rows: int) -> None:
        zeros = torch.zeros(rows, dtype=torch.long)
        decoder.step_paged(
            zeros, pool, torch.arange(rows)[:, None], zeros
        )  # ids, pool, slots (rows, 1), lens

    return step


def f32_step(decoder, config):
    """`step(rows)` for the fp32 DecoderF32: one token a row at position 0 of a scratch cache of `rows`
    sequences (2, n_layers, rows, n_kv_heads, 1, head_dim)."""
    caches = {
        r: torch.zeros(2, config.n_layers, r, config.n_kv_heads, 1, config.head_dim) for r in range(1, 9)
    }
    return lambda rows: decoder.step(torch.zeros(rows, dtype=torch.long), caches[rows], 0)


def fastest(medians: dict[int, dict[int, float]]) -> dict[int, int]:
    """{rows: the streams whose median is least}."""
    return {rows: min(times, key=times.get) for rows, times in medians.items()}


def describe(choice: dict[int, int]) -> str:
    """The choice as a step's describe() names it ("" for none)."""
    chosen = ", ".join(f"{r}: {p}" for r, p in choice.items())
    return f"; weight streams a thread by rows, by calibration: {chosen}" if chosen else ""


def apply(kernel, choice: dict[int, int], f32: bool = False) -> None:
    """Set the kernel's streams for each row count in `choice` (process-wide)."""
    for rows, streams in choice.items():
        kernel.module.set_streams(rows, streams, f32)


def _measure(kernel, step, f32: bool, budget: float) -> tuple[dict[int, dict[int, float]], bool]:
    """The medians, and whether all ROUNDS ran within `budget`."""
    choices = {r: kernel.module.stream_choices(r, f32) for r in range(1, 9)}
    times = {r: {p: [] for p in ps} for r, ps in choices.items() if len(ps) > 1}
    start = time.perf_counter()
    for round_ in range(ROUNDS + 1):  # round 0 is not timed: the first touch of every weight
        if round_ > 1 and time.perf_counter() - start > budget:
            break
        for rows, by in times.items():
            for streams, seen in by.items():
                kernel.module.set_streams(rows, streams, f32)
                began = time.perf_counter()
                step(rows)
                if round_:
                    seen.append(time.perf_counter() - began)
    medians = {r: {p: statistics.median(t) for p, t in by.items()} for r, by in times.items()}
    return medians, all(len(t) == ROUNDS for by in times.values() for t in by.values())


def _read_saved(key: str, kernel, f32: bool) -> dict[int, dict[int, float]] | None:
    try:
        entry = json.loads(streams_file().read_text())[key]
        medians = {int(r): {int(p): float(t) for p, t in by.items()} for r, by in entry.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # none saved, or unreadable: measure again (and rewrite the file)
    try:
        ok = all(by and set(by) <= set(kernel.module.stream_choices(r, f32)) for r, by in medians.items())
    except RuntimeError:  # a row count the kernel does not take
        return None
    return medians if medians and ok else None


def _save(key: str, medians: dict[int, dict[int, float]]) -> None:
    from solutions.system.kernels.calibration import write_entry

    try:
        write_entry(
            streams_file(), key, {str(r): {str(p): t for p, t in by.items()} for r, by in medians.items()}
        )
    except OSError:
        pass  # a read-only build folder: this process keeps its measurement, the next measures again
