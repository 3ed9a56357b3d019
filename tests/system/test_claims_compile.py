"""What the kv_cache kata's follow-ups say about torch.compile and a cache slice that grows, checked with torch.

Attention over `cache[:, :, :end]` sees a new shape every decode step: torch.compile recompiles on the
second length, then treats the length as dynamic instead of compiling once per length. The backend
here only counts compilations (no C++ compiler is needed).
"""

from __future__ import annotations

import torch
from torch._dynamo.testing import CompileCounter

LENGTHS = range(3, 9)  # six decode steps


def test_growing_slice_recompiles_then_goes_dynamic():
    """torch.compile on attention over a growing cache slice: more than one compile, fewer than one per length"""
    torch._dynamo.reset()
    counter = CompileCounter()

    @torch.compile(backend=counter)
    def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return (q @ k.transpose(-1, -2)).softmax(-1)

    cache = torch.zeros(1, 1, 16, 4)  # (B, H, max_len, D)
    q = torch.randn(1, 1, 1, 4)
    for end in LENGTHS:
        scores(q, cache[:, :, :end])
    assert counter.frame_count > 1, "a slice that grows every step did not make torch.compile recompile"
    assert counter.frame_count < len(LENGTHS), (
        f"torch.compile compiled {counter.frame_count} times for {len(LENGTHS)} lengths: the length never went dynamic"
    )
