"""FlashAttention's tiled forward (online softmax), its backward from the saved LSE, and Flash-Decoding.

Each query block walks its key blocks keeping a running max, a running sum and an unnormalised output: a new tile
rescales both by exp(m_old - m_new) before adding its own. Causal tiles wholly in the future are skipped, tiles
across the diagonal masked. flash_decode splits the keys, attends to each split and merges the partial outputs
exactly through their log-sum-exps. Plain PyTorch: the CUDA kernel's loop structure, not its speed.
Not here: dropout, padding masks, variable-length batches, parallel splits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
from torch import Tensor

TileScores = Callable[[Tensor, Tensor], Tensor]


def _product(q_tile: Tensor, k_tile: Tensor) -> Tensor:
    return q_tile @ k_tile.transpose(-2, -1)  # (..., rows, cols): raw scores, before the scale


def _check_inputs(q: Tensor, k: Tensor, v: Tensor) -> None:
    """Raise ValueError, naming the shapes, unless q, k, v follow the contract."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"q, k, v must be 4-D (B, H, T, D): got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape: got {tuple(k.shape)} and {tuple(v.shape)}")
    (b, hq, _, d), (bk, hkv, _, dk) = q.shape, k.shape
    if bk != b or dk != d:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must share batch size B and head dim D")
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(f"query heads Hq={hq} must be a multiple of key/value heads Hkv={hkv}")


