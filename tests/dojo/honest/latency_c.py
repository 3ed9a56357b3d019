"""Latency kata: time to first token vs time per output token, their roofline predictions, chunked prefill.

The first token waits for the prefill of the whole prompt; every later token is one decode step.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from statistics import median
from time import perf_counter

import torch
from torch import Tensor

from solutions.roofline import phase_cost

PROMPT_SEED = 0


@dataclass(frozen=True)
class Latency:
    """What a user feels: seconds to the first token, then seconds per later token."""

    ttft: float
    tpot: float


def _pass_seconds(
    config,
    phase: str,
    context_len: int,
    seq_len: int,
    peak_flops: float,
    bandwidth: float,
    dtype: torch.dtype,
) -> float:
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"ceilings must be positive: peak_flops={peak_flops}, bandwidth={bandwidth}")
    cost = phase_cost(config, phase, 1, seq_len, context_len, dtype)
    compute_s = cost.flops / peak_flops
    memory_s = cost.bytes / bandwidth
    return compute_s if compute_s >= memory_s else memory_s


def predict_ttft(
    config, prompt_len: int, peak_flops: float, bandwidth: float, dtype: torch.dtype = torch.float32
) -> float:
    return _pass_seconds(config, "prefill", 0, prompt_len, peak_flops, bandwidth, dtype)


def predict_tpot(
    config, context_len: int, peak_flops: float, bandwidth: float, dtype: torch.dtype = torch.float32
) -> float:
    return _pass_seconds(config, "decode", context_len, 1, peak_flops, bandwidth, dtype)


class _GreedyTimer:
    """Runs one greedy generation on a pre-allocated cache, recording a timestamp per token."""

    def __init__(self, model, prompt: Tensor, new_tokens: int):
        self.model = model
        self.prompt = prompt
        self.new_tokens = new_tokens
        self.cache = model.new_cache(prompt.shape[0], prompt.shape[1] + new_tokens - 1)

    def run(self) -> list[float]:
        model, cache = self.model, self.cache
        cache.truncate(0)
        stamps = [perf_counter()]
        nxt = model.prefill(self.prompt, cache)[:, -1].argmax(-1)
        stamps.append(perf_counter())
        for _ in range(self.new_tokens - 1):
            nxt = model.decode_step(nxt, cache).argmax(-1)
        stamps.append(perf_counter())
        return stamps


def measure_latency(model, prompt_len: int, new_tokens: int, *, repeats: int = 3) -> Latency:
    if prompt_len < 1:
        raise ValueError(f"prompt_len must be at least 1 (got {prompt_len})")
    if new_tokens < 2:
        raise ValueError(f"new_tokens must be at least 2 to time a decode step (got {new_tokens})")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1 (got {repeats})")
    cfg = model.config
    if prompt_len + new_tokens - 1 > cfg.max_seq_len:
        raise ValueError(
            f"prompt_len + new_tokens - 1 = {prompt_len + new_tokens - 1} is past "
            f"the context ({cfg.max_seq_len})"
        )

    g = torch.Generator()
    g.manual_seed(PROMPT_SEED)
    prompt = torch.randint(cfg.vocab_size, (1, prompt_len), generator=g, dtype=torch.long)
    timer = _GreedyTimer(model, prompt, new_tokens)

    with torch.inference_mode():
        timer.run()  # warm-up, not recorded
        runs = [timer.run() for _ in range(repeats)]
    ttft = median(s[1] - s[0] for s in runs)
    tpot = median((s[2] - s[1]) / (new_tokens - 1) for s in runs)
    return Latency(ttft, tpot)


def chunked_prefill(model, ids: Tensor, cache, chunk: int, attention_mask: Tensor | None = None) -> Tensor:
    if not isinstance(chunk, numbers.Integral) or chunk <= 0:
        raise ValueError(f"chunk must be a positive int (got {chunk!r})")
    if not torch.is_tensor(ids) or ids.ndim != 2 or ids.size(1) == 0:
        raise ValueError(f"ids must be 2-D (B, T) with T >= 1 (got {getattr(ids, 'shape', ids)})")
    B, T = ids.shape
    cached = cache.length
    if attention_mask is not None:
        if attention_mask.ndim != 2 or attention_mask.shape[0] != B or attention_mask.shape[1] != cached + T:
            raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} != ({B}, {cached + T})")

    n_calls = math.ceil(T / chunk)
    outs = []
    for c in range(n_calls):
        lo, hi = c * chunk, min(T, (c + 1) * chunk)
        if attention_mask is None:
            outs.append(model.prefill(ids[:, lo:hi], cache))
        else:
            outs.append(model.prefill(ids[:, lo:hi], cache, attention_mask[:, : cached + hi]))
    return torch.cat(outs, dim=1)
