"""Speculative decoding: a draft model proposes k tokens, the target verifies them in one pass.

Your task: the loop (`speculative_generate`: draft, verify with one target `prefill`, keep the
accepted tokens and one of the target's, roll both KV caches back), the rejection-sampling rule that
keeps sampled output distributed as the target's (`verify`), the acceptance probability of one
draft token, and the expected speed-up formulas.
The prompt is the contract (`dojo start speculative` prints it; in a notebook it is the first cell).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class SpeculativeResult:
    """New tokens of one `speculative_generate` call, and how the drafts fared."""

    tokens: list[int]  # new tokens; an EOS, when one came, is the last
    drafted: int  # draft tokens proposed, over all rounds
    accepted: int  # draft tokens the target kept
    rounds: int  # target forward passes, one per round

    @property
    def acceptance_rate(self) -> float:
        """accepted / drafted (0.0 when nothing was drafted)."""
        raise NotImplementedError("SpeculativeResult.acceptance_rate")


def acceptance_probability(p: Tensor, q: Tensor) -> float:
    """The probability that a draft token x ~ q is accepted by a target with distribution p.

    Raises ValueError unless p and q are 1-D distributions of the same size.
    """
    raise NotImplementedError("acceptance_probability")


def verify(
    draft_tokens: Tensor, draft_probs: Tensor, target_probs: Tensor, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """One round of rejection sampling for B independent rows.

    draft_tokens (B, k) long, drawn from draft_probs (B, k, V) = q; target_probs (B, k + 1, V) = p.
    Returns accepted (B,) in [0, k] and next_token (B,): row b keeps draft_tokens[b, :accepted[b]],
    then next_token[b]. Raises ValueError, naming the argument, for mismatched shapes.
    """
    raise NotImplementedError("verify")


def expected_tokens_per_round(alpha: float, k: int) -> float:
    """Expected tokens one round yields when each draft is accepted with probability alpha.

    Raises ValueError for alpha outside [0, 1] or k < 1.
    """
    raise NotImplementedError("expected_tokens_per_round")


def expected_speedup(alpha: float, k: int, c: float) -> float:
    """Expected speed-up over plain target decoding, a draft step costing c target steps.

    Raises ValueError for alpha outside [0, 1], k < 1 or c < 0.
    """
    raise NotImplementedError("expected_speedup")


def speculative_generate(
    target,
    draft,
    prompt: list[int],
    *,
    max_new_tokens: int,
    k: int = 4,
    temperature: float = 0.0,
    seed: int | None = None,
    eos_token_id: int | list[int] | None = None,
    on_token: Callable[[int], None] | None = None,
) -> SpeculativeResult:
    """Continue `prompt` by up to `max_new_tokens` tokens, `draft` proposing and `target` verifying.

    Both models follow the model protocol (config, new_cache, prefill, decode_step; the cache has
    length and truncate). temperature 0 is greedy; temperature > 0 samples with a generator seeded
    with `seed`. `on_token(token)` is called for each new token as it is kept.
    Raises ValueError, naming the argument, for an invalid argument (the prompt's "Errors").
    """
    raise NotImplementedError("speculative_generate")
