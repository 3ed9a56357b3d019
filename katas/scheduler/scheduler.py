"""Scheduler kata: continuous batching, with chunked prefill under a token budget and preemption when KV blocks run out.

Each step the scheduler plans which running requests decode one token and which prompts prefill a
chunk, within a token budget and a budget of KV blocks; the engine runs the plan and reports the
sampled tokens and the time. The prompt gives the contract and the exact policy (`dojo start
scheduler` prints it; in a notebook it is the first cell).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


class Scheduler:
    """Iteration-level scheduling of requests that come and go (the prompt's policy)."""

    def __init__(self, config: SchedulerConfig) -> None:
        raise NotImplementedError

    def add(
        self,
        request_id: str,
        prompt: Sequence[int],
        max_new_tokens: int,
        arrival: float,
        stop_token: int | None = None,
    ) -> None:
        """Queue a request (it waits until a step admits it).

        Raises ValueError for a pending request_id, an empty prompt, max_new_tokens < 1, or a request
        that needs more blocks than the cache has.
        """
        raise NotImplementedError

    def step(self) -> StepPlan:
        """Plan the next forward pass: decodes first (preempting the newest when blocks run out), then
        prefill chunks, oldest first.

        Raises RuntimeError when the previous plan has not been completed.
        """
        raise NotImplementedError

    def complete(self, outputs: Mapping[str, int], now: float) -> list[Finished]:
        """Report the last plan: the token sampled for each chunk with sample=True, stamped `now`.
        Returns the requests that finished, in add order.

        Raises RuntimeError without a plan; ValueError when outputs miss a sampling request or name
        another one.
        """
        raise NotImplementedError

    def abort(self, request_id: str) -> None:
        """Drop a pending request and free its blocks.

        Raises ValueError for a request that is not pending, RuntimeError while a plan is out.
        """
        raise NotImplementedError

    @property
    def free_blocks(self) -> int:
        """KV blocks no request holds."""
        raise NotImplementedError

    @property
    def pending(self) -> int:
        """Requests added and not yet finished or aborted."""
        raise NotImplementedError
