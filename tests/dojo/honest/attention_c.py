"""Kata: masked scaled dot-product attention, written with explicit grouped-query reshapes."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def causal_mask(tq: int, tk: int, device: torch.device | str = "cpu") -> Tensor:
    """(Tq, Tk) bool, bottom-right aligned: query i sees key j iff j <= i + (Tk - Tq)."""
    if min(tq, tk) < 0:
        raise ValueError(f"negative size: tq={tq}, tk={tk}")
    ones = torch.ones(tq, tk, dtype=torch.bool, device=device)
    return torch.tril(ones, diagonal=tk - tq)


def _shape(t) -> str:
    return str(tuple(t.shape)) if isinstance(t, Tensor) else type(t).__name__


def _validate(q, k, v, key_padding_mask, attn_mask) -> None:
    shapes = f"q {_shape(q)}, k {_shape(k)}, v {_shape(v)}"
    if not all(isinstance(t, Tensor) and t.ndim == 4 for t in (q, k, v)):
        raise ValueError(f"q, k and v must be 4-D tensors: {shapes}")
    if k.shape != v.shape:
        raise ValueError(f"k and v shapes differ: {shapes}")
    (b, hq, tq, d), (bk, hkv, tk, dk) = q.shape, k.shape
    if b != bk:
        raise ValueError(f"batch size differs between q and k: {shapes}")
    if d != dk:
        raise ValueError(f"head dim differs between q and k: {shapes}")
    if hkv < 1 or hq % hkv:
        raise ValueError(f"query heads {hq} are not a multiple of kv heads {hkv}: {shapes}")
    if key_padding_mask is not None:
        if (
            not isinstance(key_padding_mask, Tensor)
            or key_padding_mask.shape != (b, tk)
            or key_padding_mask.dtype is not torch.bool
        ):
            raise ValueError(
                f"key_padding_mask must be bool of shape ({b}, {tk}); got "
                f"{_shape(key_padding_mask)} {getattr(key_padding_mask, 'dtype', '')} ({shapes})"
            )
    if attn_mask is not None:
        target = (b, hq, tq, tk)
        if not isinstance(attn_mask, Tensor):
            raise ValueError(f"attn_mask must be a tensor, got {type(attn_mask).__name__}")
        if not (attn_mask.dtype is torch.bool or attn_mask.dtype.is_floating_point):
            raise ValueError(f"attn_mask must be bool or float, got {attn_mask.dtype}")
        ms = tuple(attn_mask.shape)
        good = len(ms) <= 4 and all(m in (1, t) for m, t in zip(reversed(ms), reversed(target)))
        if not good:
            raise ValueError(f"attn_mask {ms} does not broadcast to {target} ({shapes})")


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    attn_mask: Tensor | None = None,
    scale: float | None = None,
) -> Tensor:
    """softmax(q k^T * scale + masks) v for q (B, Hq, Tq, D), k and v (B, Hkv, Tk, D) -> (B, Hq, Tq, D)."""
    _validate(q, k, v, key_padding_mask, attn_mask)
    b, hq, tq, d = q.shape
    hkv, tk = k.shape[1], k.shape[2]
    g = hq // hkv
    acc = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    s = (1.0 / math.sqrt(d)) if scale is None else float(scale)

    # (B, Hkv, G, Tq, D): the g query heads of a group sit next to their kv head
    qg = q.to(acc).reshape(b, hkv, g, tq, d)
    kg = k.to(acc).unsqueeze(2)  # (B, Hkv, 1, Tk, D)
    vg = v.to(acc).unsqueeze(2)
    logits = torch.einsum("bhgqd,bhgkd->bhgqk", qg, kg.expand(b, hkv, g, tk, d)) * s
    logits = logits.reshape(b, hq, tq, tk)

    keep = None

    def both(a, c):
        return c if a is None else a & c

    if causal:
        keep = both(keep, causal_mask(tq, tk, device=q.device).view(1, 1, tq, tk))
    if key_padding_mask is not None:
        keep = both(keep, key_padding_mask.to(q.device).view(b, 1, 1, tk))
    if attn_mask is not None:
        if attn_mask.dtype is torch.bool:
            keep = both(keep, attn_mask.to(q.device))
        else:
            bias = attn_mask.to(device=q.device, dtype=acc)
            logits = logits + bias
            keep = both(keep, bias != -math.inf)
    if keep is None:
        keep = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=q.device)
    keep = keep.expand(b, hq, tq, tk)

    # numerically stable softmax over visible keys only; blind rows become zeros
    neg = torch.finfo(acc).min
    masked = logits.masked_fill(~keep, neg)
    row_max = masked.amax(dim=-1, keepdim=True) if tk else masked.sum(-1, keepdim=True)
    w = torch.exp(masked - row_max) * keep
    denom = w.sum(dim=-1, keepdim=True)
    w = w / denom.clamp_min(torch.finfo(acc).tiny)

    out = torch.einsum("bhgqk,bhgkd->bhgqd", w.reshape(b, hkv, g, tq, tk), vg.expand(b, hkv, g, tk, d))
    return out.reshape(b, hq, tq, d).to(q.dtype)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with q/k/v/o projections; grouped-query when n_kv_heads < n_heads."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        d_context: int | None = None,
        bias: bool = False,
    ):
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        d_context = d_model if d_context is None else d_context
        if n_heads <= 0 or d_model <= 0 or d_context <= 0 or n_kv_heads <= 0:
            raise ValueError(
                f"sizes must be positive: d_model={d_model}, n_heads={n_heads}, "
                f"n_kv_heads={n_kv_heads}, d_context={d_context}"
            )
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads={n_heads} is not divisible by n_kv_heads={n_kv_heads}")
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads
        self.head_dim = d_model // n_heads
        self.d_model, self.d_context = d_model, d_context
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_context, n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(d_context, n_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(d_model, d_model, bias=bias)

    def _heads(self, t: Tensor, n: int) -> Tensor:
        bsz, length, _ = t.shape
        return t.unflatten(-1, (n, self.head_dim)).permute(0, 2, 1, 3)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        if x.ndim != 3 or x.shape[2] != self.d_model:
            raise ValueError(f"x must be (B, T, d_model={self.d_model}), got {tuple(x.shape)}")
        kv_src = x if context is None else context
        if kv_src.ndim != 3 or kv_src.shape[2] != self.d_context or kv_src.shape[0] != x.shape[0]:
            raise ValueError(
                f"context must be (B={x.shape[0]}, S, d_context={self.d_context}), got {tuple(kv_src.shape)}"
            )
        q = self._heads(self.q_proj(x), self.n_heads)
        k = self._heads(self.k_proj(kv_src), self.n_kv_heads)
        v = self._heads(self.v_proj(kv_src), self.n_kv_heads)
        y = attention(q, k, v, causal=causal, key_padding_mask=key_padding_mask)
        return self.o_proj(y.permute(0, 2, 1, 3).flatten(2))
