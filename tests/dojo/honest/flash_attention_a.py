"""Kata: FlashAttention's tiled forward with an online softmax, causal tile skipping, and Flash-Decoding.

Implement `flash_attention`, `merge_partials` and `flash_decode` with plain tensor operations;
`flash_attention_backward` and `FlashAttentionFunction` are the optional part. Only plain tensor
operations are used here (no fused attention kernels).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import torch
from torch import Tensor

# tile_scores(q_tile (..., rows, D), k_tile (..., cols, D)) -> (..., rows, cols): q_tile @ k_tile^T, unscaled
TileScores = Callable[[Tensor, Tensor], Tensor]

_NEG_INF = float("-inf")


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def _default_tile_scores(q_tile: Tensor, k_tile: Tensor) -> Tensor:
    return q_tile @ k_tile.transpose(-2, -1)


def _block_size(value, name: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    try:
        b = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}") from None
    if b < 1:
        raise ValueError(f"{name} must be >= 1, got {b}")
    return b


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> tuple[int, int, int, int, int, int]:
    """Validates the shapes; returns (B, Hq, Hkv, Tq, Tk, D)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise ValueError(f"{name} must be a tensor")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, T, D), got shape {tuple(t.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    B, Hq, Tq, D = q.shape
    Bk, Hkv, Tk, Dk = k.shape
    if B != Bk:
        raise ValueError(f"q and k differ in batch size: {B} vs {Bk}")
    if D != Dk:
        raise ValueError(f"q and k differ in head dim: {D} vs {Dk}")
    if Hkv < 1 or Hq % Hkv != 0:
        raise ValueError(f"Hq ({Hq}) must be a multiple of Hkv ({Hkv})")
    return B, Hq, Hkv, Tq, Tk, D


def _compute_dtype(*tensors: Tensor) -> torch.dtype:
    # fp32 accumulators whatever the input dtype; float64 only if the caller already gave float64.
    if any(t.dtype == torch.float64 for t in tensors):
        return torch.float64
    return torch.float32


def _resolve_scale(scale: float | None, D: int) -> float:
    return 1.0 / math.sqrt(D) if scale is None else float(scale)


def _neg_inf_to_zero(x: Tensor) -> Tensor:
    """x with -inf entries replaced by 0 (used as a safe reference point for exp)."""
    return torch.where(x == _NEG_INF, torch.zeros((), dtype=x.dtype, device=x.device), x)


def _causal_tile_mask(i0: int, i1: int, j0: int, j1: int, offset: int, device) -> Tensor:
    """(rows, cols) bool mask of the future entries of one tile: key j is hidden from query i iff
    j > i + offset. Built from the tile's positions only, never a (Tq, Tk) matrix."""
    q_pos = torch.arange(i0, i1, device=device) + offset
    k_pos = torch.arange(j0, j1, device=device)
    return k_pos.unsqueeze(0) > q_pos.unsqueeze(1)


def _tile_needs_mask(i0: int, j1: int, offset: int) -> bool:
    # some key of the tile is in the future of some query of it: the last key is past the first query
    return (j1 - 1) > i0 + offset


def _tile_skipped(i1: int, j0: int, offset: int) -> bool:
    # every key of the tile is in the future of every query of it
    return j0 > (i1 - 1) + offset


# ----------------------------------------------------------------------------------------------
# forward
# ----------------------------------------------------------------------------------------------


def _flash_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool,
    block_q: int,
    block_k: int,
    scale: float,
    tile_scores: TileScores,
    dims: tuple[int, int, int, int, int, int],
) -> tuple[Tensor, Tensor]:
    """Tiled online-softmax attention. Returns (out, lse) in the compute dtype (fp32 unless float64)."""
    B, Hq, Hkv, Tq, Tk, D = dims
    group = Hq // Hkv
    offset = Tk - Tq  # query i sits at position i + offset
    cdt = _compute_dtype(q, k, v)
    device = q.device

    out = torch.zeros(B, Hq, Tq, D, dtype=cdt, device=device)
    lse = torch.full((B, Hq, Tq), _NEG_INF, dtype=cdt, device=device)

    for i0 in range(0, Tq, block_q):
        i1 = min(i0 + block_q, Tq)
        rows = i1 - i0
        q_tile = q[:, :, i0:i1, :].to(cdt)  # (B, Hq, rows, D)

        m = torch.full((B, Hq, rows), _NEG_INF, dtype=cdt, device=device)  # running max
        run_sum = torch.zeros(B, Hq, rows, dtype=cdt, device=device)  # running sum
        acc = torch.zeros(B, Hq, rows, D, dtype=cdt, device=device)  # unnormalised output

        for j0 in range(0, Tk, block_k):
            if causal and _tile_skipped(i1, j0, offset):
                break  # this and every later key tile is wholly in the future
            j1 = min(j0 + block_k, Tk)

            # kv head h // group for query head h: repeat_interleave along the head axis
            k_tile = k[:, :, j0:j1, :].to(cdt)
            v_tile = v[:, :, j0:j1, :].to(cdt)
            if group > 1:
                k_tile = k_tile.repeat_interleave(group, dim=1)  # (B, Hq, cols, D)
                v_tile = v_tile.repeat_interleave(group, dim=1)

            s = tile_scores(q_tile, k_tile).to(cdt) * scale  # (B, Hq, rows, cols)
            if causal and _tile_needs_mask(i0, j1, offset):
                s = s.masked_fill(_causal_tile_mask(i0, i1, j0, j1, offset, device), _NEG_INF)

            m_new = torch.maximum(m, s.amax(dim=-1))
            m_ref = _neg_inf_to_zero(m_new)  # rows that have seen nothing yet: avoid -inf - -inf
            alpha = torch.exp(m - m_ref)  # rescales what was accumulated under the old max
            p = torch.exp(s - m_ref.unsqueeze(-1))
            run_sum = run_sum * alpha + p.sum(dim=-1)
            acc = acc * alpha.unsqueeze(-1) + p @ v_tile
            m = m_new

        seen = run_sum > 0
        l_safe = torch.where(seen, run_sum, torch.ones((), dtype=cdt, device=device))
        out[:, :, i0:i1, :] = acc / l_safe.unsqueeze(-1)  # blind rows: acc == 0 -> zeros
        lse[:, :, i0:i1] = torch.where(
            seen, m + torch.log(l_safe), torch.full((), _NEG_INF, dtype=cdt, device=device)
        )

    return out, lse


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
    """softmax(q k^T * scale) v, one (block_q x block_k) tile at a time, never a (Tq x Tk) score matrix.

    q (B, Hq, Tq, D); k, v (B, Hkv, Tk, D) with Hq a multiple of Hkv: query head h reads kv head
    h // (Hq // Hkv). Returns out (B, Hq, Tq, D) in q's dtype; with return_lse=True, (out, lse) where
    lse (B, Hq, Tq) fp32 is each query's log(sum_j exp(scale * q_i . k_j)) over the keys it sees.
    - causal: bottom-right, query i sees key j iff j <= i + (Tk - Tq); a tile whose keys are all in the
      future of all its queries is never computed. A query that sees no key: zeros, lse -inf, never NaN.
    - scale: multiplies the scores; None means 1 / sqrt(D).
    - tile_scores: when given, every score comes from one call per computed tile, covering all batch rows
      and heads: tile_scores(q_tile, k_tile) is q_tile @ k_tile^T (before the scale); None means that product.
    Raises ValueError for non-4-D inputs, k and v of different shapes, q and k with different B or D,
    Hq not a multiple of Hkv, or block_q / block_k below 1.
    """
    dims = _check_qkv(q, k, v)
    block_q = _block_size(block_q, "block_q")
    block_k = _block_size(block_k, "block_k")
    scale_f = _resolve_scale(scale, dims[5])
    ts = _default_tile_scores if tile_scores is None else tile_scores

    out, lse = _flash_forward(
        q,
        k,
        v,
        causal=bool(causal),
        block_q=block_q,
        block_k=block_k,
        scale=scale_f,
        tile_scores=ts,
        dims=dims,
    )
    out = out.to(q.dtype)
    if return_lse:
        if lse.dtype != torch.float64:
            lse = lse.to(torch.float32)
        return out, lse
    return out


# ----------------------------------------------------------------------------------------------
# merging partial results (Flash-Decoding)
# ----------------------------------------------------------------------------------------------


def merge_partials(partials: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """Attention over the union of disjoint key sets, from each set's (out (..., D), lse (...)).

    Returns (out (..., D), lse (...)) exactly as attention over all the keys would give them, without
    overflow for lse near 1e3. A partial with lse -inf (no key) adds nothing; when every partial
    has lse -inf: zeros and -inf. Raises ValueError for no partials, or partials whose shapes differ.
    """
    partials = list(partials)
    if len(partials) == 0:
        raise ValueError("merge_partials needs at least one partial")
    out0, lse0 = partials[0]
    for idx, (o, s) in enumerate(partials):
        if o.shape != out0.shape or s.shape != lse0.shape:
            raise ValueError(
                f"partial {idx} has shapes {tuple(o.shape)}, {tuple(s.shape)}; "
                f"expected {tuple(out0.shape)}, {tuple(lse0.shape)}"
            )
    if out0.dim() < 1 or tuple(lse0.shape) != tuple(out0.shape[:-1]):
        raise ValueError(
            f"lse shape {tuple(lse0.shape)} must be out's shape {tuple(out0.shape)} without its last dim"
        )

    cdt = _compute_dtype(*(t for pair in partials for t in pair))
    out_dtype = out0.dtype if out0.dtype.is_floating_point else cdt
    device = out0.device

    lse_max = None
    for _, s in partials:
        s = s.to(cdt)
        lse_max = s if lse_max is None else torch.maximum(lse_max, s)
    ref = _neg_inf_to_zero(lse_max)  # all partials empty: any finite reference works

    total = torch.zeros_like(ref)
    weighted = torch.zeros(out0.shape, dtype=cdt, device=device)
    zero = torch.zeros((), dtype=cdt, device=device)
    for o, s in partials:
        s = s.to(cdt)
        w = torch.exp(s - ref)  # <= 1, no overflow; 0 for an empty partial
        total = total + w
        contrib = w.unsqueeze(-1) * o.to(cdt)
        # an empty partial adds exactly nothing, whatever its out holds
        weighted = weighted + torch.where((s == _NEG_INF).unsqueeze(-1), zero, contrib)

    seen = total > 0
    total_safe = torch.where(seen, total, torch.ones((), dtype=cdt, device=device))
    out = weighted / total_safe.unsqueeze(-1)
    lse = torch.where(seen, ref + torch.log(total_safe), torch.full((), _NEG_INF, dtype=cdt, device=device))
    lse_dtype = torch.float64 if cdt == torch.float64 else torch.float32
    return out.to(out_dtype), lse.to(lse_dtype)


def flash_decode(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    splits: int,
    *,
    scale: float | None = None,
    tile_scores: TileScores | None = None,
) -> Tensor:
    """Flash-Decoding: q (B, Hq, Tq, D) (Tq small, no causal mask) against k, v (B, Hkv, Tk, D) -> (B, Hq, Tq, D).

    The keys are cut into `splits` contiguous chunks of torch.tensor_split's sizes; each chunk gives a
    partial (out, lse) from exactly one tile_scores call (all queries, all the chunk's keys, all batch
    rows and heads), and merge_partials combines them. Raises ValueError unless 1 <= splits <= Tk.
    """
    dims = _check_qkv(q, k, v)
    B, Hq, Hkv, Tq, Tk, D = dims
    if isinstance(splits, bool):
        raise ValueError(f"splits must be an integer, got {splits!r}")
    try:
        splits = operator.index(splits)
    except TypeError:
        raise ValueError(f"splits must be an integer, got {splits!r}") from None
    if not 1 <= splits <= Tk:
        raise ValueError(f"splits must satisfy 1 <= splits <= Tk ({Tk}), got {splits}")
    scale_f = _resolve_scale(scale, D)
    ts = _default_tile_scores if tile_scores is None else tile_scores

    partials = []
    for k_chunk, v_chunk in zip(torch.tensor_split(k, splits, dim=2), torch.tensor_split(v, splits, dim=2)):
        n = k_chunk.shape[2]  # >= 1 since splits <= Tk
        chunk_dims = (B, Hq, Hkv, Tq, n, D)
        # one tile covering all Tq queries and all n keys of the chunk: exactly one tile_scores call
        partials.append(
            _flash_forward(
                q,
                k_chunk,
                v_chunk,
                causal=False,
                block_q=max(Tq, 1),
                block_k=n,
                scale=scale_f,
                tile_scores=ts,
                dims=chunk_dims,
            )
        )
    out, _ = merge_partials(partials)
    return out.to(q.dtype)


# ----------------------------------------------------------------------------------------------
# optional: backward
# ----------------------------------------------------------------------------------------------


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
    """Optional. (dq (B, Hq, Tq, D), dk (B, Hkv, Tk, D), dv (B, Hkv, Tk, D)) of flash_attention's output.

    out (B, Hq, Tq, D) and lse (B, Hq, Tq) are the forward's; dout (B, Hq, Tq, D) the output's gradient.
    Each tile's weights are recomputed as P = exp(scale * s - lse) from the lse given, and
    D = rowsum(dout * out) from the out given. Query heads that share a kv head sum into its dk, dv.
    A query with lse -inf (it saw no key) contributes nothing.
    """
    B, Hq, Hkv, Tq, Tk, D = _check_qkv(q, k, v)
    if tuple(out.shape) != (B, Hq, Tq, D) or tuple(dout.shape) != (B, Hq, Tq, D):
        raise ValueError("out and dout must have q's shape (B, Hq, Tq, D)")
    if tuple(lse.shape) != (B, Hq, Tq):
        raise ValueError("lse must have shape (B, Hq, Tq)")
    block_q = _block_size(block_q, "block_q")
    block_k = _block_size(block_k, "block_k")
    scale_f = _resolve_scale(scale, D)
    group = Hq // Hkv
    offset = Tk - Tq
    cdt = _compute_dtype(q, k, v, out, dout)
    device = q.device
    zero = torch.zeros((), dtype=cdt, device=device)

    # grouped view: query head h = kv_head * group + g  ->  (B, Hkv, group, T, D); kv (B, Hkv, 1, T, D)
    def grouped(t: Tensor) -> Tensor:
        return t.reshape(B, Hkv, group, *t.shape[2:])

    dq = torch.zeros(B, Hkv, group, Tq, D, dtype=cdt, device=device)
    dk = torch.zeros(B, Hkv, Tk, D, dtype=cdt, device=device)
    dv = torch.zeros(B, Hkv, Tk, D, dtype=cdt, device=device)

    for i0 in range(0, Tq, block_q):
        i1 = min(i0 + block_q, Tq)
        q_t = grouped(q[:, :, i0:i1].to(cdt))  # (B, Hkv, G, rows, D)
        do_t = grouped(dout[:, :, i0:i1].to(cdt))
        o_t = grouped(out[:, :, i0:i1].to(cdt))
        lse_t = grouped(lse[:, :, i0:i1].to(cdt))  # (B, Hkv, G, rows)
        blind = lse_t == _NEG_INF  # saw no key: contributes nothing
        lse_ref = _neg_inf_to_zero(lse_t).unsqueeze(-1)
        delta = (do_t * o_t).sum(dim=-1, keepdim=True)  # D_i = rowsum(dout_i * out_i)
        dq_acc = torch.zeros_like(q_t)

        for j0 in range(0, Tk, block_k):
            if causal and _tile_skipped(i1, j0, offset):
                break
            j1 = min(j0 + block_k, Tk)
            k_t = k[:, :, j0:j1].to(cdt).unsqueeze(2)  # (B, Hkv, 1, cols, D)
            v_t = v[:, :, j0:j1].to(cdt).unsqueeze(2)

            s = (q_t @ k_t.transpose(-2, -1)) * scale_f  # (B, Hkv, G, rows, cols)
            hidden = blind.unsqueeze(-1)
            if causal and _tile_needs_mask(i0, j1, offset):
                hidden = hidden | _causal_tile_mask(i0, i1, j0, j1, offset, device)
            p = torch.where(hidden, zero, torch.exp(s - lse_ref))

            dp = do_t @ v_t.transpose(-2, -1)  # (B, Hkv, G, rows, cols)
            ds = p * (dp - delta)

            dq_acc = dq_acc + (ds @ k_t) * scale_f
            dk[:, :, j0:j1] += ((ds.transpose(-2, -1) @ q_t) * scale_f).sum(dim=2)
            dv[:, :, j0:j1] += (p.transpose(-2, -1) @ do_t).sum(dim=2)

        dq[:, :, :, i0:i1] = dq_acc

    return (
        dq.reshape(B, Hq, Tq, D).to(q.dtype),
        dk.to(k.dtype),
        dv.to(v.dtype),
    )


class FlashAttentionFunction(torch.autograd.Function):
    """Optional. `FlashAttentionFunction.apply(q, k, v, causal, block_q, block_k, scale)`: flash_attention's
    output, differentiable through flash_attention_backward (save q, k, v, out and lse, never the weights)."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=64, block_k=64, scale=None):
        out, lse = flash_attention(
            q, k, v, causal=causal, block_q=block_q, block_k=block_k, scale=scale, return_lse=True
        )
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = bool(causal)
        ctx.block_q = block_q
        ctx.block_k = block_k
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(
            q,
            k,
            v,
            out,
            lse,
            dout.contiguous(),
            causal=ctx.causal,
            block_q=ctx.block_q,
            block_k=ctx.block_k,
            scale=ctx.scale,
        )
        return dq, dk, dv, None, None, None, None
