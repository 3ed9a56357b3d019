"""How many weight streams the int4-q8 tile loop reads side by side, at each row count, on this machine.

The kernel's tile loop can read 1, 2 or 4 runs of tiles a thread at once (csrc/tiles_*.h's P, with
P x rows <= 8). More streams keep more of memory's requests in flight at few rows and cost registers
and cache at more; which is faster depends on the CPU, so `calibrate_streams` times the fused step
at each row count that has a choice (1-4) with every choice, on a scratch pool, and keeps the
fastest. Measured once per machine and model shape, kept in streams_file(). Any choice gives the
same logits bit for bit. Not here: the prefetch distance (solutions.system.kernels.fused_step).
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


def calibrate_streams(decoder, kernel, config, key: str) -> dict[int, dict[int, float]]:
    """{rows: {streams: median seconds of a step at that many rows}} for every row count with more
    than one choice: read from streams_file() under `key` (what the measurement depends on:
    fused_step.calibration_key) where it was measured before (delete the file to measure again),
    else measured now and saved when every round fit BUDGET_S. Sets the fastest choice of each."""
    medians = _calibrated.get(key) or _read_saved(key, kernel)
    if medians is None:
        medians, complete = _measure(decoder, kernel, config)
        if complete:
            _save(key, medians)
    _calibrated[key] = medians
    apply(kernel, fastest(medians))
    return medians


def fastest(medians: dict[int, dict[int, float]]) -> dict[int, int]:
    """{rows: the streams whose median is least}."""
    return {rows: min(times, key=times.get) for rows, times in medians.items()}


def apply(kernel, choice: dict[int, int]) -> None:
    """Set the kernel's streams for each row count in `choice` (process-wide)."""
    for rows, streams in choice.items():
        kernel.module.set_streams(rows, streams)


def _measure(decoder, kernel, config) -> tuple[dict[int, dict[int, float]], bool]:
    """The medians, and whether all ROUNDS ran within BUDGET_S. Each row r decodes one token at
    position 0 of its own slot r of a scratch pool (n_layers, 2, 8, n_kv_heads, head_dim)."""
    pool = torch.zeros(config.n_layers, 2, 8, config.n_kv_heads, config.head_dim)
    counts = [r for r in range(1, 9) if len(kernel.module.stream_choices(r)) > 1]
    times = {r: {p: [] for p in kernel.module.stream_choices(r)} for r in counts}
    start = time.perf_counter()
    for round_ in range(ROUNDS + 1):  # round 0 is not timed: the first touch of every weight
        if round_ > 1 and time.perf_counter() - start > BUDGET_S:
            break
        for rows in counts:
            args = (torch.arange(rows)[:, None], torch.zeros(rows, dtype=torch.long))  # slots (rows, 1), lens
            ids = torch.zeros(rows, dtype=torch.long)
            for streams in times[rows]:
                kernel.module.set_streams(rows, streams)
                began = time.perf_counter()
                decoder.step_paged(ids, pool, *args)
                if round_:
                    times[rows][streams].append(time.perf_counter() - began)
    medians = {r: {p: statistics.median(t) for p, t in by.items()} for r, by in times.items()}
    return medians, all(len(t) == ROUNDS for by in times.values() for t in by.values())


def _read_saved(key: str, kernel) -> dict[int, dict[int, float]] | None:
    try:
        entry = json.loads(streams_file().read_text())[key]
        medians = {int(r): {int(p): float(t) for p, t in by.items()} for r, by in entry.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # none saved, or unreadable: measure again (and rewrite the file)
    try:
        ok = all(by and set(by) <= set(kernel.module.stream_choices(r)) for r, by in medians.items())
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
