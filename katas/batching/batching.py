"""Batching kata: why a batch of 8 decodes costs far less than 8 decode steps, and where it stops.

A decode step reads every weight once however many rows it serves. Count the memory a batch
needs (weights + one KV cache per sequence), find the batch where decode turns compute-bound,
and measure the curve on the reference model. The prompt gives the contract (`dojo start batching`
prints it; in a notebook it is the first cell).
Use `solutions.roofline` (phase_cost, arithmetic_intensity, bound, ridge_point) for the counting.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def weight_bytes(config, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of every parameter of a Llama `config` once (the tied embedding counted once)."""
    raise NotImplementedError


def kv_bytes_per_sequence(config, context_len: int, dtype: torch.dtype = torch.float32) -> int:
    """KV cache bytes one sequence of `context_len` positions holds: K and V, every layer and KV head.

    Raises ValueError unless 1 <= context_len <= config.max_seq_len.
    """
    raise NotImplementedError


def max_batch_size(
    config, context_len: int, memory_budget_bytes: int, dtype: torch.dtype = torch.float32
) -> int:
    """The most sequences of `context_len` positions whose KV caches fit beside the weights.

    Raises ValueError if not even one sequence fits (the message names the budget, the weight
    bytes and the bytes per sequence), and for a context_len outside [1, max_seq_len].
    """
    raise NotImplementedError


def crossover_batch(
    config, peak_flops: float, bandwidth: float, context_len: int, dtype: torch.dtype = torch.float32
) -> int | None:
    """The smallest batch whose decode step (after `context_len` cached positions) is compute-bound.

    Compute-bound: the step's arithmetic intensity is at or right of the ridge. Returns None if
    no batch ever gets there. Raises ValueError as phase_cost does and for bad ceilings.
    """
    raise NotImplementedError


def decode_step_time(model, batch_size: int, context_len: int, *, repeats: int = 5) -> float:
    """Median seconds of one `model.decode_step` for `batch_size` rows with `context_len` cached positions.

    Fill the cache once (untimed), truncate it back before each step, warm up with one untimed
    step. Raises ValueError for batch_size or repeats < 1, context_len < 0, or context_len + 1
    beyond the model's context.
    """
    raise NotImplementedError


def throughput_curve(
    model, batch_sizes: Sequence[int], context_len: int = 0, *, repeats: int = 5
) -> dict[int, float]:
    """Decode tokens/s for each batch size, in the order given.

    Raises ValueError for an empty `batch_sizes`, and as decode_step_time does.
    """
    raise NotImplementedError
