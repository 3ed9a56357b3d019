"""Per-machine calibration: how this CPU's BLAS multiplies the fp32 weights fastest.

Row-major and column-major weights send F.linear to different BLAS kernels, and which wins at 1 row
(greedy decode) and at 4 rows (a 4-beam step) depends on the BLAS and the CPU. So `calibrate` times
one decode step's products both ways, and MKL's packed GEMM where torch has it, and picks; the
choice is cached per machine in a small JSON file. The start-up cache calibrates only fp32 models
whose decode steps are not fused. Not here: other row counts, the bf16 and int4 modes.
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
PACKED = "packed"  # MKL's packed GEMM, timed beside the layouts where torch has it
PACK_GAIN = 0.10  # pack only where that saves at least this share of the product's time
VERSION = "2"  # what a calibration measures; a new one measures cached machines again
ROWS = (1, 4)  # a greedy step, a 4-beam step
SHAPES = (
    (960, 576),
    (576, 576),
    (3072, 576),
    (576, 1536),
)  # SmolLM2's (N, K) per layer: qkv, o, gate|up, down
LAYERS = 15  # half SmolLM2's 30: 210 MB of fp32 per kind, so products stream from memory as the real
# step's do. With 4 layers (56 MB) one Xeon kept part of them in its cache and ran them 30 % faster
# than the real model, enough to pick the wrong layout; 15 and 30 layers time alike there.


@dataclass(frozen=True)
class Calibration:
    """The chosen layout, the row counts to pack for (solutions.system.kernels.packed_gemm), the times they were
    chosen from ("row 1": seconds, ...), and the machine."""

    layout: str
    seconds: dict[str, float]
    machine: dict[str, str]
    packed_rows: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "packed_rows", tuple(int(r) for r in self.packed_rows))  # JSON gives a list

    def summary(self) -> str:
        """One line for `dojo demo --verbose` and the bench log."""
        times = ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in self.seconds.items())
        packed = "".join(f", {r}-row products MKL-packed" for r in self.packed_rows)
        return f"fp32 weights {self.layout}-major{packed}, by calibration on {self.machine['cpu']} ({times})"


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
    """What a calibration holds for: CPU model, torch version, torch's thread count, and VERSION."""
    return {
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "threads": str(torch.get_num_threads()),
        "calibration": VERSION,
    }


def kinds() -> tuple[str, ...]:
    """What `calibrate` times: the layouts, and MKL's packed GEMM where this torch has it."""
    from solutions.system.kernels import packed_gemm

    return LAYOUTS + ((PACKED,) if packed_gemm.available() else ())


def matmul_timer(layers: int = LAYERS) -> Callable[[str, int], float]:
    """A timer(kind, rows) -> seconds for one pass of `layers` layers' products on constant weights;
    kind is a layout or PACKED (MKL's packed GEMM for that row count, see kinds())."""
    from solutions.system.kernels import packed_gemm

    gen = torch.Generator().manual_seed(0)
    weights = {
        layout: [apply_layout(torch.full((n, k), 0.01), layout) for _ in range(layers) for n, k in SHAPES]
        for layout in LAYOUTS
    }
    inputs = {(rows, k): torch.rand(rows, k, generator=gen) for rows in ROWS for _, k in SHAPES}
    packs = (
        {rows: [packed_gemm.pack(w, rows) for w in weights["row"]] for rows in ROWS}
        if PACKED in kinds()
        else {}
    )

    def timer(kind: str, rows: int) -> float:
        start = time.perf_counter()
        if kind == PACKED:
            for w, p in zip(weights["row"], packs[rows]):
                packed_gemm.linear(inputs[rows, w.shape[1]], w, p, rows)
        else:
            for w in weights[kind]:
                F.linear(inputs[rows, w.shape[1]], w)
        return time.perf_counter() - start

    return timer


def calibrate(
    timer: Callable[[str, int], float] | None = None,
    repeats: int = 7,
    candidates: tuple[str, ...] | None = None,
) -> Calibration:
    """Time every (kind, rows) pair `repeats` times, interleaved after a warm-up; pick the
    layout with the least 1-row + 4-row time, each pair's fastest run counting, and pack for the
    row counts where PACKED beats that layout by PACK_GAIN. `timer(kind, rows)` -> seconds
    (default: matmul_timer()); `candidates` the kinds to time (default: kinds()).
    Raises ValueError for repeats < 1 or candidates without both layouts."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    candidates = kinds() if candidates is None else tuple(candidates)
    if not set(LAYOUTS) <= set(candidates) or not set(candidates) <= {*LAYOUTS, PACKED}:
        raise ValueError(f"candidates must be {LAYOUTS}, optionally with {PACKED!r}; got {candidates}")
    timer = matmul_timer() if timer is None else timer
    pairs = [(kind, rows) for kind in candidates for rows in ROWS]
    for pair in pairs:
        timer(*pair)  # warm-up: first touch, BLAS's own set-up
    times: dict[tuple[str, int], list[float]] = {pair: [] for pair in pairs}
    for _ in range(repeats):
        for pair in pairs:
            times[pair].append(timer(*pair))
    seconds = {f"{kind} {rows}": min(times[kind, rows]) for kind, rows in pairs}
    cost = {layout: sum(seconds[f"{layout} {rows}"] for rows in ROWS) for layout in LAYOUTS}
    layout = min(LAYOUTS, key=cost.__getitem__)
    packed = tuple(
        rows
        for rows in ROWS
        if PACKED in candidates
        and seconds[f"{PACKED} {rows}"] <= (1 - PACK_GAIN) * seconds[f"{layout} {rows}"]
    )
    return Calibration(layout, seconds, machine(), packed)


def calibration_path(cache_dir: str | Path) -> Path:
    return Path(cache_dir) / "calibration.json"


def load_or_calibrate(
    cache_dir: str | Path,
    timer: Callable[[str, int], float] | None = None,
    log: Callable[[str], None] | None = None,
) -> Calibration:
    """This machine's calibration from `cache_dir`, measured (and saved) when there is none for
    this machine, or the file is unreadable. The file maps a machine's key to its calibration,
    so machines sharing a workspace each keep theirs. `log` hears what happened."""
    path = calibration_path(cache_dir)
    here = machine()
    key = json.dumps(here, sort_keys=True)
    if path.exists():
        try:
            saved = json.loads(path.read_text())
            entry = saved[key] if key in saved else None
            if entry is not None:
                found = Calibration(**entry)
                if found.layout in LAYOUTS and set(found.packed_rows) <= set(ROWS):
                    return found
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            if log:
                log(f"calibration file {path} is unreadable ({type(exc).__name__}): measuring again")
    if log:
        log(
            f"calibrating the fp32 weight layout for {here['cpu']} (torch {here['torch']}, "
            f"{here['threads']} threads) ..."
        )
    found = calibrate(timer)
    write_entry(path, key, asdict(found))
    return found


def write_entry(path: Path, key: str, entry) -> None:
    """Set `key` to `entry` in the JSON map kept at `path` (a missing or unreadable file starts an
    empty map), replacing the file atomically: a reader sees the old file or the new one, never half
    of one. Raises OSError where the folder cannot be written."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        saved = {}
    if not isinstance(saved, dict):
        saved = {}
    saved[key] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(saved, indent=1))
    os.replace(tmp, path)
