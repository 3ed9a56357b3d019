"""Scheduler kata: parallel per-field maps keyed by request id and an ordered id list; budgets tracked per step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class SchedulerConfig:
    max_tokens_per_step: int
    num_blocks: int
    block_size: int

    def __post_init__(self) -> None:
        for name in ("max_tokens_per_step", "num_blocks", "block_size"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"SchedulerConfig.{name} must be a positive int, got {value!r}")


class Chunk(NamedTuple):
    request_id: str
    start: int
    ids: tuple[int, ...]
    sample: bool


class StepPlan(NamedTuple):
    prefills: list[Chunk]
    decodes: list[Chunk]
    preempted: list[str]


class Finished(NamedTuple):
    request_id: str
    tokens: tuple[int, ...]
    ttft: float
    tpot: float | None


WAITING, RUNNING = "waiting", "running"


class Scheduler:
    def __init__(self, config: SchedulerConfig) -> None:
        self._c = config
        self._ids: list[str] = []  # add order
        self._toks: dict[str, list[int]] = {}
        self._plen: dict[str, int] = {}
        self._cap: dict[str, int] = {}
        self._stop: dict[str, int | None] = {}
        self._t_in: dict[str, float] = {}
        self._stamps: dict[str, list[float]] = {}
        self._kv: dict[str, int] = {}  # positions computed
        self._blk: dict[str, int] = {}
        self._state: dict[str, str] = {}
        self._out: tuple | None = None

    def _nblk(self, positions: int) -> int:
        q, r = divmod(positions, self._c.block_size)
        return q + (r > 0)

    @property
    def free_blocks(self) -> int:
        return self._c.num_blocks - sum(self._blk.values())

    @property
    def pending(self) -> int:
        return len(self._ids)

    def add(
        self,
        request_id: str,
        prompt: Sequence[int],
        max_new_tokens: int,
        arrival: float,
        stop_token: int | None = None,
    ) -> None:
        problems = []
        if request_id in self._state:
            problems.append("that id is pending already")
        if len(prompt) < 1:
            problems.append("the prompt is empty")
        if max_new_tokens < 1:
            problems.append(f"max_new_tokens is {max_new_tokens}")
        elif prompt and self._nblk(len(prompt) + max_new_tokens - 1) > self._c.num_blocks:
            problems.append(
                f"it needs {self._nblk(len(prompt) + max_new_tokens - 1)} blocks of {self._c.num_blocks}"
            )
        if problems:
            raise ValueError(f"cannot add {request_id!r}: " + "; ".join(problems))
        self._ids.append(request_id)
        self._toks[request_id], self._plen[request_id] = list(prompt), len(prompt)
        self._cap[request_id], self._stop[request_id] = max_new_tokens, stop_token
        self._t_in[request_id], self._stamps[request_id] = arrival, []
        self._kv[request_id], self._blk[request_id], self._state[request_id] = 0, 0, WAITING

    def _decoding(self, i: str) -> bool:
        n = len(self._toks[i])
        return self._state[i] == RUNNING and n > self._plen[i] and self._kv[i] == n - 1

    def step(self) -> StepPlan:
        if self._out is not None:
            raise RuntimeError("step(): the previous plan is still waiting for complete()")
        spend = 0
        cap = self._c.max_tokens_per_step
        plan = StepPlan([], [], [])
        for i in [j for j in self._ids if self._decoding(j)]:
            if self._state[i] != RUNNING:
                continue
            if spend == cap:
                break
            target = self._nblk(len(self._toks[i]))
            while target - self._blk[i] > self.free_blocks:
                last = next(j for j in reversed(self._ids) if self._state[j] == RUNNING)
                self._state[last], self._kv[last], self._blk[last] = WAITING, 0, 0
                plan.preempted.append(last)
                if last == i:
                    break
            if self._state[i] == RUNNING:
                self._blk[i] = target
                plan.decodes.append(Chunk(i, len(self._toks[i]) - 1, (self._toks[i][-1],), True))
                spend += 1
        later = [j for j in self._ids if self._state[j] == RUNNING and not self._decoding(j)]
        later += [j for j in self._ids if self._state[j] == WAITING and not plan.preempted]
        for i in later:
            lo = self._kv[i]
            hi = lo + min(
                len(self._toks[i]) - lo,
                cap - spend,
                (self._blk[i] + self.free_blocks) * self._c.block_size - lo,
            )
            if hi <= lo:
                break
            self._state[i], self._blk[i] = RUNNING, self._nblk(hi)
            plan.prefills.append(Chunk(i, lo, tuple(self._toks[i][lo:hi]), hi == len(self._toks[i])))
            spend += hi - lo
        self._out = plan
        return plan

    def complete(self, outputs: Mapping[str, int], now: float) -> list[Finished]:
        if self._out is None:
            raise RuntimeError("complete() needs a plan from step()")
        chunks = list(self._out.prefills) + list(self._out.decodes)
        sampled = {ch.request_id for ch in chunks if ch.sample}
        if sampled ^ set(outputs):
            raise ValueError(
                f"complete(): sampled this step {sorted(sampled)}, outputs given for {sorted(outputs)}"
            )
        self._out = None
        for ch in chunks:
            self._kv[ch.request_id] = ch.start + len(ch.ids)
        finished = []
        for i in [j for j in self._ids if j in sampled]:
            tok = outputs[i]
            self._toks[i].append(tok)
            self._stamps[i].append(now)
            gen = self._toks[i][self._plen[i] :]
            if tok != self._stop[i] and len(gen) < self._cap[i]:
                continue
            s = self._stamps[i]
            finished.append(
                Finished(
                    i,
                    tuple(gen),
                    s[0] - self._t_in[i],
                    (s[-1] - s[0]) / (len(gen) - 1) if len(gen) > 1 else None,
                )
            )
            self._remove(i)
        return finished

    def _remove(self, i: str) -> None:
        self._ids.remove(i)
        for table in (
            self._toks,
            self._plen,
            self._cap,
            self._stop,
            self._t_in,
            self._stamps,
            self._kv,
            self._blk,
            self._state,
        ):
            del table[i]

    def abort(self, request_id: str) -> None:
        if self._out is not None:
            raise RuntimeError("abort() while a plan is out")
        if request_id not in self._state:
            raise ValueError(f"abort(): {request_id!r} is not pending")
        self._remove(request_id)
