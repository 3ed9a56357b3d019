"""The int4-q8 fused step over the paged KV cache: a batch of sequences, or a prefill chunk, in one native call.

`paged_step` (a decode) and `paged_prefill` (tokens of one sequence) are what `FusedStep` runs on a
PagedView, `dojo serve`'s cache: they reserve the new positions in the pool (copy-on-write and new
blocks, as the paged_kv kata's append does), hand the native step the pool and each row's slots
(block table * block size + offset), and mark the positions written in every layer. The native step
reads keys and values through the slots, so nothing is gathered or padded. What is not plain (a pass
half written, no room, another dtype) is declined (None) and the readable path runs and raises.
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


CHUNK = 256  # the most tokens one native prefill call takes: bounds a call's working memory (rows x
# the model's widths, and the attention's mask of rows x positions), not a tuned size; a longer
# prompt goes in CHUNK-token calls


def plain(view: PagedView, ids: Tensor, attention_mask: Tensor | None, max_seq_len: int, vocab: int) -> bool:
    """Whether the fused step can take these tokens: ids (B,), one a row (a decode), or (1, T), T
    tokens of one sequence (a prefill), in the vocabulary; the cache fp32 on the CPU; every sequence's
    layers at one length, with room in the context; the mask, if any, the view's own left padding
    (what the readable path would be given)."""
    cache = view.cache
    if type(view) is not PagedView or not isinstance(cache, PagedKVCache) or ids.dtype != torch.long:
        return False
    rows = len(view.seq_ids)
    if not (ids.dim() == 1 and ids.shape[0] == rows or ids.dim() == 2 and rows == 1 and ids.shape[0] == 1):
        return False
    if ids.numel() == 0 or cache.dtype != torch.float32 or cache.slots.device.type != "cpu":
        return False
    new = ids.shape[1] if ids.dim() == 2 else 1
    for s in view.seq_ids:
        if cache.half_written(s) or cache.num_tokens(s) + new > max_seq_len:
            return False
    if attention_mask is not None and not torch.equal(attention_mask, view.attention_mask(new)):
        return False
    return bool(((ids >= 0) & (ids < vocab)).all())


def paged_step(decoder, ids: Tensor, view: PagedView) -> Tensor | None:
    """Logits (B, V) after ids (B,), row i's keys and values written at the next position of sequence
    view.seq_ids[i] in every layer; None, changing nothing, when the pool lacks the blocks (the readable
    path then raises OutOfBlocksError). `plain` must hold."""
    cache, seq_ids = view.cache, view.seq_ids
    lens = cache.reserve(seq_ids, 1)  # copies a shared last block first; a new block past the end
    if lens is None:
        return None
    table = slots(cache, seq_ids, [n + 1 for n in lens])  # (B, max + 1)
    logits = decoder.step_paged(ids.contiguous(), cache.slots, table, torch.tensor(lens))  # (B, V)
    cache.written(seq_ids, 1)
    return logits


def paged_prefill(decoder, ids: Tensor, view: PagedView, last_only: bool) -> Tensor | None:
    """Logits (1, T, V), or with last_only (1, 1, V), after ids (1, T) appended to the one sequence of
    the view, in calls of at most CHUNK tokens; None, changing nothing, when the pool lacks the blocks.
    `plain` must hold."""
    cache, (seq_id,) = view.cache, view.seq_ids
    T = ids.shape[1]
    reserved = cache.reserve([seq_id], T)
    if reserved is None:
        return None
    start = reserved[0]
    table = slots(cache, [seq_id], [start + T])[0]  # (start + T,)
    out = []
    for at in range(0, T, CHUNK):
        chunk = ids[0, at : at + CHUNK].contiguous()
        last = last_only and at + CHUNK < T  # an earlier chunk's logits are not asked for: its last row only
        logits = decoder.prefill_paged(chunk, cache.slots, table, start + at, last_only or last)
        if not last:
            out.append(logits)
    cache.written([seq_id], T)
    return torch.cat(out)[None]  # (1, T or 1, V)
