"""Kata: FlashAttention's tiled forward with an online softmax, causal tile skipping, and Flash-Decoding.

Plain PyTorch: the loop structure of the GPU kernels, not their speed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

# tile_scores(q_tile (..., rows, D), k_tile (..., cols, D)) -> (..., rows, cols): q_tile @ k_tile^T, unscaled
TileScores = Callable[[Tensor, Tensor], Tensor]

_NEG_INF = float("-inf")


def _default_tile_scores(q_tile: Tensor, k_tile: Tensor) -> Tensor:
    return q_tile @ k_tile.transpose(-2, -1)


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> tuple[int, int, int, int, int, int]:
    if not (isinstance(q, Tensor) and isinstance(k, Tensor) and isinstance(v, Tensor)):
        raise ValueError("q, k and v must be tensors")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be 4-D, got {q.dim()}, {k.dim()}, {v.dim()} dims")
    if k.shape != v.shape:
        raise ValueError(f"k and v differ in shape: {tuple(k.shape)} vs {tuple(v.shape)}")
    B, Hq, Tq, D = q.shape
    Bk, Hkv, Tk, Dk = k.shape
    if B != Bk:
        raise ValueError(f"q and k differ in batch size: {B} vs {Bk}")
    if D != Dk:
        raise ValueError(f"q and k differ in head dim: {D} vs {Dk}")
    if Hkv < 1 or Hq % Hkv != 0:
        raise ValueError(f"Hq={Hq} is not a multiple of Hkv={Hkv}")
    return B, Hq, Hkv, Tq, Tk, D


def _check_block(name: str, b) -> int:
    if isinstance(b, bool) or not isinstance(b, int):
        try:
            ok = int(b) == b
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"{name} must be an integer >= 1, got {b!r}")
        b = int(b)
    if b < 1:
        raise ValueError(f"{name} must be >= 1, got {b}")
    return b


def _resolve_scale(scale: float | None, D: int) -> float:
    return 1.0 / math.sqrt(D) if scale is None else float(scale)


def _forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool,
    block_q: int,
    block_k: int,
    scale: float,
    tile_scores: TileScores | None,
) -> tuple[Tensor, Tensor]:
    """Tiled online-softmax forward. Returns (out fp32 (B, Hq, Tq, D), lse fp32 (B, Hq, Tq))."""
    B, Hq, Tq, D = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    G = Hq // Hkv
    scores_fn = tile_scores if tile_scores is not None else _default_tile_scores
    offset = Tk - Tq  # bottom-right causal: query i sits at position i + offset

    # Upcast; q viewed as (B, Hkv, G, Tq, D) so query head h = kv * G + g reads kv head h // G.
    qf = q.float().reshape(B, Hkv, G, Tq, D)
    kf = k.float().unsqueeze(2)  # (B, Hkv, 1, Tk, D)
    vf = v.float().unsqueeze(2)

    out = torch.zeros(B, Hkv, G, Tq, D, dtype=torch.float32, device=q.device)
    lse = torch.full((B, Hkv, G, Tq), _NEG_INF, dtype=torch.float32, device=q.device)

    for i0 in range(0, Tq, block_q):
        i1 = min(i0 + block_q, Tq)
        rows = i1 - i0
        q_tile = qf[..., i0:i1, :]
        m = torch.full((B, Hkv, G, rows), _NEG_INF, dtype=torch.float32, device=q.device)
        lsum = torch.zeros(B, Hkv, G, rows, dtype=torch.float32, device=q.device)
        acc = torch.zeros(B, Hkv, G, rows, D, dtype=torch.float32, device=q.device)
        last_visible = (i1 - 1) + offset  # the last key the block's last query sees
        for j0 in range(0, Tk, block_k):
            if causal and j0 > last_visible:
                break  # this tile and every later one lie wholly in the future
            j1 = min(j0 + block_k, Tk)
            s = scores_fn(q_tile, kf[..., j0:j1, :]).float() * scale  # (B, Hkv, G, rows, cols)
            if causal and j1 - 1 > i0 + offset:  # some entry of the tile is in the future
                qpos = torch.arange(i0, i1, device=q.device).unsqueeze(1) + offset
                kpos = torch.arange(j0, j1, device=q.device).unsqueeze(0)
                s = s.masked_fill(kpos > qpos, _NEG_INF)
            m_new = torch.maximum(m, s.amax(dim=-1))
            # rows that have seen no key yet keep m = -inf; use 0 there so exp never sees -inf - -inf
            m_safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)
            alpha = torch.exp(m - m_safe)  # rescale of what was summed so far (0 when m was -inf)
            p = torch.exp(s - m_safe.unsqueeze(-1))
            lsum = lsum * alpha + p.sum(dim=-1)
            acc = acc * alpha.unsqueeze(-1) + p @ vf[..., j0:j1, :]
            m = m_new
        seen = lsum > 0
        l_safe = torch.where(seen, lsum, torch.ones_like(lsum))
        out[..., i0:i1, :] = torch.where(
            seen.unsqueeze(-1), acc / l_safe.unsqueeze(-1), torch.zeros_like(acc)
        )
        lse[..., i0:i1] = torch.where(seen, m + torch.log(l_safe), torch.full_like(lsum, _NEG_INF))

    return out.reshape(B, Hq, Tq, D), lse.reshape(B, Hq, Tq)


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
    """
    B, Hq, Hkv, Tq, Tk, D = _check_qkv(q, k, v)
    block_q = _check_block("block_q", block_q)
    block_k = _check_block("block_k", block_k)
    sc = _resolve_scale(scale, D)
    out, lse = _forward(q, k, v, bool(causal), block_q, block_k, sc, tile_scores)
    out = out.to(q.dtype)
    if return_lse:
        return out, lse
    return out


