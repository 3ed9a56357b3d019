"""Masked scaled dot-product attention (causal, padding, cross-attention, grouped-query)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

_HALF = (torch.float16, torch.bfloat16)


def causal_mask(tq: int, tk: int, device: torch.device | str = "cpu") -> Tensor:
    """(Tq, Tk) bool, True where query i may see key j: j <= i + (Tk - Tq)."""
    if tq < 0 or tk < 0:
        raise ValueError(f"causal_mask: sizes must be non-negative, got tq={tq}, tk={tk}")
    i = torch.arange(tq, device=device).unsqueeze(1)
    j = torch.arange(tk, device=device).unsqueeze(0)
    return j <= i + (tk - tq)


def _check_inputs(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise ValueError(f"{name} must be a tensor, got {type(t).__name__}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"q, k, v must be 4-D (B, H, T, D); got q {tuple(q.shape)}, k {tuple(k.shape)}, "
            f"v {tuple(v.shape)}"
        )
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape; got k {tuple(k.shape)}, v {tuple(v.shape)}")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(
            f"q and k must agree in batch and head_dim; got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )
    hq, hkv = q.shape[1], k.shape[1]
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(
            f"Hq must be a multiple of Hkv; got q {tuple(q.shape)} (Hq={hq}), k {tuple(k.shape)} (Hkv={hkv})"
        )


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
    """softmax(q k^T * scale + masks) v for q (B, Hq, Tq, D), k and v (B, Hkv, Tk, D)."""
    _check_inputs(q, k, v)
    B, Hq, Tq, D = q.shape
    _, Hkv, Tk, _ = k.shape
    full = (B, Hq, Tq, Tk)

    if key_padding_mask is not None:
        if (
            not isinstance(key_padding_mask, Tensor)
            or key_padding_mask.dtype != torch.bool
            or tuple(key_padding_mask.shape) != (B, Tk)
        ):
            desc = (
                f"{getattr(key_padding_mask, 'dtype', type(key_padding_mask).__name__)} "
                f"{tuple(getattr(key_padding_mask, 'shape', ()))}"
            )
            raise ValueError(
                f"key_padding_mask must be a ({B}, {Tk}) bool tensor for k {tuple(k.shape)}; got {desc}"
            )
    if attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            raise ValueError(f"attn_mask must be a tensor, got {type(attn_mask).__name__}")
        if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
            raise ValueError(f"attn_mask must be bool or floating point, got {attn_mask.dtype}")
        try:
            ok = attn_mask.dim() <= 4 and torch.broadcast_shapes(attn_mask.shape, full) == full
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to {full}")

    work = torch.float32 if q.dtype in _HALF else q.dtype
    if scale is None:
        scale = 1.0 / math.sqrt(D)

    group = Hq // Hkv
    kk = k.to(work)
    vv = v.to(work)
    if group > 1:
        kk = kk.repeat_interleave(group, dim=1)
        vv = vv.repeat_interleave(group, dim=1)

    scores = torch.matmul(q.to(work), kk.transpose(-1, -2)) * scale

    visible = torch.ones(full, dtype=torch.bool, device=q.device)
    if causal:
        visible = visible & causal_mask(Tq, Tk, device=q.device)
    if key_padding_mask is not None:
        visible = visible & key_padding_mask.to(q.device)[:, None, None, :]
    if attn_mask is not None:
        m = attn_mask.to(q.device)
        if m.dtype == torch.bool:
            visible = visible & m
        else:
            m = m.to(work)
            visible = visible & (m != float("-inf"))
            scores = scores + m

    scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    any_visible = visible.any(dim=-1, keepdim=True)
    probs = torch.where(any_visible, probs, torch.zeros((), dtype=work, device=q.device))
    out = torch.matmul(probs, vv)
    return out.to(q.dtype)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with projections: self-attention, or cross-attention given `context`."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        d_context: int | None = None,
        bias: bool = False,
    ):
        super().__init__()
        if n_kv_heads is None:
            n_kv_heads = n_heads
        if d_context is None:
            d_context = d_model
        for name, val in (
            ("d_model", d_model),
            ("n_heads", n_heads),
            ("n_kv_heads", n_kv_heads),
            ("d_context", d_context),
        ):
            if not isinstance(val, int) or isinstance(val, bool) or val <= 0:
                raise ValueError(f"{name} must be a positive int, got {val!r}")
        if d_model % n_heads != 0:
            raise ValueError(f"n_heads={n_heads} must divide d_model={d_model}")
        if n_heads % n_kv_heads != 0:
            raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.d_context = d_context
        self.head_dim = d_model // n_heads
        kv_dim = n_kv_heads * self.head_dim
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_context, kv_dim, bias=bias)
        self.v_proj = nn.Linear(d_context, kv_dim, bias=bias)
        self.o_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, {self.d_model}), got {tuple(getattr(x, 'shape', ()))}")
        src = x if context is None else context
        if not isinstance(src, Tensor) or src.dim() != 3 or src.shape[-1] != self.d_context:
            raise ValueError(
                f"context must be (B, S, {self.d_context}), got {tuple(getattr(src, 'shape', ()))}"
            )
        if src.shape[0] != x.shape[0]:
            raise ValueError(f"x {tuple(x.shape)} and context {tuple(src.shape)} differ in batch size")
        B, T, _ = x.shape
        S = src.shape[1]
        hd = self.head_dim
        q = self.q_proj(x).view(B, T, self.n_heads, hd).transpose(1, 2)
        k = self.k_proj(src).view(B, S, self.n_kv_heads, hd).transpose(1, 2)
        v = self.v_proj(src).view(B, S, self.n_kv_heads, hd).transpose(1, 2)
        out = attention(q, k, v, causal=causal, key_padding_mask=key_padding_mask)
        out = out.transpose(1, 2).reshape(B, T, self.d_model)
        return self.o_proj(out)
