"""A fast decode view over the paged KV cache: one scatter and one gather per layer, whatever the batch.

solutions.paged_kv.PagedView is the kata's readable batch view: in every layer each row appends
through the cache (reserve, write, gather its blocks) and is copied into a padded batch, B small
operations per layer. At batch 8 on a CPU that bookkeeping costs more than the model's step.
`DecodeView` does it once per step instead: on construction it reserves each row's next position
(PagedKVCache's own allocation and copy-on-write) and builds two indexes into the pool's flat
slots, the new position's slot per row (B,) and every row's positions left-padded to the longest
(B, length + 1). `update` is then one indexed write of the new keys and values and one gather per
layer (index_copy_ and index_select, several times faster than advanced indexing here). Padding
gathers slot 0 (finite data; the attention mask hides it), so the numbers are PagedView's:
tests/system/test_engine.py checks logits and block tables against it.

It reads PagedKVCache's internals (`_seqs`, `_slots`, `_reserve`), as solutions/attention_fast.py
stands beside the attention kata. Left out: prefill (T_new > 1 goes through PagedView).
"""

from __future__ import annotations

import torch
from torch import Tensor

from solutions.paged_kv import OutOfBlocksError, PagedKVCache, PagedView


class DecodeView(PagedView):
    """Sequences of a PagedKVCache as one left-padded batch for a single decode step (T_new = 1).

    Raises OutOfBlocksError, changing nothing, when the pool cannot hold every row's next
    position, and ValueError as PagedKVCache.view does (no ids, a repeated or unknown id).
    """

    def __init__(self, cache: PagedKVCache, seq_ids: list[int]) -> None:
        super().__init__(cache, cache.view(seq_ids).seq_ids)  # the reference's checks of the ids
        lens = [cache.num_tokens(s) for s in self.seq_ids]
        need = sum(cache.blocks_needed(s, 1) for s in self.seq_ids)
        if need > cache.allocator.num_free:
            raise OutOfBlocksError(f"sequences {self.seq_ids} need {need} more blocks for one new position "
                                   f"each; {cache.allocator.num_free} are free")
        bs, width = cache.block_size, max(lens) + 1
        index = torch.zeros(len(lens), width, dtype=torch.long)  # (B, length + 1) flat slot ids; 0 = padding
        for row, (s, n) in enumerate(zip(self.seq_ids, lens)):
            seq = cache._seqs[s]
            cache._reserve(s, seq, 1)
            pos = torch.arange(n + 1)
            index[row, width - n - 1:] = torch.tensor(seq.table)[pos // bs] * bs + pos % bs
        self._length = max(lens)
        self._index = index.to(cache._blocks.device)
        self._new = self._index[:, -1]  # (B,) where each row's new position goes

    @property
    def length(self) -> int:
        """The longest row's positions before this step."""
        return self._length

    def update(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write row i of k, v (B, H_kv, 1, D) as sequence i's next position in this layer; every row's
        keys and values so far, each (B, H_kv, length + 1, D), left-padded. ValueError for another shape."""
        B, H, D = len(self.seq_ids), self.cache.n_kv_heads, self.cache.head_dim
        if not isinstance(k, Tensor) or not isinstance(v, Tensor) or k.shape != (B, H, 1, D) or v.shape != k.shape:
            raise ValueError(f"a decode view takes k and v of shape {(B, H, 1, D)}, got "
                             f"{tuple(getattr(k, 'shape', ()))} and {tuple(getattr(v, 'shape', ()))}")
        n = self._index.numel()
        out = []
        for kv, x in ((0, k), (1, v)):
            slots = self.cache._slots[kv, layer]  # (num_blocks * block_size, H_kv, D)
            slots.index_copy_(0, self._new, x[:, :, 0])  # row i's (H_kv, D) into its new slot
            rows = slots.index_select(0, self._index.view(n))  # (B * (length + 1), H_kv, D)
            out.append(rows.view(B, n // B, H, D).transpose(1, 2))  # (B, H_kv, length + 1, D)
        for s in self.seq_ids:
            self.cache._seqs[s].lens[layer] += 1
        return out[0], out[1]
