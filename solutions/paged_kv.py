"""A paged KV cache (vLLM's PagedAttention, on CPU): blocks, block tables, copy-on-write.

One pool of `num_blocks` blocks of `block_size` positions holds every sequence's keys and values in
every layer; a sequence is a block table and takes a block only when a write runs past its last.
`fork` shares the parent's blocks, and a write into a shared block copies it first. `PagedView` is
a batch of sequences as the model's cache protocol (left-padded, masked), so one batched pass
decodes rows of different lengths. Not here: attention that reads through the block table, prefix
caching, swapping blocks to another device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


class OutOfBlocksError(RuntimeError):
    """Raised when the pool has fewer free blocks than an allocation needs."""


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


class BlockAllocator:
    """A pool of `num_blocks` blocks (ids 0 .. num_blocks - 1): a free list and reference counts."""

    def __init__(self, num_blocks: int) -> None:
        """Every block starts free. Raises ValueError unless num_blocks is a positive int."""
        _check_positive(num_blocks=num_blocks)
        self.num_blocks = num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))  # a stack: block 0 is handed out first
        self._refs = [0] * num_blocks

    @property
    def num_free(self) -> int:
        """Blocks on the free list."""
        return len(self._free)

    def allocate(self) -> int:
        """Take a free block and give it reference count 1. Raises OutOfBlocksError when none is free."""
        if not self._free:
            raise OutOfBlocksError(f"no free block: all {self.num_blocks} blocks are in use")
        block = self._free.pop()
        self._refs[block] = 1
        return block

    def share(self, block: int) -> None:
        """One more reference to a block in use. Raises ValueError for a free block or a bad id."""
        self._check_in_use(block, "share")
        self._refs[block] += 1

    def release(self, block: int) -> None:
        """One reference fewer; at 0 the block goes back on the free list.

        Raises ValueError for a free block (a double free) or a bad id.
        """
        self._check_in_use(block, "release")
        self._refs[block] -= 1
        if self._refs[block] == 0:
            self._free.append(block)

    def refcount(self, block: int) -> int:
        """The block's reference count: 0 when it is free. Raises ValueError for a bad id."""
        self._check_id(block)
        return self._refs[block]

    def _check_id(self, block: int) -> None:
        if isinstance(block, bool) or not isinstance(block, int) or not 0 <= block < self.num_blocks:
            raise ValueError(f"block must be an int in [0, {self.num_blocks}), got {block!r}")

    def _check_in_use(self, block: int, what: str) -> None:
        self._check_id(block)
        if self._refs[block] == 0:
            raise ValueError(f"cannot {what} block {block}: it is free (a double free?)")


