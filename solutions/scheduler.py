"""Continuous batching: an iteration-level scheduler with chunked prefill and preemption by recompute.

Each step plans one forward pass: a decode for every running request that is generating, then
prefill chunks until the step's token budget is spent. KV memory is counted in blocks; when a decode
needs one and none is free, the newest running request is preempted and later recomputed from its
prompt and tokens, so its output never changes and the oldest always progresses. It never runs a
model or reads a clock: the engine reports tokens and times with `complete`.
Not here: priorities, prefix caching, swapping to CPU memory, the model and cache (the engine's).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True)
class SchedulerConfig:
    """The two budgets of a step: tokens in its forward pass, and KV blocks of `block_size` positions."""

    max_tokens_per_step: int
    num_blocks: int
    block_size: int

    def __post_init__(self) -> None:
        for name in ("max_tokens_per_step", "num_blocks", "block_size"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ValueError(f"SchedulerConfig.{name} must be a positive int, got {value!r}")


class Chunk(NamedTuple):
    """Work for one request in one step: feed `ids` at positions start, start + 1, ...; with `sample`,
    the logits of the last position give the request's next token."""

    request_id: str
    start: int
    ids: tuple[int, ...]
    sample: bool


class StepPlan(NamedTuple):
    """One step: prompt chunks (and recomputes), decodes, and the requests preempted this step."""

    prefills: list[Chunk]
    decodes: list[Chunk]
    preempted: list[str]


class Finished(NamedTuple):
    """A request that is done: its generated tokens, time to first token, time per later token."""

    request_id: str
    tokens: tuple[int, ...]
    ttft: float
    tpot: float | None


