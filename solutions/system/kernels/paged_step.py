"""The int4-q8 fused decode step over the paged KV cache: one native call for a batch of sequences.

`paged_step` is what `FusedStep` runs when `dojo serve`'s engine decodes a PagedView: it reserves
each sequence's next position in the pool (copy-on-write and new blocks, as the paged_kv kata's
append does), hands the native step the pool and every row's slots (block table * block size +
offset), and marks the position written in every layer. The native step reads each row's keys and
values through those slots, so nothing is gathered or padded. A step that is not plain (a pass half
written, no room, another dtype) is declined (None) and the readable path runs, raising what it raises.
"""

from __future__ import annotations

import torch
from torch import Tensor

from solutions.paged_kv import PagedKVCache, PagedView


def slots(cache: PagedKVCache, seq_ids: list[int], lengths: list[int]) -> Tensor:
    """(B, max(lengths)) int64: row i's slot of each position 0..lengths[i] - 1 of sequence seq_ids[i]
    (left-aligned; past a row's length its last block's slots repeat, unread)."""
    bs = cache.block_size
    tables = [cache.block_table(s) for s in seq_ids]
    width = max(lengths)
    most = max(len(t) for t in tables)
    table = torch.tensor([t + [t[-1]] * (most - len(t)) for t in tables])  # (B, most)
    pos = torch.arange(width)  # (width,)
    block = (pos // bs).clamp(max=most - 1)[None].expand(len(seq_ids), -1)  # (B, width)
    return table.gather(1, block) * bs + pos % bs  # (B, width)


def plain(view: PagedView, ids: Tensor, attention_mask: Tensor | None, max_seq_len: int, vocab: int) -> bool:
    """Whether the fused step can take this decode: ids (B,) one a row in the vocabulary; the cache fp32
    on the CPU; every sequence's layers at one length, with room in the context; the mask, if any, the
    view's own left padding (what the readable path would be given)."""
    cache = view.cache
    if type(view) is not PagedView or not isinstance(cache, PagedKVCache):
        return False
    if ids.dim() != 1 or ids.dtype != torch.long or ids.shape[0] != len(view.seq_ids):
        return False
    if cache.dtype != torch.float32 or cache._blocks.device.type != "cpu":
        return False
    for s in view.seq_ids:
        lens = cache._seq(s).lens
        if min(lens) != max(lens) or lens[0] + 1 > max_seq_len:
            return False
    if attention_mask is not None and not torch.equal(attention_mask, view.attention_mask()):
        return False
    return bool(((ids >= 0) & (ids < vocab)).all())


def paged_step(decoder, ids: Tensor, view: PagedView) -> Tensor | None:
    """Logits (B, V) after ids (B,), row i's keys and values written at the next position of sequence
    view.seq_ids[i] in every layer; None, changing nothing, when the pool lacks the blocks (the readable
    path then raises OutOfBlocksError). `plain` must hold."""
    cache, seq_ids = view.cache, view.seq_ids
    if sum(cache.blocks_needed(s, 1) for s in seq_ids) > cache.allocator.num_free:
        return None
    seqs = [cache._seq(s) for s in seq_ids]
    for seq in seqs:
        cache._reserve(seq, 1)  # copies a shared last block first; a new block past the end
    lens = [seq.tokens for seq in seqs]
    table = slots(cache, seq_ids, [n + 1 for n in lens])  # (B, max + 1)
    logits = decoder.step_paged(ids.contiguous(), cache._slots, table, torch.tensor(lens))  # (B, V)
    for seq, n in zip(seqs, lens):
        seq.lens[:] = [n + 1] * len(seq.lens)
    return logits
