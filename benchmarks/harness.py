"""The measuring rules every `make bench` row follows, and the row itself.

Fixed threads (`fix_threads`: one torch thread count for ours and HuggingFace, and llama.cpp's
`n_threads` the same); a warm-up, then repeats with the engines interleaved A B A B ...; the median
of the repeats. A `Row` holds what was measured, ours, the peer, the ratio, the goal (a `Goal` on
the ratio or on our own figure) and whether it was met. No statistics beyond the median.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
}


@dataclass(frozen=True)
class Goal:
    """`on` (the row's "ratio" or "ours") compared with `op` to `threshold`, e.g. ratio >= 2.5."""

    op: str
    threshold: float
    on: str = "ratio"
    unit: str = "x"

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"goal op must be one of {', '.join(OPS)}, got {self.op!r}")
        if self.on not in ("ratio", "ours"):
            raise ValueError(f"a goal is on 'ratio' or 'ours', got {self.on!r}")

    def met(self, row: Row) -> bool | None:
        """Whether the row meets the goal; None when the figure is missing."""
        value = getattr(row, self.on)
        return None if value is None else OPS[self.op](value, self.threshold)

    def __str__(self) -> str:
        threshold = f"{self.threshold:.0%}" if self.unit == "%" else f"{self.threshold:g}{self.unit}"
        return f"{'' if self.on == 'ratio' else 'ours '}{self.op} {threshold}"


@dataclass
class Row:
    """One line of the report. `ratio` reads as "how much better ours is" (> 1: ours wins) unless
    the goal says otherwise; `met` is computed from a Goal, or given with a goal written as text."""

    group: str
    what: str
    ours: float | None
    unit: str  # s, tok/s, MB/s, x, %, B
    peer_name: str = ""
    peer: float | None = None
    ratio: float | None = None
    goal: Goal | str | None = None
    met: bool | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.goal, Goal) and self.met is None:
            self.met = self.goal.met(self)

    def to_json(self) -> dict:
        d = asdict(self)
        d["goal"] = None if self.goal is None else str(self.goal)
        return d


def fix_threads(n: int | None = None) -> int:
    """Pin torch to `n` threads (default: os.cpu_count()); returns the count now in force."""
    import torch

    n = n or os.cpu_count() or 1
    if n < 1:
        raise ValueError(f"threads must be >= 1, got {n}")
    torch.set_num_threads(n)
    return torch.get_num_threads()


def median(values: list[float]) -> float:
    if not values:
        raise ValueError("median of no measurements")
    return statistics.median(values)


def interleaved(
    engines: dict[str, Callable[[], float | None]],
    repeats: int,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, list[float]]:
    """Every engine `warmup` times untimed, then `repeats` rounds of A B A B ...; the seconds of each run.

    An engine is a call; if it returns a number, that is its own timing (e.g. the decode steps
    without the prefill before them), else the harness times the whole call with `clock`.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for _ in range(warmup):
        for run in engines.values():
            run()
    times: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(repeats):
        for name, run in engines.items():
            start = clock()
            own = run()
            times[name].append(clock() - start if own is None else float(own))
    return times


def medians(
    engines: dict[str, Callable[[], float | None]],
    repeats: int,
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Median seconds of each engine, measured by `interleaved`."""
    return {name: median(t) for name, t in interleaved(engines, repeats, warmup, clock).items()}
