"""Batching kata, variant A: memory counting, roofline crossover, decode timing."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch

from solutions.roofline import arithmetic_intensity, bound, phase_cost, ridge_point


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _param_count(config) -> int:
    d = config.d_model
    hd = config.head_dim
    q = d * config.n_heads * hd
    kv = 2 * d * config.n_kv_heads * hd
    o = config.n_heads * hd * d
    mlp = 3 * d * config.d_ff
    norms = 2 * d
    per_layer = q + kv + o + mlp + norms
    return config.n_layers * per_layer + d + config.vocab_size * d


def weight_bytes(config, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of every parameter of a Llama `config` once (the tied embedding counted once)."""
    return _param_count(config) * _itemsize(dtype)


def kv_bytes_per_sequence(config, context_len: int, dtype: torch.dtype = torch.float32) -> int:
    """KV cache bytes one sequence of `context_len` positions holds: K and V, every layer and KV head."""
    if not 1 <= context_len <= config.max_seq_len:
        raise ValueError(f"context_len must be in [1, {config.max_seq_len}], got {context_len}")
    return 2 * config.n_layers * config.n_kv_heads * config.head_dim * context_len * _itemsize(dtype)


def max_batch_size(
    config, context_len: int, memory_budget_bytes: int, dtype: torch.dtype = torch.float32
) -> int:
    """The most sequences of `context_len` positions whose KV caches fit beside the weights."""
    per_seq = kv_bytes_per_sequence(config, context_len, dtype)
    weights = weight_bytes(config, dtype)
    if memory_budget_bytes < weights + per_seq:
        raise ValueError(
            f"a budget of {memory_budget_bytes:,} bytes cannot hold one sequence: the weights take "
            f"{weights:,} bytes and one sequence of {context_len} positions needs {per_seq:,} bytes "
            f"of KV cache"
        )
    return int((memory_budget_bytes - weights) // per_seq)


def _is_compute(config, batch, context_len, dtype, peak_flops, bandwidth) -> bool:
    cost = phase_cost(config, "decode", batch, 1, context_len, dtype)
    return bound(arithmetic_intensity(cost), peak_flops, bandwidth) == "compute"


def crossover_batch(
    config, peak_flops: float, bandwidth: float, context_len: int, dtype: torch.dtype = torch.float32
) -> int | None:
    """The smallest batch whose decode step (after `context_len` cached positions) is compute-bound."""
    ridge = ridge_point(peak_flops, bandwidth)  # raises for bad ceilings
    c1 = phase_cost(config, "decode", 1, 1, context_len, dtype)  # raises for bad contexts
    c2 = phase_cost(config, "decode", 2, 1, context_len, dtype)
    if bound(arithmetic_intensity(c1), peak_flops, bandwidth) == "compute":
        return 1
    f = c2.flops - c1.flops
    r = c2.bytes - c1.bytes
    if r <= 0:
        # bytes do not grow with the batch: intensity grows without bound
        limit_reached = f > 0
    else:
        limit_reached = f / r > ridge
    if not limit_reached:
        return None
    # exponential search for a compute-bound batch, then bisect (intensity rises with B)
    lo, hi = 1, 2
    while not _is_compute(config, hi, context_len, dtype, peak_flops, bandwidth):
        lo, hi = hi, hi * 2
        if hi > 1 << 80:  # the limit only just passes the ridge: give up safely
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _is_compute(config, mid, context_len, dtype, peak_flops, bandwidth):
            hi = mid
        else:
            lo = mid
    return hi


def _check_step_args(model, batch_size, context_len, repeats):
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if context_len < 0:
        raise ValueError(f"context_len must be >= 0, got {context_len}")
    if context_len + 1 > model.config.max_seq_len:
        raise ValueError(
            f"context_len + 1 = {context_len + 1} exceeds max_seq_len {model.config.max_seq_len}"
        )


@torch.no_grad()
def decode_step_time(model, batch_size: int, context_len: int, *, repeats: int = 5) -> float:
    """Median seconds of one `model.decode_step` for `batch_size` rows with `context_len` cached positions."""
    _check_step_args(model, batch_size, context_len, repeats)
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    cache = model.new_cache(batch_size, context_len + 1)
    if context_len > 0:
        prompt = torch.randint(0, vocab, (batch_size, context_len), generator=gen)
        model.prefill(prompt, cache)
    ids = torch.randint(0, vocab, (batch_size,), generator=gen)

    cache.truncate(context_len)
    model.decode_step(ids, cache)  # warm-up, untimed

    samples = []
    for _ in range(repeats):
        cache.truncate(context_len)
        start = time.perf_counter()
        model.decode_step(ids, cache)
        samples.append(time.perf_counter() - start)
    return float(statistics.median(samples))


def throughput_curve(
    model, batch_sizes: Sequence[int], context_len: int = 0, *, repeats: int = 5
) -> dict[int, float]:
    """Decode tokens/s for each batch size, in the order given."""
    sizes = list(batch_sizes)
    if not sizes:
        raise ValueError("batch_sizes must not be empty")
    curve: dict[int, float] = {}
    for b in sizes:
        curve[b] = b / decode_step_time(model, b, context_len, repeats=repeats)
    return curve
