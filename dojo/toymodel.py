"""A bigram language model for hidden suites: analytic next-token distributions, a countable cache.

`BigramModel(probs)` follows the model protocol of the kata prompts (config, new_cache, prefill,
decode_step, forward); the next token's distribution is `probs[prev]`, so a suite knows exactly what a
correct sampler must produce. Its cache counts positions only (`length`, `truncate`, `max_len`).
Attention masks are accepted and ignored.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import Tensor


class ToyCache:
    """A cache that only counts positions: `length`, `truncate(length)`, and a full error past max_len."""

    def __init__(self, max_len: int) -> None:
        self.length, self.max_len = 0, max_len

    def add(self, n: int) -> None:
        """Count n more positions; ValueError past max_len."""
        if self.length + n > self.max_len:
            raise ValueError(f"cache full: {self.length} positions + {n} new > max_len {self.max_len}")
        self.length += n

    def truncate(self, length: int) -> None:
        """Forget every position from `length` on; ValueError unless 0 <= length <= self.length."""
        if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= self.length:
            raise ValueError(f"truncate length must be an int in [0, {self.length}], got {length!r}")
        self.length = length


class BigramModel:
    """Next-token probabilities depend only on the previous token: probs[prev][next]."""

    def __init__(self, probs: list[list[float]], max_seq_len: int = 8192) -> None:
        """Raises ValueError unless `probs` is a square table of rows summing to 1."""
        table = torch.tensor(probs, dtype=torch.float64)
        if (
            table.dim() != 2
            or table.shape[0] != table.shape[1]
            or (table < 0).any()
            or not torch.allclose(table.sum(-1), torch.ones(len(table), dtype=torch.float64))
        ):
            raise ValueError("probs must be a square table whose rows are distributions")
        self.table = table.log().float()  # (V, V) logits
        self.config = SimpleNamespace(vocab_size=len(probs), max_seq_len=max_seq_len)

    def new_cache(self, batch_size: int, max_len: int | None = None) -> ToyCache:
        return ToyCache(self.config.max_seq_len if max_len is None else max_len)

    def prefill(self, ids: Tensor, cache: ToyCache, attention_mask: Tensor | None = None) -> Tensor:
        """ids (B, T) -> logits (B, T, V)."""
        cache.add(ids.shape[1])
        return self.table[ids]

    def decode_step(self, ids: Tensor, cache: ToyCache, attention_mask: Tensor | None = None) -> Tensor:
        """ids (B,) -> logits (B, V)."""
        cache.add(1)
        return self.table[ids]

    def forward(self, ids: Tensor) -> Tensor:
        """ids (B, T) -> logits (B, T, V), no cache."""
        return self.table[ids]
