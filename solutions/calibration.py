"""Per-machine calibration: which memory order of the fp32 weights this CPU's BLAS multiplies fastest.

F.linear(x, w) with w (N, K) row-major asks BLAS for x @ w^T; stored column-major (w^T
contiguous) it asks for x @ B with B (K, N) contiguous. The two run different kernels, and which
wins at 1 row (greedy decode) and at 4 rows (a 4-beam step) depends on the vendor's BLAS and the
CPU: MKL on one Intel Xeon favoured column-major for 4 rows, while on an AMD EPYC that same
layout made a 4-row product cost 2.4x a 1-row one. So nothing is assumed: `calibrate` times one
decode step's matrix products (SmolLM2's shapes, a few layers, random values) in both layouts at
1 and 4 rows, interleaved, and picks the layout with the least 1-row + 4-row time (each the
fastest of its repeats: other work on the machine only ever adds time). The choice is
cached per machine (CPU model, torch version, thread count) in a small JSON file.

Left out: other row counts, the packed modes (oneDNN and the int4 kernel pick their own layouts),
and re-measuring a cached machine (delete the file to calibrate again).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

LAYOUTS = ("row", "col")
ROWS = (1, 4)  # a greedy step, a 4-beam step
SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))  # SmolLM2's (N, K) per layer: qkv, o, gate|up, down
LAYERS = 4  # 56 MB of fp32 per layout: past the caches of the CPUs we know, and 0.2 s to measure


@dataclass(frozen=True)
class Calibration:
    """The chosen layout, the times it was chosen from ("row 1": seconds, ...), and the machine."""

    layout: str
    seconds: dict[str, float]
    machine: dict[str, str]

    def summary(self) -> str:
        """One line for `dojo demo --verbose` and the bench log."""
        times = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in self.seconds.items())
        return f"fp32 weights {self.layout}-major, by calibration on {self.machine['cpu']} ({times})"


def apply_layout(w: Tensor, layout: str) -> Tensor:
    """w (N, K) with the same values in `layout`'s memory order (a view when it already is)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout == "row":
        return w.contiguous()
    return w if w.t().is_contiguous() else w.t().contiguous().t()


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else platform's idea of it, else "unknown cpu"."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def machine() -> dict[str, str]:
    """What a calibration holds for: CPU model, torch version, torch's thread count."""
    return {"cpu": cpu_model(), "torch": torch.__version__, "threads": str(torch.get_num_threads())}


def matmul_timer(layers: int = LAYERS) -> Callable[[str, int], float]:
    """A timer(layout, rows) -> seconds for one pass of `layers` layers' products on random weights."""
    gen = torch.Generator().manual_seed(0)
    weights = {layout: [apply_layout(torch.rand(n, k, generator=gen) - 0.5, layout)
                        for _ in range(layers) for n, k in SHAPES] for layout in LAYOUTS}
    inputs = {(rows, k): torch.rand(rows, k, generator=gen) for rows in ROWS for _, k in SHAPES}

    def timer(layout: str, rows: int) -> float:
        start = time.perf_counter()
        for w in weights[layout]:
            F.linear(inputs[rows, w.shape[1]], w)
        return time.perf_counter() - start

    return timer


def calibrate(timer: Callable[[str, int], float] | None = None, repeats: int = 7) -> Calibration:
    """Time every (layout, rows) pair `repeats` times, interleaved after a warm-up; pick the
    layout with the least 1-row + 4-row time, each pair's fastest run counting. `timer(layout, rows)` -> seconds (default:
    matmul_timer()). Raises ValueError for repeats < 1."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    timer = matmul_timer() if timer is None else timer
    pairs = [(layout, rows) for layout in LAYOUTS for rows in ROWS]
    for pair in pairs:
        timer(*pair)  # warm-up: first touch, BLAS's own set-up
    times: dict[tuple[str, int], list[float]] = {pair: [] for pair in pairs}
    for _ in range(repeats):
        for pair in pairs:
            times[pair].append(timer(*pair))
    seconds = {f"{layout} {rows}": min(times[layout, rows]) for layout, rows in pairs}
    cost = {layout: sum(seconds[f"{layout} {rows}"] for rows in ROWS) for layout in LAYOUTS}
    return Calibration(min(LAYOUTS, key=cost.__getitem__), seconds, machine())


def calibration_path(cache_dir: str | Path) -> Path:
    return Path(cache_dir) / "calibration.json"


def load_or_calibrate(cache_dir: str | Path, timer: Callable[[str, int], float] | None = None,
                      log: Callable[[str], None] | None = None) -> Calibration:
    """This machine's calibration from `cache_dir`, measured (and saved) when there is none for
    this machine, or the file is unreadable. The file maps a machine's key to its calibration,
    so machines sharing a workspace each keep theirs. `log` hears what happened."""
    path = calibration_path(cache_dir)
    here = machine()
    key = json.dumps(here, sort_keys=True)
    saved: dict = {}
    if path.exists():
        try:
            saved = json.loads(path.read_text())
            entry = saved[key] if key in saved else None
            if entry is not None:
                found = Calibration(**entry)
                if found.layout in LAYOUTS:
                    return found
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            if log:
                log(f"calibration file {path} is unreadable ({type(exc).__name__}): measuring again")
            saved = {}
    if log:
        log(f"calibrating the fp32 weight layout for {here['cpu']} (torch {here['torch']}, "
            f"{here['threads']} threads) ...")
    found = calibrate(timer)
    if not isinstance(saved, dict):
        saved = {}
    saved[key] = asdict(found)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(saved, indent=1))
    os.replace(tmp, path)  # atomic: a reader sees the old file or the new one, never half of one
    return found
