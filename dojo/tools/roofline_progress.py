"""How long `dojo roofline` takes: estimated before it measures, shown while it does.

`probe` times one short prefill and one decode step of a model; `plan` scales them to each pass a
phase will make by the ratio of the passes' roofline times under the ceilings just measured. `Counted`
reports each pass a measurement makes, and `phases` draws a bar per phase that moves pass by pass, with
the time left: the estimate, scaled by how far the run's earlier estimates were off.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, TypeVar

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from dojo.practice import report

if TYPE_CHECKING:
    from solutions.roofline import Cost


class Roof(Protocol):
    """The two ceilings (dojo.tools.roofline.Ceilings has them): FLOP/s and bytes/s."""

    peak_flops: float
    bandwidth: float


def roof_seconds(cost: Cost, c: Roof) -> float:
    """The least time a pass of `cost` takes under `c`: max(FLOPs / peak, bytes / bandwidth)."""
    return max(cost.flops / c.peak_flops, cost.bytes / c.bandwidth)


def probe(model, batch: int, tokens: int) -> tuple[float, float]:
    """Seconds of one prefill of `tokens` random tokens and of one decode step after it, timed after an
    untimed decode step (first-call costs): what the estimate scales from."""
    import torch

    param = next(model.parameters())
    sync = torch.cuda.synchronize if param.device.type == "cuda" else (lambda: None)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(model.config.vocab_size, (batch, tokens + 1), generator=gen).to(param.device)
    cache = model.new_cache(batch, max_len=tokens + 1)
    with torch.inference_mode():
        model.decode_step(ids[:, 0], cache)
        cache.truncate(0)
        sync()
        start = time.perf_counter()
        model.prefill(ids[:, :tokens], cache)
        sync()
        mid = time.perf_counter()
        model.decode_step(ids[:, tokens], cache)
        sync()
    return mid - start, time.perf_counter() - mid


def plan(
    kind: str, repeats: int, prefill: tuple[float, Cost, Cost], decode: tuple[float, Cost, Cost], c: Roof
) -> list[float]:
    """The estimated seconds of each pass solutions.roofline.measure_phase makes (its warm-up included):
    a prefill phase runs 1 + repeats prefills, a decode phase one prefill of the context, then
    1 + repeats decode steps. `prefill` and `decode` are (probe seconds, probe cost, the phase's pass
    cost): a pass is estimated as its probe, times the ratio of their roof_seconds under `c`."""
    prefill_s, decode_s = (
        seconds * roof_seconds(cost, c) / roof_seconds(probed, c)
        for seconds, probed, cost in (prefill, decode)
    )
    if kind == "prefill":
        return [prefill_s] * (repeats + 1)
    return [prefill_s] + [decode_s] * (repeats + 1)


class Counted:
    """`model` as measure_phase sees it: after each prefill or decode_step, `advance(done, total)` moves a
    bar by the estimated seconds of the passes made so far, out of `steps`' total."""

    def __init__(self, model, steps: list[float], advance: Callable[[float, float], object]):
        self._model, self._steps, self._advance, self._done = model, steps, advance, 0

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    def _step(self, result):
        self._done += 1
        self._advance(sum(self._steps[: self._done]), sum(self._steps))
        return result

    def prefill(self, *args, **kwargs):
        return self._step(self._model.prefill(*args, **kwargs))

    def decode_step(self, *args, **kwargs):
        return self._step(self._model.decode_step(*args, **kwargs))


def duration(seconds: float) -> str:
    """75.4 -> "1 min 15 s"; 42.2 -> "42 s"."""
    s = round(seconds)
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


T = TypeVar("T")
Phase = Callable[..., T]  # phase(name, work, counted=False, estimate=None) -> work's result


@contextmanager
def phases() -> Iterator[Phase]:
    """`phase(name, work)` runs `work()` under its own progress bar on stderr (a terminal only), named
    `name`; `work` may take a callback `advance(done, total)` when the phase counts its steps (then
    pass `counted=True`). With `estimate` (seconds), done and total are estimated seconds too, and the
    bar shows the time left: the estimate, scaled by how far the run's earlier estimates were off."""
    columns = (
        TextColumn("{task.description:<34}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[left]}"),
    )
    pace = [0.0, 0.0]  # estimated and real seconds of the estimated phases done: how far off the estimate is
    console = report.console(stderr=True)
    with Progress(*columns, console=console, disable=not console.is_terminal) as bar:

        def phase(
            name: str, work: Callable[..., T], counted: bool = False, estimate: float | None = None
        ) -> T:
            start = time.perf_counter()

            def left(done: float, total: float) -> str:  # the estimate, scaled by the run's pace so far
                if not estimate:
                    return ""
                est, real = pace[0] + done, pace[1] + time.perf_counter() - start
                return f"~{duration((total - done) * (real / est if est else 1))} left"

            def advance(done: float, total: float) -> None:
                bar.update(task, completed=done, total=total, left=left(done, total))

            task = bar.add_task(name, total=None, left=left(0, estimate or 0))
            result = work(advance) if counted else work()
            if estimate:
                pace[0], pace[1] = pace[0] + estimate, pace[1] + time.perf_counter() - start
            bar.update(task, total=1, completed=1, left="")
            return result

        yield phase
