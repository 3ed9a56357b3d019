"""Batched decode: why a batch of 8 costs far less than 8 decode steps, and why it cannot grow forever.

A decode step reads every weight once however many rows it serves, so at batch 1 it is
bandwidth-bound and extra rows ride along almost free. Two things stop it: at `crossover_batch`
the step's intensity reaches the ridge and it turns compute-bound, and only `max_batch_size`
sequences' KV caches fit beside the weights. Counting follows `solutions.roofline.phase_cost`.
Not here: paged KV caches, continuous batching, scheduling.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch

from solutions.roofline import arithmetic_intensity, bound, phase_cost, ridge_point


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def weight_bytes(config, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of every parameter of a Llama `config` once (the tied embedding counted once)."""
    c = config
    q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    per_layer = c.d_model * (q_dim + 2 * kv_dim) + q_dim * c.d_model + 3 * c.d_model * c.d_ff + 2 * c.d_model
    params = c.n_layers * per_layer + c.vocab_size * c.d_model + c.d_model  # + embedding, final norm
    return params * _itemsize(dtype)


def kv_bytes_per_sequence(config, context_len: int, dtype: torch.dtype = torch.float32) -> int:
    """KV cache bytes one sequence of `context_len` positions holds: K and V, every layer and KV head.

    Raises ValueError unless 1 <= context_len <= config.max_seq_len.
    """
    if not 1 <= context_len <= config.max_seq_len:
        raise ValueError(f"context_len must be in [1, {config.max_seq_len}], got {context_len}")
    return 2 * config.n_layers * config.n_kv_heads * config.head_dim * context_len * _itemsize(dtype)


def max_batch_size(
    config, context_len: int, memory_budget_bytes: int, dtype: torch.dtype = torch.float32
) -> int:
    """The most sequences of `context_len` positions whose KV caches fit beside the weights.

    floor((budget - weight_bytes) / kv_bytes_per_sequence). Raises ValueError if not even one
    sequence fits (the message names the budget, the weight bytes and the bytes per sequence),
    and for a context_len outside [1, max_seq_len].
    """
    per_seq = kv_bytes_per_sequence(config, context_len, dtype)
    weights = weight_bytes(config, dtype)
    fits = (memory_budget_bytes - weights) // per_seq
    if fits < 1:
        raise ValueError(
            f"a budget of {memory_budget_bytes:,} bytes cannot hold one sequence: the weights take "
            f"{weights:,} bytes and one sequence of {context_len} positions needs {per_seq:,} bytes of KV cache"
        )
    return fits


def crossover_batch(
    config, peak_flops: float, bandwidth: float, context_len: int, dtype: torch.dtype = torch.float32
) -> int | None:
    """The smallest batch whose decode step (after `context_len` cached positions) is compute-bound.

    Compute-bound means `roofline.bound` says so for the step's arithmetic intensity (at or right
    of the ridge). Returns None if no batch ever gets there: each row adds f FLOPs and r bytes
    (its KV cache, its embedding row), so intensity B f / (W + B r) rises towards f / r, and if
    f / r is left of the ridge the step stays memory-bound at any batch.
    Raises ValueError as phase_cost does (context_len + 1 beyond the context) and for bad ceilings.
    """

    def compute_bound(batch: int) -> bool:
        cost = phase_cost(config, "decode", batch, 1, context_len, dtype)
        return bound(arithmetic_intensity(cost), peak_flops, bandwidth) == "compute"

    one, two = (phase_cost(config, "decode", b, 1, context_len, dtype) for b in (1, 2))
    f, r = two.flops - one.flops, two.bytes - one.bytes  # what each extra row adds
    w = one.bytes - r  # what the step costs whatever the batch: the weights
    ridge = ridge_point(peak_flops, bandwidth)
    if f / r <= ridge:  # the intensity's limit as B grows, never reached: the ridge is out of reach
        return None
    # B f / (w + B r) >= ridge  <=>  B >= ridge w / (f - ridge r); then fix float rounding either way
    batch = max(1, int(ridge * w / (f - ridge * r)))
    while batch > 1 and compute_bound(batch - 1):
        batch -= 1
    while not compute_bound(batch):
        batch += 1
    return batch


def decode_step_time(model, batch_size: int, context_len: int, *, repeats: int = 5) -> float:
    """Median seconds of one `model.decode_step` for `batch_size` rows with `context_len` cached positions.

    The cache is filled once with a seeded random prompt (untimed) and truncated back to
    `context_len` before each step; one untimed warm-up step precedes the `repeats` timed ones.
    Runs at torch's current thread count. Raises ValueError for batch_size or repeats < 1,
    context_len < 0, or context_len + 1 beyond the model's context.
    """
    if batch_size < 1 or repeats < 1 or context_len < 0:
        raise ValueError(
            f"need batch_size >= 1, repeats >= 1, context_len >= 0; "
            f"got {batch_size}, {repeats}, {context_len}"
        )
    if context_len + 1 > model.config.max_seq_len:
        raise ValueError(
            f"{context_len} cached + 1 new token exceeds the context of {model.config.max_seq_len}"
        )
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(model.config.vocab_size, (batch_size, context_len + 1), generator=gen)  # (B, ctx + 1)
    cache = model.new_cache(batch_size, max_len=context_len + 1)
    if context_len:
        model.prefill(ids[:, :context_len], cache)
    times = []
    for i in range(repeats + 1):
        cache.truncate(context_len)
        start = time.perf_counter()
        model.decode_step(ids[:, context_len], cache)  # (B,) -> (B, V)
        if i:  # step 0 warms up: allocator, first touch of the cache
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def throughput_curve(
    model, batch_sizes: Sequence[int], context_len: int = 0, *, repeats: int = 5
) -> dict[int, float]:
    """Decode tokens/s per batch size: every row gets a token per step, so batch / step seconds.

    Raises ValueError for an empty `batch_sizes`, and as decode_step_time does.
    """
    if not batch_sizes:
        raise ValueError("batch_sizes is empty: give at least one batch size to measure")
    return {b: b / decode_step_time(model, b, context_len, repeats=repeats) for b in batch_sizes}