def _check_count(value, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _grouped(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """fp32 views for grouped-query heads: q (B, Hkv, G, Tq, D); k, v (B, Hkv, 1, Tk, D), so that query head
    h = kv * G + g reads kv head h // G by broadcasting, without copying the keys."""
    b, hq, tq, d = q.shape
    hkv = k.shape[1]
    return q.float().reshape(b, hkv, hq // hkv, tq, d), k.float().unsqueeze(2), v.float().unsqueeze(2)


def _key_tiles(
    i0: int, i1: int, tq: int, tk: int, block_k: int, causal: bool
) -> Iterator[tuple[int, int, Tensor | None]]:
    """The key tiles (j0, j1, future) query block [i0, i1) must compute; `future` (rows, cols) is True where a
    key is in a query's future (None when no key of the tile is). Bottom-right causal: query i sees j <= i + Tk - Tq."""
    offset = tk - tq
    # subtle: a tile whose first key is past the block's last query's last visible key is wholly in the future
    end = min(tk, i1 - 1 + offset + 1) if causal else tk
    for j0 in range(0, max(end, 0), block_k):
        j1 = min(j0 + block_k, tk)
        future = None
        if causal and j1 - 1 > i0 + offset:  # the tile straddles the diagonal
            i = torch.arange(i0, i1).unsqueeze(1)  # (rows, 1)
            j = torch.arange(j0, j1).unsqueeze(0)  # (1, cols)
            future = j > i + offset
        yield j0, j1, future


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    scale: float | None = None,
    return_lse: bool = False,
    tile_scores: TileScores | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """softmax(q k^T * scale) v, one (block_q x block_k) tile at a time: (B, Hq, Tq, D), and with return_lse
    also the (B, Hq, Tq) fp32 log-sum-exp of each query's scaled scores (-inf for a query that sees no key,
    whose output is zeros). Every score comes from one `tile_scores(q_tile, k_tile)` call per computed tile.
    Raises ValueError on bad shapes or block sizes."""
    _check_inputs(q, k, v)
    _check_count(block_q, "block_q")
    _check_count(block_k, "block_k")
    b, hq, tq, d = q.shape
    tk = k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    scores_of = _product if tile_scores is None else tile_scores
    qg, kg, vg = _grouped(q, k, v)
    lead = qg.shape[:3]  # (B, Hkv, G)
    out = torch.zeros(*lead, tq, d, device=q.device)
    lse = torch.full((*lead, tq), float("-inf"), device=q.device)

    for i0 in range(0, tq, block_q):
        i1 = min(i0 + block_q, tq)
        q_tile = qg[..., i0:i1, :]  # (B, Hkv, G, rows, D)
        m = torch.full((*lead, i1 - i0, 1), float("-inf"))  # running max of the scaled scores
        l = torch.zeros(*lead, i1 - i0, 1)  # running sum of exp(score - m)  # noqa: E741
        acc = torch.zeros(*lead, i1 - i0, d)  # running sum of exp(score - m) * v
        for j0, j1, future in _key_tiles(i0, i1, tq, tk, block_k, causal):
            s = scores_of(q_tile, kg[..., j0:j1, :]) * scale  # (B, Hkv, G, rows, cols)
            if future is not None:
                s = s.masked_fill(future, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            # subtle: a row that has seen no key yet has m_new = -inf; shift it by 0 so exp gives 0, not NaN
            shift = torch.where(m_new == float("-inf"), 0.0, m_new)
            p = torch.exp(s - shift)
            alpha = torch.exp(m - shift)  # what was summed under the old max, moved to the new one
            l = alpha * l + p.sum(dim=-1, keepdim=True)  # noqa: E741
            acc = alpha * acc + p @ vg[..., j0:j1, :]
            m = m_new
        out[..., i0:i1, :] = acc / l.clamp_min(torch.finfo(l.dtype).tiny)  # a blind row: 0 / tiny = 0
        lse[..., i0:i1] = torch.where(l > 0, m + torch.log(l), float("-inf")).squeeze(-1)

    out = out.reshape(b, hq, tq, d).to(q.dtype)
    return (out, lse.reshape(b, hq, tq)) if return_lse else out


def merge_partials(partials: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """Attention over the union of disjoint key sets, from each set's (out (..., D), lse (...)): the weights are
    exp(lse_s - max lse), so the merge is exact and never overflows. Returns (out, lse); a query no set gave a
    key gets zeros and -inf. Raises ValueError for no partials or shapes that differ."""
    if not partials:
        raise ValueError("merge_partials needs at least one (out, lse) partial")
    out0, lse0 = partials[0]
    for out, lse in partials:
        if out.shape != out0.shape or lse.shape != lse0.shape or out.shape[:-1] != lse.shape:
            raise ValueError(
                f"every partial must be out (..., D) with lse (...) of one shape: got out {tuple(out.shape)}, "
                f"lse {tuple(lse.shape)} beside out {tuple(out0.shape)}, lse {tuple(lse0.shape)}"
            )
    outs = torch.stack([out.float() for out, _ in partials])  # (S, ..., D)
    lses = torch.stack([lse.float() for _, lse in partials])  # (S, ...)
    top = lses.amax(dim=0)
    top = torch.where(top == float("-inf"), 0.0, top)  # every partial blind: weights exp(-inf) = 0
    weights = torch.exp(lses - top)  # (S, ...), the largest is 1
    total = weights.sum(dim=0)
    out = (weights.unsqueeze(-1) * outs).sum(dim=0) / total.clamp_min(
        torch.finfo(total.dtype).tiny
    ).unsqueeze(-1)
    lse = torch.where(total > 0, top + torch.log(total), float("-inf"))
    return out.to(out0.dtype), lse


def flash_decode(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    splits: int,
    *,
    scale: float | None = None,
    tile_scores: TileScores | None = None,
) -> Tensor:
    """Flash-Decoding: every query (Tq is 1 or small; no causal mask) against `splits` contiguous chunks of the
    keys (sizes as torch.tensor_split's, differing by at most one), one partial (out, lse) each, merged through
    the LSEs. Raises ValueError unless 1 <= splits <= Tk (a split must hold a key)."""
    _check_inputs(q, k, v)
    _check_count(splits, "splits")
    tq, tk = q.shape[2], k.shape[2]
    if splits > tk:
        raise ValueError(
            f"splits={splits} is more than the Tk={tk} keys: every split must hold at least one key"
        )
    partials = [
        flash_attention(
            q,
            ks,
            vs,
            block_q=max(tq, 1),
            block_k=ks.shape[2],
            scale=scale,
            return_lse=True,
            tile_scores=tile_scores,
        )  # one tile per split: in a GPU kernel, one thread block per (batch, head, split)
        for ks, vs in zip(k.tensor_split(splits, dim=2), v.tensor_split(splits, dim=2))
    ]
    return merge_partials(partials)[0]


def flash_attention_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dout: Tensor,
    *,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of flash_attention's output, tile by tile: each tile's weights are recomputed as
    exp(s * scale - lse) from the saved LSE (no Tq x Tk matrix kept), dS = P * (dP - rowsum(dout * out)).
    Grouped-query heads sum their gradients into the kv head they share. Raises ValueError on bad shapes."""
    _check_inputs(q, k, v)
    _check_count(block_q, "block_q")
    _check_count(block_k, "block_k")
    if out.shape != q.shape or dout.shape != q.shape or lse.shape != q.shape[:3]:
        raise ValueError(
            f"out and dout must be {tuple(q.shape)} and lse {tuple(q.shape[:3])}: got {tuple(out.shape)}, "
            f"{tuple(dout.shape)}, {tuple(lse.shape)}"
        )
    b, hq, tq, d = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qg, kg, vg = _grouped(q, k, v)
    og, dog = _grouped(out, k, v)[0], _grouped(dout, k, v)[0]  # (B, Hkv, G, Tq, D)
    lse = lse.float().reshape(qg.shape[:4]).unsqueeze(-1)  # (B, Hkv, G, Tq, 1)
    lse = torch.where(lse == float("-inf"), float("inf"), lse)  # a blind query: exp(s - inf) = 0, its weights
    delta = (dog * og).sum(dim=-1, keepdim=True)  # rowsum(dO * O) = rowsum(P * dP), (B, Hkv, G, Tq, 1)
    dq, dk, dv = torch.zeros_like(qg), torch.zeros(b, hkv, tk, d), torch.zeros(b, hkv, tk, d)

    for i0 in range(0, tq, block_q):
        i1 = min(i0 + block_q, tq)
        for j0, j1, future in _key_tiles(i0, i1, tq, tk, block_k, causal):
            s = _product(qg[..., i0:i1, :], kg[..., j0:j1, :]) * scale  # (B, Hkv, G, rows, cols)
            if future is not None:
                s = s.masked_fill(future, float("-inf"))
            p = torch.exp(s - lse[..., i0:i1, :])  # the forward's weights, recomputed
            dp = dog[..., i0:i1, :] @ vg[..., j0:j1, :].transpose(-2, -1)  # (B, Hkv, G, rows, cols)
            ds = p * (dp - delta[..., i0:i1, :])
            dv[..., j0:j1, :] += (p.transpose(-2, -1) @ dog[..., i0:i1, :]).sum(dim=2)  # over the group
            dk[..., j0:j1, :] += (ds.transpose(-2, -1) @ qg[..., i0:i1, :]).sum(dim=2) * scale
            dq[..., i0:i1, :] += (ds @ kg[..., j0:j1, :]) * scale

    return dq.reshape(b, hq, tq, d).to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class FlashAttentionFunction(torch.autograd.Function):
    """flash_attention with flash_attention_backward as its gradient: it saves q, k, v, the output and the LSE,
    never the weights. `FlashAttentionFunction.apply(q, k, v, causal, block_q, block_k, scale)`."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=64, block_k=64, scale=None):
        out, lse = flash_attention(
            q, k, v, causal=causal, block_q=block_q, block_k=block_k, scale=scale, return_lse=True
        )
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = {"causal": causal, "block_q": block_q, "block_k": block_k, "scale": scale}
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, dout, **ctx.options)
        return dq, dk, dv, None, None, None, None
