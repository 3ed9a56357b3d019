"""Kata: a paged KV cache (vLLM's PagedAttention, on CPU).

One pool of fixed-size blocks, a block table per sequence, blocks allocated as a sequence grows,
shared between forks with reference counts and copied on write; and a batch view the model
decodes several sequences of different lengths through. Replace every `raise NotImplementedError`
with your implementation; keep the names and signatures. Read the prompt first: it is the contract
(`dojo start paged_kv` prints it; in a notebook it is the first cell).
"""

from __future__ import annotations

import torch
from torch import Tensor


class OutOfBlocksError(RuntimeError):
    """Raised when the pool has fewer free blocks than an allocation needs."""


class BlockAllocator:
    """A pool of `num_blocks` blocks (ids 0 .. num_blocks - 1): a free list and reference counts."""

    def __init__(self, num_blocks: int) -> None:
        """Every block starts free. (Rejecting a num_blocks that is not a positive int is your choice.)"""
        raise NotImplementedError

    @property
    def num_free(self) -> int:
        """Blocks on the free list."""
        raise NotImplementedError

    def allocate(self) -> int:
        """Take a free block (any one) and give it reference count 1.

        Raises OutOfBlocksError when no block is free.
        """
        raise NotImplementedError

    def share(self, block: int) -> None:
        """One more reference to a block in use. Raises ValueError for a free block or a bad id."""
        raise NotImplementedError

    def release(self, block: int) -> None:
        """One reference fewer; at 0 the block goes back on the free list.

        Raises ValueError for a free block (a double free) or a bad id.
        """
        raise NotImplementedError

    def refcount(self, block: int) -> int:
        """The block's reference count: 0 when it is free. Raises ValueError for a bad id."""
        raise NotImplementedError


class PagedKVCache:
    """Keys and values of many sequences in one pool of blocks of `block_size` positions."""

    def __init__(
        self,
        n_layers: int,
        n_kv_heads: int,
        head_dim: int,
        num_blocks: int,
        block_size: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> None:
        """Allocate the storage of every layer's num_blocks blocks once, and `self.allocator`
        (a BlockAllocator of num_blocks). Keep `self.block_size`."""
        raise NotImplementedError

    def add_sequence(self, seq_id: int) -> None:
        """Start an empty sequence (no blocks). Raises ValueError if seq_id exists."""
        raise NotImplementedError

    def fork(self, parent_id: int, child_id: int) -> None:
        """A new sequence sharing the parent's blocks (each gets one more reference) and length.

        Raises ValueError for an unknown parent or an existing child id.
        """
        raise NotImplementedError

    def free(self, seq_id: int) -> None:
        """Release every block of the sequence once and forget it. Raises ValueError if unknown."""
        raise NotImplementedError

    def num_tokens(self, seq_id: int) -> int:
        """Positions the sequence holds in every layer. Raises ValueError if unknown."""
        raise NotImplementedError

    def block_table(self, seq_id: int) -> list[int]:
        """The sequence's blocks in logical order. Raises ValueError if unknown."""
        raise NotImplementedError

    def update(self, seq_id: int, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append k, v (n_kv_heads, T_new, head_dim) to the sequence in this layer.

        Returns the layer's keys and values so far, each (n_kv_heads, num_tokens + T_new, head_dim).
        The first layer to write new positions allocates the blocks they need (and copies a shared
        block it writes into). Raises OutOfBlocksError, changing nothing, when the pool cannot
        supply them; ValueError for an unknown sequence, a bad layer, a layer writing twice before
        the others caught up, or k / v of the wrong shape or dtype.
        """
        raise NotImplementedError

    def gather(self, seq_id: int, layer: int) -> tuple[Tensor, Tensor]:
        """The layer's keys and values of the sequence, each (n_kv_heads, n, head_dim), read through
        the block table. Raises ValueError for an unknown sequence or a bad layer."""
        raise NotImplementedError

    @property
    def blocks_in_use(self) -> int:
        """Blocks off the free list (a block shared by several sequences counts once)."""
        raise NotImplementedError

    def blocks_needed(self, seq_id: int, new_tokens: int) -> int:
        """Blocks appending `new_tokens` positions would take from the pool (without taking them): the
        missing ones past the table's end, plus 1 if the block the first new position falls in is shared.
        Raises ValueError for an unknown sequence."""
        raise NotImplementedError

    def view(self, seq_ids: list[int]) -> PagedView:
        """The batch view over these sequences, row i = seq_ids[i].

        Raises ValueError for no ids, a repeated id or an unknown one.
        """
        raise NotImplementedError


class PagedView:
    """Several sequences of a PagedKVCache as one left-padded batch: the model's cache protocol."""

    seq_ids: list[int]

    @property
    def length(self) -> int:
        """The longest row's num_tokens."""
        raise NotImplementedError

    def attention_mask(self, new_tokens: int = 1) -> Tensor:
        """(B, length + new_tokens) bool: False on each row's left padding, True elsewhere."""
        raise NotImplementedError

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append row i of k, v (B, n_kv_heads, T_new, head_dim) to sequence seq_ids[i].

        Returns each (B, n_kv_heads, length + T_new, head_dim), every row right-aligned after its
        left padding (zeros).
        """
        raise NotImplementedError
