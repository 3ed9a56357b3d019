"""An independent paged KV cache, written from the kata's README and stub only: a false-positive fixture for
the similarity measure (tests/dojo/test_similarity.py), and it passes the hidden suite."""

from __future__ import annotations

from collections import deque

import torch
from torch import Tensor


class OutOfBlocksError(RuntimeError):
    """Raised when the pool has fewer free blocks than an allocation needs."""


class BlockAllocator:
    def __init__(self, num_blocks: int) -> None:
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks <= 0:
            raise ValueError(f"num_blocks should be a positive integer, not {num_blocks!r}")
        self.num_blocks = num_blocks
        self.free_queue = deque(range(num_blocks))  # FIFO: the oldest freed block is reused first
        self.counts: dict[int, int] = {}

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    def allocate(self) -> int:
        if not self.free_queue:
            raise OutOfBlocksError(f"the pool of {self.num_blocks} blocks is exhausted")
        blk = self.free_queue.popleft()
        self.counts[blk] = 1
        return blk

    def _live(self, block: int) -> None:
        if not isinstance(block, int) or block < 0 or block >= self.num_blocks:
            raise ValueError(f"no block {block!r} in a pool of {self.num_blocks}")
        if block not in self.counts:
            raise ValueError(f"block {block} is not allocated")

    def share(self, block: int) -> None:
        self._live(block)
        self.counts[block] += 1

    def release(self, block: int) -> None:
        self._live(block)
        self.counts[block] -= 1
        if not self.counts[block]:
            del self.counts[block]
            self.free_queue.append(block)

    def refcount(self, block: int) -> int:
        if not isinstance(block, int) or block < 0 or block >= self.num_blocks:
            raise ValueError(f"no block {block!r} in a pool of {self.num_blocks}")
        return self.counts.get(block, 0)