@dataclass(eq=False)
class _Request:
    id: str
    order: int  # add order: FCFS, and "newest" for preemption
    tokens: list[int]  # prompt, then the generated tokens
    prompt_len: int
    max_new_tokens: int
    arrival: float
    stop_token: int | None
    computed: int = 0  # positions whose KV is in the cache
    blocks: int = 0
    stamps: list[float] = field(default_factory=list)  # when each generated token was reported

    @property
    def generated(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def decoding(self) -> bool:
        return self.generated >= 1 and self.computed == len(self.tokens) - 1


class Scheduler:
    """Iteration-level scheduling of requests that come and go, within a token and a block budget."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self._requests: dict[str, _Request] = {}
        self._running: list[_Request] = []  # oldest first
        self._waiting: list[_Request] = []  # oldest first
        self._free = config.num_blocks
        self._plan: StepPlan | None = None
        self._orders = itertools.count()

    @property
    def free_blocks(self) -> int:
        return self._free

    @property
    def pending(self) -> int:
        return len(self._requests)

    def _blocks_for(self, positions: int) -> int:
        return math.ceil(positions / self.config.block_size)

    def add(
        self,
        request_id: str,
        prompt: Sequence[int],
        max_new_tokens: int,
        arrival: float,
        stop_token: int | None = None,
    ) -> None:
        """Queue a request. Raises ValueError for a pending id, an empty prompt, max_new_tokens < 1, or
        a request whose positions (its last token is never fed) need more blocks than the cache has."""
        if request_id in self._requests:
            raise ValueError(f"request {request_id!r} is already pending")
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise ValueError(f"request {request_id!r} has an empty prompt")
        if type(max_new_tokens) is not int or max_new_tokens < 1:
            raise ValueError(
                f"request {request_id!r}: max_new_tokens must be an int >= 1, got {max_new_tokens!r}"
            )
        need = self._blocks_for(len(prompt) + max_new_tokens - 1)
        if need > self.config.num_blocks:
            raise ValueError(
                f"request {request_id!r} needs {need} blocks alone ({len(prompt)} prompt + {max_new_tokens} new tokens "
                f"- 1, {self.config.block_size} positions a block) but the cache has {self.config.num_blocks}"
            )
        self._requests[request_id] = request = _Request(
            request_id, next(self._orders), prompt, len(prompt), max_new_tokens, float(arrival), stop_token
        )
        self._waiting.append(request)

    def step(self) -> StepPlan:
        """Plan the next forward pass (the README's two passes). Raises RuntimeError while the previous
        plan has not been completed."""
        if self._plan is not None:
            raise RuntimeError("step() called again before complete() reported the previous plan")
        budget = self.config.max_tokens_per_step
        decodes: list[Chunk] = []
        preempted: list[str] = []
        for request in list(self._running):  # pass 1: decodes, oldest first
            if budget == 0:
                break
            if request not in self._running or not request.decoding:
                continue
            need = self._blocks_for(len(request.tokens))
            while need > request.blocks + self._free:
                victim = self._running[-1]  # the newest
                self._preempt(victim)
                preempted.append(victim.id)
                if victim is request:
                    break
            if request not in self._running:
                continue
            self._take(request, need)
            decodes.append(Chunk(request.id, len(request.tokens) - 1, (request.tokens[-1],), True))
            budget -= 1
        prefills: list[Chunk] = []
        candidates = [r for r in self._running if not r.decoding] + ([] if preempted else list(self._waiting))
        for request in candidates:  # pass 2: prefill chunks, oldest first
            room = (request.blocks + self._free) * self.config.block_size - request.computed
            n = min(len(request.tokens) - request.computed, budget, room)
            if n <= 0:
                break
            if request in self._waiting:
                self._waiting.remove(request)
                self._running.append(request)  # waiting requests are all newer than running ones
            end = request.computed + n
            self._take(request, self._blocks_for(end))
            prefills.append(
                Chunk(
                    request.id,
                    request.computed,
                    tuple(request.tokens[request.computed : end]),
                    end == len(request.tokens),
                )
            )
            budget -= n
        self._plan = StepPlan(prefills, decodes, preempted)
        return self._plan

    def _take(self, request: _Request, blocks: int) -> None:
        """Grow `request` to hold `blocks` blocks (never shrinks it)."""
        extra = max(0, blocks - request.blocks)
        self._free -= extra
        request.blocks += extra

    def _release(self, request: _Request) -> None:
        self._free += request.blocks
        request.blocks = 0
        request.computed = 0

    def _preempt(self, request: _Request) -> None:
        """Drop the request's cache (recomputed when it returns) and queue it again in its add place."""
        self._running.remove(request)
        self._release(request)
        self._waiting.append(request)
        self._waiting.sort(key=lambda r: r.order)

    def complete(self, outputs: Mapping[str, int], now: float) -> list[Finished]:
        """Report the last plan: each sampling request's token, stamped `now`. Returns the requests that
        finished, in add order. Raises RuntimeError without a plan; ValueError for outputs that miss a
        sampling request or name another one (nothing changes then)."""
        if self._plan is None:
            raise RuntimeError("complete() called without a plan: call step() first")
        chunks = self._plan.prefills + self._plan.decodes
        sampling = {c.request_id for c in chunks if c.sample}
        missing, extra = sampling - set(outputs), set(outputs) - sampling
        if missing or extra:
            raise ValueError(
                f"complete(): outputs must hold exactly the requests that sampled this step "
                f"({sorted(sampling)}); missing {sorted(missing)}, not sampling {sorted(extra)}"
            )
        self._plan = None
        for chunk in chunks:
            self._requests[chunk.request_id].computed = chunk.start + len(chunk.ids)
        finished = []
        for request in sorted((self._requests[i] for i in sampling), key=lambda r: r.order):
            token = int(outputs[request.id])
            request.tokens.append(token)
            request.stamps.append(float(now))
            if token == request.stop_token or request.generated == request.max_new_tokens:
                finished.append(self._finish(request))
        return finished

    def _finish(self, request: _Request) -> Finished:
        self._drop(request)
        first, last, n = request.stamps[0], request.stamps[-1], request.generated
        return Finished(
            request.id,
            tuple(request.tokens[request.prompt_len :]),
            first - request.arrival,
            (last - first) / (n - 1) if n > 1 else None,
        )

    def _drop(self, request: _Request) -> None:
        """Forget a request that finished or was aborted, and free its blocks."""
        del self._requests[request.id]
        (self._running if request in self._running else self._waiting).remove(request)
        self._release(request)

    def abort(self, request_id: str) -> None:
        """Drop a pending request (its client went away). Raises ValueError for a request that is not
        pending, RuntimeError while a plan is out."""
        if self._plan is not None:
            raise RuntimeError("abort() while a plan is out: call it between complete() and step()")
        if request_id not in self._requests:
            raise ValueError(f"request {request_id!r} is not pending")
        self._drop(self._requests[request_id])
