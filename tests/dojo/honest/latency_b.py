"""Latency kata: time to first token vs time per output token, their roofline predictions, chunked prefill."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from solutions.roofline import phase_cost


@dataclass(frozen=True)
class Latency:
    """What a user feels: seconds to the first token, then seconds per later token."""

    ttft: float
    tpot: float


def _roofline_seconds(cost, peak_flops: float, bandwidth: float) -> float:
    return max(cost.flops / peak_flops, cost.bytes / bandwidth)


def _check_ceilings(peak_flops: float, bandwidth: float) -> None:
    if not peak_flops > 0:
        raise ValueError(f"peak_flops must be positive, got {peak_flops}")
    if not bandwidth > 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth}")


def predict_ttft(
    config, prompt_len: int, peak_flops: float, bandwidth: float, dtype: torch.dtype = torch.float32
) -> float:
    """Roofline seconds of prefilling `prompt_len` tokens (batch 1, empty cache)."""
    _check_ceilings(peak_flops, bandwidth)
    cost = phase_cost(config, "prefill", 1, prompt_len, 0, dtype)
    return _roofline_seconds(cost, peak_flops, bandwidth)


def predict_tpot(
    config, context_len: int, peak_flops: float, bandwidth: float, dtype: torch.dtype = torch.float32
) -> float:
    """Roofline seconds of one decode step after `context_len` cached positions (batch 1)."""
    _check_ceilings(peak_flops, bandwidth)
    cost = phase_cost(config, "decode", 1, 1, context_len, dtype)
    return _roofline_seconds(cost, peak_flops, bandwidth)


def _one_run(model, prompt: Tensor, cache, new_tokens: int) -> tuple[float, float]:
    """(ttft, tpot) of one greedy generation."""
    cache.truncate(0)
    t0 = time.perf_counter()
    logits = model.prefill(prompt, cache)
    token = logits[:, -1, :].argmax(dim=-1)
    t1 = time.perf_counter()
    for _ in range(new_tokens - 1):
        logits = model.decode_step(token, cache)
        token = logits.argmax(dim=-1)
    t2 = time.perf_counter()
    return t1 - t0, (t2 - t1) / (new_tokens - 1)


def measure_latency(model, prompt_len: int, new_tokens: int, *, repeats: int = 3) -> Latency:
    """Greedy-generate `new_tokens` after a seeded random prompt; median TTFT and TPOT over `repeats` runs."""
    if prompt_len < 1:
        raise ValueError(f"prompt_len must be >= 1, got {prompt_len}")
    if new_tokens < 2:
        raise ValueError(f"new_tokens must be >= 2 (TPOT needs a second token), got {new_tokens}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    positions = prompt_len + new_tokens - 1
    if positions > model.config.max_seq_len:
        raise ValueError(
            f"prompt_len + new_tokens - 1 = {positions} exceeds max_seq_len={model.config.max_seq_len}"
        )

    gen = torch.Generator().manual_seed(1234)
    prompt = torch.randint(0, model.config.vocab_size, (1, prompt_len), generator=gen)
    cache = model.new_cache(1, positions)

    ttfts, tpots = [], []
    with torch.no_grad():
        _one_run(model, prompt, cache, new_tokens)  # untimed warm-up
        for _ in range(repeats):
            ttft, tpot = _one_run(model, prompt, cache, new_tokens)
            ttfts.append(ttft)
            tpots.append(tpot)
    return Latency(ttft=statistics.median(ttfts), tpot=statistics.median(tpots))


def chunked_prefill(model, ids: Tensor, cache, chunk: int, attention_mask: Tensor | None = None) -> Tensor:
    """Prefill ids (B, T) into `cache` at most `chunk` tokens per model call; logits (B, T, V)."""
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
    if not isinstance(ids, Tensor) or ids.dim() != 2 or ids.shape[1] < 1:
        shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(f"ids must be a (B, T) tensor with T >= 1, got {shape}")
    batch, total = ids.shape
    start = cache.length
    if attention_mask is not None and tuple(attention_mask.shape) != (batch, start + total):
        raise ValueError(
            f"attention_mask must have shape {(batch, start + total)}, got {tuple(attention_mask.shape)}"
        )

    pieces = []
    for lo in range(0, total, chunk):
        hi = min(lo + chunk, total)
        mask = None if attention_mask is None else attention_mask[:, : start + hi]
        pieces.append(model.prefill(ids[:, lo:hi], cache, attention_mask=mask))
    return torch.cat(pieces, dim=1)
