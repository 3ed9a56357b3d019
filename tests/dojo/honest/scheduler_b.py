"""Scheduler kata: a Sequence object per request, a FIFO of waiting ones and an explicit block pool."""

from __future__ import annotations

import math
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


class Seq:
    def __init__(self, rid: str, seqno: int, prompt: list[int], budget: int, arrival: float, eos) -> None:
        self.rid, self.seqno = rid, seqno
        self.prompt, self.output = prompt, []
        self.budget, self.arrival, self.eos = budget, arrival, eos
        self.cached = 0
        self.nblocks = 0
        self.first_at = self.last_at = None

    def all_ids(self) -> list[int]:
        return self.prompt + self.output

    def in_decode(self) -> bool:
        return bool(self.output) and self.cached == len(self.prompt) + len(self.output) - 1


class BlockPool:
    def __init__(self, total: int) -> None:
        self.total, self.used = total, 0

    @property
    def free(self) -> int:
        return self.total - self.used

    def grow(self, seq: Seq, target: int) -> None:
        if target > seq.nblocks:
            self.used += target - seq.nblocks
            seq.nblocks = target

    def release(self, seq: Seq) -> None:
        self.used -= seq.nblocks
        seq.nblocks = 0


class Scheduler:
    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.pool = BlockPool(config.num_blocks)
        self.running: list[Seq] = []
        self.waiting: list[Seq] = []
        self.by_id: dict[str, Seq] = {}
        self.counter = 0
        self.last_plan = None

    @property
    def free_blocks(self) -> int:
        return self.pool.free

    @property
    def pending(self) -> int:
        return len(self.by_id)

    def add(
        self,
        request_id: str,
        prompt: Sequence[int],
        max_new_tokens: int,
        arrival: float,
        stop_token: int | None = None,
    ) -> None:
        if request_id in self.by_id:
            raise ValueError(f"{request_id!r} is already pending")
        if not prompt:
            raise ValueError(f"{request_id!r}: prompt must not be empty")
        if max_new_tokens < 1:
            raise ValueError(f"{request_id!r}: max_new_tokens must be >= 1")
        positions = len(prompt) + max_new_tokens - 1
        if math.ceil(positions / self.config.block_size) > self.config.num_blocks:
            raise ValueError(
                f"{request_id!r}: {positions} positions do not fit in {self.config.num_blocks} blocks"
            )
        seq = Seq(request_id, self.counter, list(prompt), max_new_tokens, arrival, stop_token)
        self.counter += 1
        self.by_id[request_id] = seq
        self.waiting.append(seq)

    def _requeue(self, seq: Seq) -> None:
        self.running.remove(seq)
        self.pool.release(seq)
        seq.cached = 0
        self.waiting.append(seq)
        self.waiting.sort(key=lambda s: s.seqno)

    def step(self) -> StepPlan:
        if self.last_plan is not None:
            raise RuntimeError("complete() the previous plan before planning another")
        bs = self.config.block_size
        tokens_left = self.config.max_tokens_per_step
        decodes, prefills, dropped = [], [], []
        for seq in [s for s in self.running if s.in_decode()]:
            if seq not in self.running:
                continue
            if tokens_left == 0:
                break
            target = math.ceil((seq.cached + 1) / bs)
            while target > seq.nblocks + self.pool.free and seq in self.running:
                victim = max(self.running, key=lambda s: s.seqno)
                self._requeue(victim)
                dropped.append(victim.rid)
            if seq not in self.running:
                continue
            self.pool.grow(seq, target)
            decodes.append(Chunk(seq.rid, seq.cached, (seq.all_ids()[-1],), True))
            tokens_left -= 1
        order = [s for s in self.running if not s.in_decode()]
        if not dropped:
            order.extend(self.waiting)
        for seq in order:
            ids = seq.all_ids()
            fits = (seq.nblocks + self.pool.free) * bs - seq.cached
            n = min(len(ids) - seq.cached, tokens_left, fits)
            if n < 1:
                break
            if seq in self.waiting:
                self.waiting.remove(seq)
                self.running.append(seq)
            self.pool.grow(seq, math.ceil((seq.cached + n) / bs))
            prefills.append(
                Chunk(
                    seq.rid, seq.cached, tuple(ids[seq.cached : seq.cached + n]), seq.cached + n == len(ids)
                )
            )
            tokens_left -= n
        self.last_plan = StepPlan(prefills, decodes, dropped)
        return self.last_plan

    def complete(self, outputs: Mapping[str, int], now: float) -> list[Finished]:
        plan = self.last_plan
        if plan is None:
            raise RuntimeError("no plan to complete")
        samplers = [c.request_id for c in plan.prefills + plan.decodes if c.sample]
        if sorted(samplers) != sorted(outputs):
            raise ValueError(f"expected tokens for exactly {sorted(samplers)}, got {sorted(outputs)}")
        self.last_plan = None
        for c in plan.prefills + plan.decodes:
            self.by_id[c.request_id].cached = c.start + len(c.ids)
        done = []
        for seq in sorted((self.by_id[r] for r in samplers), key=lambda s: s.seqno):
            tok = outputs[seq.rid]
            seq.output.append(tok)
            if seq.first_at is None:
                seq.first_at = now
            seq.last_at = now
            if tok == seq.eos or len(seq.output) == seq.budget:
                n = len(seq.output)
                done.append(
                    Finished(
                        seq.rid,
                        tuple(seq.output),
                        seq.first_at - seq.arrival,
                        None if n == 1 else (seq.last_at - seq.first_at) / (n - 1),
                    )
                )
                self._forget(seq)
        return done

    def _forget(self, seq: Seq) -> None:
        self.pool.release(seq)
        del self.by_id[seq.rid]
        if seq in self.running:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)

    def abort(self, request_id: str) -> None:
        if self.last_plan is not None:
            raise RuntimeError("a plan is out: abort between complete() and step()")
        if request_id not in self.by_id:
            raise ValueError(f"{request_id!r} is not pending")
        self._forget(self.by_id[request_id])