def merge_partials(partials: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    """Attention over the union of disjoint key sets, from each set's (out (..., D), lse (...)).

    lse = log(sum_s exp(lse_s)), out = sum_s exp(lse_s - lse) * out_s, computed around the max lse
    so nothing overflows; lse -inf partials add nothing; all -inf gives zeros and -inf.
    """
    partials = list(partials)
    if len(partials) == 0:
        raise ValueError("merge_partials needs at least one partial")
    out0, lse0 = partials[0]
    if out0.dim() < 1 or tuple(out0.shape[:-1]) != tuple(lse0.shape):
        raise ValueError(f"out {tuple(out0.shape)} and lse {tuple(lse0.shape)} do not match")
    for o, lsum in partials[1:]:
        if o.shape != out0.shape or lsum.shape != lse0.shape:
            raise ValueError(
                f"partials differ in shape: {tuple(o.shape)}/{tuple(lsum.shape)} vs "
                f"{tuple(out0.shape)}/{tuple(lse0.shape)}"
            )
    out_dtype = out0.dtype
    for o, _ in partials[1:]:
        out_dtype = torch.promote_types(out_dtype, o.dtype)

    lses = torch.stack([lsum.float() for _, lsum in partials])  # (S, ...)
    outs = torch.stack([o.float() for o, _ in partials])  # (S, ..., D)
    m = lses.amax(dim=0)
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    w = torch.exp(lses - m_safe)  # (S, ...), 0 for -inf partials
    total = w.sum(dim=0)
    seen = total > 0
    total_safe = torch.where(seen, total, torch.ones_like(total))
    lse = torch.where(seen, m_safe + torch.log(total_safe), torch.full_like(total, _NEG_INF))
    out = (outs * (w / total_safe).unsqueeze(-1)).sum(dim=0)
    out = torch.where(seen.unsqueeze(-1), out, torch.zeros_like(out))
    return out.to(out_dtype), lse


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
    partial (out, lse) from exactly one tile_scores call, and merge_partials combines them.
    """
    B, Hq, Hkv, Tq, Tk, D = _check_qkv(q, k, v)
    if isinstance(splits, bool) or not isinstance(splits, int):
        raise ValueError(f"splits must be an integer, got {splits!r}")
    if not 1 <= splits <= Tk:
        raise ValueError(f"splits must satisfy 1 <= splits <= Tk={Tk}, got {splits}")
    sc = _resolve_scale(scale, D)
    k_chunks = torch.tensor_split(k, splits, dim=2)
    v_chunks = torch.tensor_split(v, splits, dim=2)
    partials = []
    for kc, vc in zip(k_chunks, v_chunks):
        # one tile: all Tq queries by all of the chunk's keys -> exactly one tile_scores call
        partials.append(_forward(q, kc, vc, False, max(Tq, 1), kc.shape[2], sc, tile_scores))
    out, _ = merge_partials(partials)
    return out.to(q.dtype)


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

    P = exp(scale * s - lse) per tile from the lse given, D_i = rowsum(dout * out) from the out given,
    dS = P * (dP - D_i), dP = dout v^T. Query heads sharing a kv head sum into its dk, dv.
    """
    B, Hq, Hkv, Tq, Tk, D = _check_qkv(q, k, v)
    block_q = _check_block("block_q", block_q)
    block_k = _check_block("block_k", block_k)
    if out.shape != q.shape or dout.shape != q.shape or tuple(lse.shape) != (B, Hq, Tq):
        raise ValueError("out, dout must be (B, Hq, Tq, D) and lse (B, Hq, Tq)")
    sc = _resolve_scale(scale, D)
    G = Hq // Hkv
    offset = Tk - Tq
    dev = q.device

    qf = q.float().reshape(B, Hkv, G, Tq, D)
    kf = k.float().unsqueeze(2)  # (B, Hkv, 1, Tk, D)
    vf = v.float().unsqueeze(2)
    of = out.float().reshape(B, Hkv, G, Tq, D)
    dof = dout.float().reshape(B, Hkv, G, Tq, D)
    lf = lse.float().reshape(B, Hkv, G, Tq)
    # lse -inf (query saw no key): use +inf so every P entry of that row is exp(-inf) = 0
    lf = torch.where(torch.isneginf(lf), torch.full_like(lf, float("inf")), lf)
    Dvec = (dof * of).sum(dim=-1)  # (B, Hkv, G, Tq)

    dq = torch.zeros(B, Hkv, G, Tq, D, dtype=torch.float32, device=dev)
    dk = torch.zeros(B, Hkv, Tk, D, dtype=torch.float32, device=dev)
    dv = torch.zeros(B, Hkv, Tk, D, dtype=torch.float32, device=dev)

    for j0 in range(0, Tk, block_k):
        j1 = min(j0 + block_k, Tk)
        k_t = kf[..., j0:j1, :]
        v_t = vf[..., j0:j1, :]
        dk_acc = torch.zeros(B, Hkv, j1 - j0, D, dtype=torch.float32, device=dev)
        dv_acc = torch.zeros(B, Hkv, j1 - j0, D, dtype=torch.float32, device=dev)
        for i0 in range(0, Tq, block_q):
            i1 = min(i0 + block_q, Tq)
            if causal and j0 > (i1 - 1) + offset:
                continue
            q_t = qf[..., i0:i1, :]
            do_t = dof[..., i0:i1, :]
            s = (q_t @ k_t.transpose(-2, -1)) * sc  # (B, Hkv, G, rows, cols)
            if causal and j1 - 1 > i0 + offset:
                qpos = torch.arange(i0, i1, device=dev).unsqueeze(1) + offset
                kpos = torch.arange(j0, j1, device=dev).unsqueeze(0)
                s = s.masked_fill(kpos > qpos, _NEG_INF)
            p = torch.exp(s - lf[..., i0:i1].unsqueeze(-1))
            dv_acc += (p.transpose(-2, -1) @ do_t).sum(dim=2)
            dp = do_t @ v_t.transpose(-2, -1)
            ds = p * (dp - Dvec[..., i0:i1].unsqueeze(-1))
            dq[..., i0:i1, :] += (ds @ k_t) * sc
            dk_acc += (ds.transpose(-2, -1) @ q_t).sum(dim=2) * sc
        dk[..., j0:j1, :] = dk_acc
        dv[..., j0:j1, :] = dv_acc

    return dq.reshape(B, Hq, Tq, D).to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class FlashAttentionFunction(torch.autograd.Function):
    """Optional. `FlashAttentionFunction.apply(q, k, v, causal, block_q, block_k, scale)`: flash_attention's
    output, differentiable through flash_attention_backward (save q, k, v, out and lse, never the weights)."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=64, block_k=64, scale=None):
        out, lse = flash_attention(
            q, k, v, causal=causal, block_q=block_q, block_k=block_k, scale=scale, return_lse=True
        )
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.block_q, ctx.block_k, ctx.scale = causal, block_q, block_k, scale
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
