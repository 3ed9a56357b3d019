"""Kata: a KV cache for autoregressive decoding.

Preallocate per-layer key/value buffers of shape (batch_size, n_kv_heads, max_len, head_dim) once,
write new positions in place, and hand back views of what is cached so far. Replace every
`raise NotImplementedError` with your implementation; keep the names and signatures. Read the
prompt first: it is the contract (`dojo start kv_cache` prints it; in a notebook it is the first
cell).
"""

from __future__ import annotations

import torch
from torch import Tensor


class CacheFullError(ValueError):
    """Raised when an update would write past the cache's max_len."""


class KVCache:
    """Per-layer key/value buffers of shape (batch_size, n_kv_heads, max_len, head_dim)."""

    def __init__(
        self,
        n_layers: int,
        batch_size: int,
        n_kv_heads: int,
        head_dim: int,
        max_len: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        max_bytes: int | None = None,
    ) -> None:
        """Allocate every layer's key and value buffer up front (no growing later).

        Raises ValueError when `max_bytes` is given and smaller than `bytes_needed(...)`; that
        message names both numbers. (Rejecting sizes that are not positive ints is your choice.)
        """
        raise NotImplementedError

    @staticmethod
    def bytes_needed(
        n_layers: int,
        batch_size: int,
        n_kv_heads: int,
        head_dim: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
    ) -> int:
        """Bytes the keys and values of such a cache occupy:
        2 * n_layers * batch_size * n_kv_heads * head_dim * max_len * (bytes per element of dtype).
        """
        raise NotImplementedError

    @property
    def length(self) -> int:
        """Positions cached in every layer. During a forward pass that writes layers 0, 1, ...,
        n_layers - 1 in turn, it keeps its old value until the last layer has written."""
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Bytes held by the key and value buffers (all max_len positions, used or not)."""
        raise NotImplementedError

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write k, v (batch_size, n_kv_heads, T_new, head_dim) right after this layer's cached positions.

        Returns this layer's keys and values so far, each (batch_size, n_kv_heads, length + T_new,
        head_dim), as views of the preallocated buffers (not copies).
        Raises CacheFullError when length + T_new > max_len (naming those numbers; nothing is
        written), and ValueError for a layer out of range, a layer writing twice before the other
        layers have caught up, or k / v of the wrong shape or dtype.
        """
        raise NotImplementedError

    def reorder(self, index: Tensor) -> None:
        """Beam search: in every layer, row i becomes old row index[i]. `index` is a (batch_size,)
        integer tensor; rows may repeat or vanish. Raises ValueError for a bad shape, dtype or value.
        """
        raise NotImplementedError

    def truncate(self, length: int) -> None:
        """Forget every position from `length` on (speculative-decoding rollback, re-decoding).

        Raises ValueError unless 0 <= length <= self.length.
        """
        raise NotImplementedError
