"""Scheduler kata, written from the prompt alone: requests as small dicts, blocks derived from computed counts."""

from __future__ import annotations

from collections.abc import Mapping
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


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class Scheduler:
    def __init__(self, config: SchedulerConfig) -> None:
        self.cfg = config
        self.reqs: dict[str, dict] = {}  # insertion order is add order
        self.held: dict[str, int] = {}  # blocks per request that holds any
        self.outstanding: StepPlan | None = None

    @property
    def free_blocks(self) -> int:
        return self.cfg.num_blocks - sum(self.held.values())

    @property
    def pending(self) -> int:
        return len(self.reqs)

    def add(self, request_id, prompt, max_new_tokens, arrival, stop_token=None) -> None:
        if request_id in self.reqs:
            raise ValueError(f"duplicate request id {request_id!r}")
        if len(prompt) == 0:
            raise ValueError("prompt is empty")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} must be at least 1")
        blocks = ceil_div(len(prompt) + max_new_tokens - 1, self.cfg.block_size)
        if blocks > self.cfg.num_blocks:
            raise ValueError(f"request needs {blocks} blocks, cache only has {self.cfg.num_blocks}")
        self.reqs[request_id] = dict(
            seq=list(prompt),
            n_prompt=len(prompt),
            limit=max_new_tokens,
            t0=arrival,
            stop=stop_token,
            done=0,
            active=False,
            times=[],
        )

    def _is_decoding(self, r: dict) -> bool:
        return r["active"] and len(r["seq"]) > r["n_prompt"] and r["done"] == len(r["seq"]) - 1

    def _evict(self, rid: str) -> None:
        r = self.reqs[rid]
        r["active"], r["done"] = False, 0
        self.held.pop(rid, None)

    def step(self) -> StepPlan:
        if self.outstanding is not None:
            raise RuntimeError("the last plan was not completed yet")
        left = self.cfg.max_tokens_per_step
        dec, pre, evicted = [], [], []
        for rid, r in list(self.reqs.items()):
            if not self._is_decoding(r):
                continue
            if left == 0:
                break
            want = ceil_div(len(r["seq"]), self.cfg.block_size)
            while want - self.held[rid] > self.free_blocks:
                newest = [k for k, x in self.reqs.items() if x["active"]][-1]
                self._evict(newest)
                evicted.append(newest)
                if newest == rid:
                    break
            if not r["active"]:
                continue
            self.held[rid] = want
            dec.append(Chunk(rid, len(r["seq"]) - 1, (r["seq"][-1],), True))
            left -= 1
        queue = [k for k, x in self.reqs.items() if x["active"] and not self._is_decoding(x)]
        if not evicted:
            queue += [k for k, x in self.reqs.items() if not x["active"]]
        for rid in queue:
            r = self.reqs[rid]
            space = (self.held.get(rid, 0) + self.free_blocks) * self.cfg.block_size - r["done"]
            take = min(len(r["seq"]) - r["done"], left, space)
            if take <= 0:
                break
            stop_at = r["done"] + take
            r["active"] = True
            self.held[rid] = ceil_div(stop_at, self.cfg.block_size)
            pre.append(Chunk(rid, r["done"], tuple(r["seq"][r["done"] : stop_at]), stop_at == len(r["seq"])))
            left -= take
        self.outstanding = StepPlan(pre, dec, evicted)
        return self.outstanding

    def complete(self, outputs: Mapping[str, int], now: float) -> list[Finished]:
        if self.outstanding is None:
            raise RuntimeError("nothing to complete: call step() first")
        work = self.outstanding.prefills + self.outstanding.decodes
        expect = {c.request_id for c in work if c.sample}
        if set(outputs) != expect:
            raise ValueError(
                f"outputs cover {sorted(outputs)} but the sampling requests are {sorted(expect)}"
            )
        self.outstanding = None
        for c in work:
            self.reqs[c.request_id]["done"] = c.start + len(c.ids)
        result = []
        for rid in [k for k in self.reqs if k in expect]:
            r = self.reqs[rid]
            r["seq"].append(outputs[rid])
            r["times"].append(now)
            made = r["seq"][r["n_prompt"] :]
            if outputs[rid] == r["stop"] or len(made) >= r["limit"]:
                times = r["times"]
                tpot = (times[-1] - times[0]) / (len(made) - 1) if len(made) > 1 else None
                result.append(Finished(rid, tuple(made), times[0] - r["t0"], tpot))
                self.held.pop(rid, None)
                del self.reqs[rid]
        return result

    def abort(self, request_id: str) -> None:
        if self.outstanding is not None:
            raise RuntimeError("cannot abort while a plan is out")
        if request_id not in self.reqs:
            raise ValueError(f"unknown request {request_id!r}")
        self.held.pop(request_id, None)
        del self.reqs[request_id]
