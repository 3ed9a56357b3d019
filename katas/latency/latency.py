"""Latency kata: time to first token vs time per output token, their roofline predictions, chunked prefill.

The first token waits for the prefill of the whole prompt; every later token is one decode step.
Measure both on the reference model, predict both from the roofline, and prefill a long prompt
in bounded chunks without changing a single logit. The prompt gives the contract (`dojo start
latency` prints it; in a notebook it is the first cell).
Use `solutions.roofline.phase_cost` for the counting.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Latency:
    """What a user feels: seconds to the first token, then seconds per later token."""

    ttft: float
    tpot: float


def predict_ttft(
    config, prompt_len: int, peak_flops: float, bandwidth: float, dtype: torch.dtype = torch.float32
) -> float:
    """Roofline seconds of prefilling `prompt_len` tokens (batch 1, empty cache).

    Raises ValueError for non-positive ceilings and as phase_cost does.
    """
    raise NotImplementedError


def predict_tpot(
    config, context_len: int, peak_flops: float, bandwidth: float, dtype: torch.dtype = torch.float32
) -> float:
    """Roofline seconds of one decode step after `context_len` cached positions (batch 1).

    Raises ValueError for non-positive ceilings and as phase_cost does.
    """
    raise NotImplementedError


def measure_latency(model, prompt_len: int, new_tokens: int, *, repeats: int = 3) -> Latency:
    """Greedy-generate `new_tokens` after a seeded random prompt; median TTFT and TPOT over `repeats` runs.

    Raises ValueError for prompt_len < 1, new_tokens < 2, repeats < 1, or a generation longer
    than the model's context.
    """
    raise NotImplementedError


def chunked_prefill(model, ids: Tensor, cache, chunk: int, attention_mask: Tensor | None = None) -> Tensor:
    """Prefill ids (B, T) into `cache` at most `chunk` tokens per model call; logits (B, T, V).

    The logits equal those of one `model.prefill(ids, cache, attention_mask)`.
    Raises ValueError for a chunk that is not a positive int, empty or non-2-D ids, a mask of the
    wrong shape, and as model.prefill does.
    """
    raise NotImplementedError
