"""Prefill vs decode latency: time to first token, time per output token, and chunked prefill.

The first token waits for the prefill of the whole prompt, so time to first token (TTFT) grows
with the prompt and soon turns compute-bound; every later token is one bandwidth-bound decode step,
so time per output token (TPOT) barely depends on the prompt. The roofline predicts both. Chunked
prefill feeds the prompt `chunk` tokens at a time, with a one-shot prefill's logits.
Not here: batching requests, sampling (greedy only), queueing, the scheduler that interleaves chunks.
"""

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
    if not (peak_flops > 0 and bandwidth > 0):
        raise ValueError(f"ceilings must be positive: peak_flops={peak_flops}, bandwidth={bandwidth}")
    return max(cost.flops / peak_flops, cost.bytes / bandwidth)  # the slower resource sets the pace


def predict_ttft(
    config, prompt_len: int, peak_flops: float, bandwidth: float, dtype: torch.dtype = torch.float32
) -> float:
    """Roofline seconds of prefilling `prompt_len` tokens (batch 1, empty cache).

    max(FLOPs / peak_flops, bytes / bandwidth) of phase_cost(config, "prefill", 1, prompt_len, 0).
    Raises ValueError for non-positive ceilings and as phase_cost does.
    """
    return _roofline_seconds(phase_cost(config, "prefill", 1, prompt_len, 0, dtype), peak_flops, bandwidth)


def predict_tpot(
    config, context_len: int, peak_flops: float, bandwidth: float, dtype: torch.dtype = torch.float32
) -> float:
    """Roofline seconds of one decode step after `context_len` cached positions (batch 1).

    Raises ValueError for non-positive ceilings and as phase_cost does.
    """
    return _roofline_seconds(phase_cost(config, "decode", 1, 1, context_len, dtype), peak_flops, bandwidth)


def measure_latency(model, prompt_len: int, new_tokens: int, *, repeats: int = 3) -> Latency:
    """Greedy-generate `new_tokens` after a seeded random prompt; median TTFT and TPOT over `repeats`.

    TTFT: from the prompt's arrival to the first new token chosen (prefill + argmax).
    TPOT: the rest of the generation divided by its new_tokens - 1 tokens (one decode step each).
    The cache (prompt_len + new_tokens - 1 positions) is allocated once, before any clock starts,
    and emptied before each run; one untimed warm-up run precedes the timed ones.
    Raises ValueError for prompt_len < 1, new_tokens < 2 (TPOT needs a second token), repeats < 1,
    or a generation longer than the model's context.
    """
    if prompt_len < 1 or new_tokens < 2 or repeats < 1:
        raise ValueError(
            f"need prompt_len >= 1, new_tokens >= 2, repeats >= 1; got {prompt_len}, {new_tokens}, {repeats}"
        )
    total = prompt_len + new_tokens - 1  # the last token is never fed back
    if total > model.config.max_seq_len:
        raise ValueError(
            f"{prompt_len} prompt + {new_tokens - 1} fed-back tokens exceed the context "
            f"of {model.config.max_seq_len}"
        )
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(model.config.vocab_size, (1, prompt_len), generator=gen)  # (1, P)
    cache = model.new_cache(1, max_len=total)
    ttfts, tpots = [], []
    for i in range(repeats + 1):
        cache.truncate(0)
        start = time.perf_counter()
        token = model.prefill(prompt, cache)[:, -1].argmax(-1)  # (1,)
        first = time.perf_counter()
        for _ in range(new_tokens - 1):
            token = model.decode_step(token, cache).argmax(-1)  # (1,)
        end = time.perf_counter()
        if i:  # run 0 warms up
            ttfts.append(first - start)
            tpots.append((end - first) / (new_tokens - 1))
    return Latency(statistics.median(ttfts), statistics.median(tpots))


def chunked_prefill(model, ids: Tensor, cache, chunk: int, attention_mask: Tensor | None = None) -> Tensor:
    """Prefill ids (B, T) into `cache` at most `chunk` tokens per model call; logits (B, T, V).

    The logits equal one `model.prefill(ids, cache, attention_mask)` (up to float rounding):
    each chunk attends to everything cached before it. `attention_mask` is (B, cache.length + T),
    True = real token, as for model.prefill; each call gets the mask up to the end of its chunk.
    Raises ValueError for a chunk that is not a positive int, empty or non-2-D ids, a mask of the
    wrong shape, and as model.prefill does (past the context; CacheFullError past the cache).
    """
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
    if ids.dim() != 2 or ids.shape[1] == 0:
        raise ValueError(f"ids must be (B, T) with T >= 1, got shape {tuple(ids.shape)}")
    start = cache.length
    if attention_mask is not None and tuple(attention_mask.shape) != (ids.shape[0], start + ids.shape[1]):
        raise ValueError(
            f"attention_mask must be (B, cached + new) = {(ids.shape[0], start + ids.shape[1])}, "
            f"got {tuple(attention_mask.shape)}"
        )
    logits = []
    for lo in range(0, ids.shape[1], chunk):
        hi = min(lo + chunk, ids.shape[1])
        mask = None if attention_mask is None else attention_mask[:, : start + hi]  # cached + new so far
        logits.append(model.prefill(ids[:, lo:hi], cache, mask))  # (B, hi - lo, V)
    return torch.cat(logits, dim=1)  # (B, T, V)