@dataclass
class _Sequence:
    table: list[int]  # physical blocks in logical order
    lens: list[int]  # positions written, per layer

    @property
    def tokens(self) -> int:
        return min(self.lens)  # moves on once the last layer of a pass has written


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
        """Allocate the storage of every layer's blocks once. Raises ValueError for a size that is not
        a positive int."""
        _check_positive(n_layers=n_layers, n_kv_heads=n_kv_heads, head_dim=head_dim, block_size=block_size)
        self.allocator = BlockAllocator(num_blocks)
        self.n_layers, self.n_kv_heads, self.head_dim = n_layers, n_kv_heads, head_dim
        self.num_blocks, self.block_size, self.dtype = num_blocks, block_size, dtype
        # (L, k|v, blocks, bs, H_kv, D): one layer's keys and values are one contiguous piece, fast to
        # gather from. Block `num_blocks` is never allocated and stays zero: padding reads from it.
        shape = (n_layers, 2, num_blocks + 1, block_size, n_kv_heads, head_dim)
        self._blocks = torch.zeros(shape, dtype=dtype, device=device)
        self._slots = self._blocks.view(n_layers, 2, (num_blocks + 1) * block_size, n_kv_heads, head_dim)
        self._seqs: dict[int, _Sequence] = {}

    def add_sequence(self, seq_id: int) -> None:
        """Start an empty sequence (no blocks). Raises ValueError if seq_id exists or is not an int."""
        if isinstance(seq_id, bool) or not isinstance(seq_id, int):
            raise ValueError(f"seq_id must be an int, got {seq_id!r}")
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id} already exists")
        self._seqs[seq_id] = _Sequence([], [0] * self.n_layers)

    def fork(self, parent_id: int, child_id: int) -> None:
        """A new sequence sharing the parent's blocks (each gets one more reference) and length.

        Raises ValueError for an unknown parent, an existing child id, or a parent in the middle of
        a forward pass (some layers written, others not).
        """
        parent = self._seq(parent_id)
        if max(parent.lens) != parent.tokens:
            raise ValueError(f"cannot fork sequence {parent_id} between the layers of a forward pass")
        self.add_sequence(child_id)
        for block in parent.table:
            self.allocator.share(block)
        self._seqs[child_id] = _Sequence(list(parent.table), list(parent.lens))

    def free(self, seq_id: int) -> None:
        """Release every block of the sequence once and forget it. Raises ValueError if unknown."""
        for block in self._seq(seq_id).table:
            self.allocator.release(block)
        del self._seqs[seq_id]

    def num_tokens(self, seq_id: int) -> int:
        """Positions the sequence holds in every layer. Raises ValueError if unknown."""
        return self._seq(seq_id).tokens

    def block_table(self, seq_id: int) -> list[int]:
        """The sequence's blocks in logical order (a copy). Raises ValueError if unknown."""
        return list(self._seq(seq_id).table)

    @property
    def slots(self) -> Tensor:
        """Every layer's keys and values as (n_layers, k|v, slots, H_kv, D), slot = block * block_size +
        offset (a view of the pool): for a writer outside this class, through `reserve` and `written`."""
        return self._slots

    def half_written(self, seq_id: int) -> bool:
        """Whether some layers of the sequence hold a pass the others have not written yet."""
        lens = self._seq(seq_id).lens
        return min(lens) != max(lens)

    def reserve(self, seq_ids: list[int], new_tokens: int) -> list[int] | None:
        """For a writer outside this class that writes `new_tokens` more positions of every layer at once
        (a native step, then `written`): each sequence's table made to cover them, a shared block they
        start in copied first. Returns each sequence's length before them, or None, changing nothing,
        when the pool lacks the blocks. Raises ValueError for an unknown or half-written sequence."""
        seqs = [self._seq(s) for s in seq_ids]
        if half := [s for s in seq_ids if self.half_written(s)]:
            raise ValueError(f"sequences {half} hold a pass half written: finish it before reserving more")
        if sum(self.blocks_needed(s, new_tokens) for s in seq_ids) > self.allocator.num_free:
            return None
        for seq in seqs:
            self._reserve(seq, new_tokens)
        return [seq.tokens for seq in seqs]

    def written(self, seq_ids: list[int], new_tokens: int) -> None:
        """Every layer of each sequence now holds `new_tokens` more positions (written through `slots`
        after `reserve`)."""
        for seq in [self._seq(s) for s in seq_ids]:
            seq.lens[:] = [seq.tokens + new_tokens] * len(seq.lens)

    @property
    def blocks_in_use(self) -> int:
        """Blocks off the free list (a block shared by several sequences counts once)."""
        return self.num_blocks - self.allocator.num_free

    def blocks_needed(self, seq_id: int, new_tokens: int) -> int:
        """Blocks an append of `new_tokens` positions takes from the pool: the new blocks past the end
        of the table, plus a copy of the block it starts in if that block is shared. Raises ValueError
        for an unknown sequence or a new_tokens that is not a positive int."""
        seq = self._seq(seq_id)
        _check_positive(new_tokens=new_tokens)
        start, bs = seq.tokens, self.block_size
        new = max(0, -(-(start + new_tokens) // bs) - len(seq.table))  # ceil division
        shared = start // bs < len(seq.table) and self.allocator.refcount(seq.table[start // bs]) > 1
        return new + shared

    def update(self, seq_id: int, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append k, v (H_kv, T_new, D) to the sequence in this layer; its keys and values so far,
        each (H_kv, num_tokens + T_new, D).

        The first layer of a pass allocates the blocks the new positions need and copies a shared
        block it writes into. Raises OutOfBlocksError, changing nothing, when the pool cannot supply
        them; ValueError for an unknown sequence, a bad layer, a layer writing twice before the
        others caught up (or with another T_new), or k / v of the wrong shape or dtype.
        """
        self._seq(seq_id)
        if not isinstance(k, Tensor) or not isinstance(v, Tensor) or k.dim() != 3 or v.dim() != 3:
            raise ValueError(
                f"k and v must be (kv heads, T_new, head_dim) for one sequence, got {_shape(k)} and {_shape(v)}"
            )
        k_all, v_all = self._append([seq_id], layer, k[None], v[None])
        return k_all[0], v_all[0]

    def gather(self, seq_id: int, layer: int) -> tuple[Tensor, Tensor]:
        """The layer's keys and values of the sequence, each (H_kv, n, D), n the positions that layer
        holds, read through the block table in its order. Raises ValueError for an unknown sequence or a bad layer."""
        seq = self._seq(seq_id)
        self._check_layer(layer)
        k_all, v_all = self._read([seq], [seq.lens[layer]], layer)
        return k_all[0], v_all[0]

    def view(self, seq_ids: list[int]) -> PagedView:
        """The batch view over these sequences, row i = seq_ids[i].

        Raises ValueError for no ids, a repeated id or an unknown one.
        """
        seq_ids = list(seq_ids)
        if not seq_ids:
            raise ValueError("a view needs at least one sequence id")
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"a view holds each sequence once, got {seq_ids}")
        for s in seq_ids:
            self._seq(s)
        return PagedView(self, seq_ids)

    def _append(self, seq_ids: list[int], layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append row i of k, v (B, H_kv, T_new, D) to sequence seq_ids[i] in this layer, all rows or
        none; every row's keys and values so far, right-aligned: each (B, H_kv, width, D)."""
        self._check_layer(layer)
        B, H, D = len(seq_ids), self.n_kv_heads, self.head_dim
        if (
            k.shape != v.shape
            or k.dim() != 4
            or k.shape[0] != B
            or k.shape[1] != H
            or k.shape[3] != D
            or k.shape[2] < 1
        ):
            raise ValueError(
                f"k and v must be ({B} rows, kv heads {H}, T_new >= 1, head_dim {D}), "
                f"got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        if k.dtype != self.dtype or v.dtype != self.dtype:
            raise ValueError(f"k and v must be {self.dtype} like the cache, got {k.dtype} and {v.dtype}")
        T, seqs = k.shape[2], [self._seq(s) for s in seq_ids]
        for s, seq in zip(seq_ids, seqs):
            if seq.lens[layer] != seq.tokens:
                raise ValueError(
                    f"layer {layer} of sequence {s} already holds {seq.lens[layer]} positions while "
                    f"the sequence holds {seq.tokens}: every layer must write before any writes again"
                )
            if max(seq.lens) not in (seq.tokens, seq.tokens + T):
                raise ValueError(
                    f"layer {layer} of sequence {s} writes {T} positions; an earlier layer of this pass "
                    f"wrote {max(seq.lens) - seq.tokens}: every layer of a pass writes the same T_new"
                )
        first = [
            (s, seq) for s, seq in zip(seq_ids, seqs) if max(seq.lens) == seq.tokens
        ]  # rows starting a pass
        need = sum(self.blocks_needed(s, T) for s, _ in first)
        if need > self.allocator.num_free:
            many = len(first) > 1
            raise OutOfBlocksError(
                f"{'sequences' if many else 'sequence'} {', '.join(str(s) for s, _ in first)} "
                f"{'need' if many else 'needs'} {need} more blocks for {T} new positions each; "
                f"{self.allocator.num_free} of {self.num_blocks} blocks are free"
            )
        for _, seq in first:
            self._reserve(seq, T)
        lengths = [seq.tokens + T for seq in seqs]
        write = self._slot_ids(seqs, lengths)[:, -T:].reshape(-1)  # (B * T,): the new positions' slots
        self._slots[layer, 0, write] = k.transpose(1, 2).reshape(B * T, H, D)
        self._slots[layer, 1, write] = v.transpose(1, 2).reshape(B * T, H, D)
        for seq, n in zip(seqs, lengths):
            seq.lens[layer] = n
        return self._read(seqs, lengths, layer)

    def _read(self, seqs: list[_Sequence], lengths: list[int], layer: int) -> tuple[Tensor, Tensor]:
        """The first lengths[i] positions of each sequence in this layer, right-aligned after zeros:
        keys and values, each (B, H_kv, max(lengths), D). One gather for all rows."""
        slots = self._slot_ids(seqs, lengths)  # (B, width)
        kv = self._slots[layer].index_select(
            1, slots.view(-1)
        )  # (2, B * width, H_kv, D): a copy, in table order
        kv = kv.view(2, *slots.shape, self.n_kv_heads, self.head_dim).transpose(
            2, 3
        )  # (2, B, H_kv, width, D)
        return kv[0], kv[1]

    def _slot_ids(self, seqs: list[_Sequence], lengths: list[int]) -> Tensor:
        """Slot ids (block * block_size + offset) of each sequence's first lengths[i] positions, right-
        aligned in (B, width), width = max(lengths); the padding before them reads the zero block's slots."""
        bs, width, zero = self.block_size, max(lengths), self.num_blocks
        most = max(len(seq.table) for seq in seqs)
        tables = torch.tensor(
            [seq.table + [zero] * (most - len(seq.table)) + [zero] for seq in seqs]
        )  # (B, most + 1)
        pos = (
            torch.arange(width)[None] - (width - torch.tensor(lengths))[:, None]
        )  # (B, width): < 0 on padding
        block = torch.where(pos < 0, most, pos.clamp(min=0) // bs)  # column `most` is the zero block
        slots = (
            tables.gather(1, block) * bs + pos.clamp(min=0) % bs
        )  # position p lives in block table[p // bs]
        return slots.to(self._blocks.device)

    def _reserve(self, seq: _Sequence, new_tokens: int) -> None:
        """Make the table cover `new_tokens` more positions, none of them in a shared block (the caller
        has checked that the pool holds the blocks this takes)."""
        first = seq.tokens // self.block_size
        if first < len(seq.table) and self.allocator.refcount(seq.table[first]) > 1:  # copy on write
            old, new = seq.table[first], self.allocator.allocate()
            self._blocks[:, :, new] = self._blocks[:, :, old]  # every layer's keys and values
            self.allocator.release(old)
            seq.table[first] = new
        while len(seq.table) * self.block_size < seq.tokens + new_tokens:
            seq.table.append(self.allocator.allocate())

    def _seq(self, seq_id: int) -> _Sequence:
        try:
            return self._seqs[seq_id]
        except (KeyError, TypeError):
            raise ValueError(f"no sequence {seq_id!r} in the cache") from None

    def _check_layer(self, layer: int) -> None:
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise ValueError(f"layer must be an int in [0, {self.n_layers}), got {layer!r}")


def _shape(x) -> str:
    return str(tuple(x.shape)) if isinstance(x, Tensor) else type(x).__name__


class PagedView:
    """Several sequences of a PagedKVCache as one left-padded batch: the model's cache protocol."""

    def __init__(self, cache: PagedKVCache, seq_ids: list[int]) -> None:
        self.cache, self.seq_ids = cache, seq_ids

    @property
    def length(self) -> int:
        """The longest row's num_tokens."""
        return max(self.cache.num_tokens(s) for s in self.seq_ids)

    def attention_mask(self, new_tokens: int = 1) -> Tensor:
        """(B, length + new_tokens) bool: False on each row's left padding, True elsewhere.
        Raises ValueError unless new_tokens is a positive int."""
        _check_positive(new_tokens=new_tokens)
        lens = torch.tensor([self.cache.num_tokens(s) for s in self.seq_ids])
        pad = int(lens.max()) - lens  # (B,)
        return torch.arange(int(lens.max()) + new_tokens)[None] >= pad[:, None]

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Append row i of k, v (B, H_kv, T_new, D) to sequence seq_ids[i]; each (B, H_kv, length + T_new,
        D), every row right-aligned after its left padding (zeros).

        Raises OutOfBlocksError before any row writes when the pool cannot supply every row's
        blocks, and ValueError as the cache's update does (k, v must be 4-D, one row per sequence).
        """
        if not isinstance(k, Tensor) or not isinstance(v, Tensor):
            raise ValueError(f"k and v must be tensors, got {_shape(k)} and {_shape(v)}")
        return self.cache._append(self.seq_ids, layer, k, v)
