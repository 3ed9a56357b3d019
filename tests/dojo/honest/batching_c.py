"""Batching: memory budget, roofline crossover and measured decode throughput (variant B)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from time import perf_counter

import torch

from solutions import roofline

# ---------------------------------------------------------------- memory


def _bytes_of(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _layer_params(cfg) -> int:
    d, hd = cfg.d_model, cfg.head_dim
    attn = d * (cfg.n_heads * hd) * 2 + d * (cfg.n_kv_heads * hd) * 2  # Q, O, K, V
    mlp = 3 * d * cfg.d_ff  # gate, up, down
    return attn + mlp + 2 * d  # + two RMSNorms


def weight_bytes(config, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of every parameter of a Llama `config` once (the tied embedding counted once)."""
    n = config.n_layers * _layer_params(config) + config.d_model + config.vocab_size * config.d_model
    return n * _bytes_of(dtype)


def kv_bytes_per_sequence(config, context_len: int, dtype: torch.dtype = torch.float32) -> int:
    """KV cache bytes one sequence of `context_len` positions holds: K and V, every layer and KV head."""
    if context_len < 1 or context_len > config.max_seq_len:
        raise ValueError(f"context_len {context_len} outside [1, max_seq_len={config.max_seq_len}]")
    per_position = 2 * config.n_layers * config.n_kv_heads * config.head_dim
    return per_position * context_len * _bytes_of(dtype)


def max_batch_size(
    config, context_len: int, memory_budget_bytes: int, dtype: torch.dtype = torch.float32
) -> int:
    """The most sequences of `context_len` positions whose KV caches fit beside the weights."""
    seq = kv_bytes_per_sequence(config, context_len, dtype)
    w = weight_bytes(config, dtype)
    n = (memory_budget_bytes - w) // seq
    if n < 1:
        raise ValueError(
            f"a budget of {memory_budget_bytes:,} bytes cannot hold one sequence: the weights take {w:,} bytes and one "
            f"sequence of {context_len} positions needs {seq:,} bytes of KV cache"
        )
    return int(n)


# ---------------------------------------------------------------- crossover


def crossover_batch(
    config, peak_flops: float, bandwidth: float, context_len: int, dtype: torch.dtype = torch.float32
) -> int | None:
    """The smallest batch whose decode step (after `context_len` cached positions) is compute-bound."""
    ridge = roofline.ridge_point(peak_flops, bandwidth)

    def cost(b):
        return roofline.phase_cost(config, "decode", b, 1, context_len, dtype)

    def compute_bound(b) -> bool:
        ai = roofline.arithmetic_intensity(cost(b))
        return roofline.bound(ai, peak_flops, bandwidth) == "compute"

    one, two = cost(1), cost(2)
    if compute_bound(1):
        return 1
    f = two.flops - one.flops  # FLOPs each extra row adds
    r = two.bytes - one.bytes  # bytes each extra row adds
    f0 = one.flops - f  # FLOPs independent of the batch (0 for this model)
    w = one.bytes - r  # bytes read once whatever the batch: the weights
    # intensity(B) = (f0 + B f) / (w + B r) >= ridge  <=>  B (f - ridge r) >= ridge w - f0
    slope = f - ridge * r
    if slope <= 0:
        return None
    guess = max(1, math.ceil((ridge * w - f0) / slope))
    # float rounding: settle on the exact answer with the reference's own verdict
    b = guess
    while b > 1 and compute_bound(b - 1):
        b -= 1
    steps = 0
    while not compute_bound(b):
        b += 1
        steps += 1
        if steps > 10_000:
            return None
    return b


# ---------------------------------------------------------------- measuring


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2


def decode_step_time(model, batch_size: int, context_len: int, *, repeats: int = 5) -> float:
    """Median seconds of one `model.decode_step` for `batch_size` rows with `context_len` cached positions."""
    cfg = model.config
    if batch_size < 1 or repeats < 1:
        raise ValueError(f"batch_size ({batch_size}) and repeats ({repeats}) must be >= 1")
    if context_len < 0 or context_len + 1 > cfg.max_seq_len:
        raise ValueError(f"context_len {context_len} must be in [0, {cfg.max_seq_len - 1}]")

    rng = torch.Generator()
    rng.manual_seed(1234)
    with torch.inference_mode():
        cache = model.new_cache(batch_size, context_len + 1)
        if context_len:
            model.prefill(torch.randint(cfg.vocab_size, (batch_size, context_len), generator=rng), cache)
        token = torch.randint(cfg.vocab_size, (batch_size,), generator=rng)

        timings = []
        for i in range(repeats + 1):
            cache.truncate(context_len)
            t0 = perf_counter()
            model.decode_step(token, cache)
            t1 = perf_counter()
            if i:  # step 0 is the untimed warm-up
                timings.append(t1 - t0)
    return _median(timings)


def throughput_curve(
    model, batch_sizes: Sequence[int], context_len: int = 0, *, repeats: int = 5
) -> dict[int, float]:
    """Decode tokens/s for each batch size, in the order given."""
    if len(batch_sizes) == 0:
        raise ValueError("no batch sizes given")
    return {b: b / decode_step_time(model, b, context_len, repeats=repeats) for b in batch_sizes}