class PagedKVCache:
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
        self.allocator = BlockAllocator(num_blocks)
        self.block_size = block_size
        self.n_layers, self.heads, self.dim, self.dtype = n_layers, n_kv_heads, head_dim, dtype
        # one key pool and one value pool per layer: (num_blocks, heads, block_size, dim)
        self.key_pool = [
            torch.zeros(num_blocks, n_kv_heads, block_size, head_dim, dtype=dtype, device=device)
            for _ in range(n_layers)
        ]
        self.value_pool = [torch.zeros_like(p) for p in self.key_pool]
        self.tables: dict[int, list[int]] = {}
        self.filled: dict[int, list[int]] = {}  # per sequence, positions held by each layer

    def _get(self, seq_id: int) -> list[int]:
        if seq_id not in self.tables:
            raise ValueError(f"unknown sequence id {seq_id!r}")
        return self.tables[seq_id]

    def add_sequence(self, seq_id: int) -> None:
        if seq_id in self.tables:
            raise ValueError(f"sequence id {seq_id} is taken")
        self.tables[seq_id] = []
        self.filled[seq_id] = [0] * self.n_layers

    def fork(self, parent_id: int, child_id: int) -> None:
        table = self._get(parent_id)
        if child_id in self.tables:
            raise ValueError(f"sequence id {child_id} is taken")
        for blk in table:
            self.allocator.share(blk)
        self.tables[child_id] = table[:]
        self.filled[child_id] = self.filled[parent_id][:]

    def free(self, seq_id: int) -> None:
        for blk in self._get(seq_id):
            self.allocator.release(blk)
        del self.tables[seq_id], self.filled[seq_id]

    def num_tokens(self, seq_id: int) -> int:
        self._get(seq_id)
        return min(self.filled[seq_id])

    def block_table(self, seq_id: int) -> list[int]:
        return list(self._get(seq_id))

    @property
    def blocks_in_use(self) -> int:
        return self.allocator.num_blocks - self.allocator.num_free

    def blocks_needed(self, seq_id: int, new_tokens: int) -> int:
        table, used = self._get(seq_id), self.num_tokens(seq_id)
        total = (used + new_tokens + self.block_size - 1) // self.block_size
        extra = max(total - len(table), 0)
        idx = used // self.block_size
        if used % self.block_size and idx < len(table) and self.allocator.refcount(table[idx]) > 1:
            extra += 1
        return extra

    def _make_room(self, seq_id: int, new_tokens: int) -> None:
        needed = self.blocks_needed(seq_id, new_tokens)
        if needed > self.allocator.num_free:
            raise OutOfBlocksError(
                f"sequence {seq_id}: {needed} blocks needed, {self.allocator.num_free} free"
            )
        table, used = self.tables[seq_id], self.num_tokens(seq_id)
        idx = used // self.block_size
        if used % self.block_size and idx < len(table) and self.allocator.refcount(table[idx]) > 1:
            fresh = self.allocator.allocate()
            for pool in self.key_pool + self.value_pool:
                pool[fresh].copy_(pool[table[idx]])
            self.allocator.release(table[idx])
            table[idx] = fresh
        while len(table) * self.block_size < used + new_tokens:
            table.append(self.allocator.allocate())

    def update(self, seq_id: int, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        self._get(seq_id)
        if not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise ValueError(f"layer {layer!r} out of range for {self.n_layers} layers")
        if k.shape != v.shape or k.dim() != 3 or k.shape[0] != self.heads or k.shape[2] != self.dim:
            raise ValueError(
                f"expected k, v of shape ({self.heads}, T, {self.dim}); got {tuple(k.shape)}, {tuple(v.shape)}"
            )
        if k.dtype != self.dtype or v.dtype != self.dtype:
            raise ValueError(f"expected dtype {self.dtype}; got {k.dtype}, {v.dtype}")
        pos = self.filled[seq_id][layer]
        if pos != self.num_tokens(seq_id):
            raise ValueError(f"layer {layer} is ahead of the other layers of sequence {seq_id}")
        self._make_room(seq_id, k.shape[1])
        table = self.tables[seq_id]
        for t in range(k.shape[1]):
            blk, off = table[(pos + t) // self.block_size], (pos + t) % self.block_size
            self.key_pool[layer][blk, :, off] = k[:, t]
            self.value_pool[layer][blk, :, off] = v[:, t]
        self.filled[seq_id][layer] = pos + k.shape[1]
        return self.gather(seq_id, layer)

    def gather(self, seq_id: int, layer: int) -> tuple[Tensor, Tensor]:
        table = self._get(seq_id)
        if not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise ValueError(f"layer {layer!r} out of range for {self.n_layers} layers")
        n = self.filled[seq_id][layer]
        if not table:
            empty = self.key_pool[layer].new_zeros(self.heads, 0, self.dim)
            return empty, empty.clone()
        keys = torch.cat([self.key_pool[layer][b] for b in table], dim=1)[:, :n]
        values = torch.cat([self.value_pool[layer][b] for b in table], dim=1)[:, :n]
        return keys, values

    def view(self, seq_ids: list[int]) -> PagedView:
        ids = list(seq_ids)
        if not ids or len(ids) != len(set(ids)):
            raise ValueError(f"a view needs distinct sequence ids, got {ids}")
        for s in ids:
            self._get(s)
        return PagedView(self, ids)


class PagedView:
    def __init__(self, cache: PagedKVCache, seq_ids: list[int]) -> None:
        self.cache = cache
        self.seq_ids = seq_ids

    @property
    def length(self) -> int:
        return max(self.cache.num_tokens(s) for s in self.seq_ids)

    def attention_mask(self, new_tokens: int = 1) -> Tensor:
        width = self.length
        rows = []
        for s in self.seq_ids:
            pad = width - self.cache.num_tokens(s)
            rows.append([False] * pad + [True] * (width - pad + new_tokens))
        return torch.tensor(rows, dtype=torch.bool)

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if k.dim() != 4 or k.shape[0] != len(self.seq_ids):
            raise ValueError(f"expected one row per sequence ({len(self.seq_ids)}), got {tuple(k.shape)}")
        total = sum(self.cache.blocks_needed(s, k.shape[2]) for s in self.seq_ids)
        if total > self.cache.allocator.num_free:
            raise OutOfBlocksError(f"batch needs {total} blocks, {self.cache.allocator.num_free} free")
        outs = [self.cache.update(s, layer, k[r], v[r]) for r, s in enumerate(self.seq_ids)]
        width = max(o[0].shape[1] for o in outs)
        keys = k.new_zeros(k.shape[0], k.shape[1], width, k.shape[3])
        values = keys.clone()
        for r, (kk, vv) in enumerate(outs):
            keys[r, :, width - kk.shape[1] :] = kk
            values[r, :, width - vv.shape[1] :] = vv
        return keys, values
